"""What cudf-polars' traces say while a query runs, and what they cost (run on the GPU machine).

    python3 bench/gpu_trace_probe.py --data /tmp/spw_tpch/sf10 --out $OUT

For each executor (in-memory, streaming) and each query, in a fresh process with
``CUDF_POLARS_LOG_TRACES`` on and another with it off: the query's time (second of two runs),
how many trace events it logged, their names and fields (a sample), so that live GPU progress
can be built on what the events really carry. Spillway's own LazyFrames from examples/tpch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, collections
sys.path.insert(0, {root!r})
import structlog
events = []
structlog.configure(processors=[lambda logger, name, event: events.append(dict(event)) or ""], logger_factory=structlog.ReturnLoggerFactory())
import polars as pl
from pathlib import Path
from bench.tpch_examples import load_spec
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from spillway.jobs.polars_frame import build_lazyframe
executor = {executor!r}
engine = pl.GPUEngine(executor=executor, raise_on_fail=True)
out = {{}}
for query in {queries!r}:
    spec = JobSpec.model_validate(load_spec(query, Path({data!r}), Path("/tmp/trace_probe_out") / query))
    frame = build_lazyframe(plan_spec(spec))
    times = []
    for _ in range(2):
        events.clear()
        start = time.perf_counter()
        frame.collect(engine=engine)
        times.append(time.perf_counter() - start)
    names = collections.Counter(str(e.get("event")) for e in events)
    out[query] = {{"seconds": times, "events": len(events), "names": dict(names.most_common(12)),
                   "sample": [{{k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)[:120]) for k, v in e.items()}} for e in events[:6]]}}
print("RESULT" + json.dumps(out))
"""


def run(data: Path, executor: str, traces: bool, queries: list[str]) -> dict:
    Path("/tmp/trace_probe_out").mkdir(exist_ok=True)
    for query in queries:
        (Path("/tmp/trace_probe_out") / query).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CUDF_POLARS_LOG_TRACES": "1" if traces else "0"}
    code = CHILD.format(root=str(ROOT), executor=executor, queries=queries, data=str(data))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=280)
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT")), None)
    if line is None:
        return {"error": (done.stderr or done.stdout)[-3000:]}
    return json.loads(line[len("RESULT"):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--queries", default="q01,q09,q18")
    args = parser.parse_args()
    queries = args.queries.split(",")
    report = {}
    for executor in ("in-memory", "streaming"):
        for traces in (False, True):
            key = f"{executor}, traces {'on' if traces else 'off'}"
            report[key] = run(args.data, executor, traces, queries)
            print(key, json.dumps({q: (r.get("seconds"), r.get("events"), r.get("names")) for q, r in report[key].items()} if "error" not in report[key] else report[key]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_trace_probe.json").write_text(json.dumps(report, indent=1))
    for key, result in report.items():
        if "error" in result:
            continue
        first = next(iter(result.values()))
        print(key, "sample events:", json.dumps(first["sample"])[:1500])


if __name__ == "__main__":
    main()
