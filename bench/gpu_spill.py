"""A device limit below the working set: the same TPC-H jobs on one GPU, unconstrained and constrained, side by side.

Two services on the same GPU and the same files, one after the other: ``device_memory_limit``
left to dask-cuda's default (the jobs fit, so they run in memory), then set below the jobs'
working sets, so Spillway places them on cudf-polars' streaming executor, which spills to host
above the limit (jobs/gpu_placement.py). For each query: the seconds both ways, the executor
each ran on, the bytes spilled, and whether the two answers are equal::

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site \\
        python3 bench/gpu_spill.py --out $OUT --data /tmp/spw_tpch/sf10 --limit 2GB --queries q01,q09,q18

The data is that of bench/gpu_tpch.py (tpchgen-cli parquet, one directory per table).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log, service_env  # noqa: E402
from bench.gpu_tpch import committed, same_answer  # noqa: E402
from bench.tpch_examples import load_spec  # noqa: E402
from service.launcher import launch_service  # noqa: E402


def run(data: Path, work: Path, queries: list[str], limit: str | None, iterations: int) -> dict[str, Any]:
    """Each query ``iterations`` times through a service whose workers have device limit ``limit`` (None: the default)."""
    name = f"limit_{limit or 'default'}"
    extra = {"SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work), str(data)])}
    if limit:
        extra["SPILLWAY_CLUSTER__DEVICE_MEMORY_LIMIT"] = limit
    service = launch_service(work / f"svc_{name}", service_env(work, "cudf", **extra), timeout=300)
    results: dict[str, Any] = {}
    try:
        with service.client() as client:
            for query in queries:
                for attempt in range(iterations):
                    sink = work / f"out_{name}" / f"{query}_{attempt}"
                    sink.parent.mkdir(parents=True, exist_ok=True)  # load_spec writes the filled spec beside the sink
                    start = time.perf_counter()
                    job = client.wait(client.submit({**load_spec(query, data, sink), "engine": "polars"}).id, timeout=580)
                    seconds = time.perf_counter() - start
                    if job.state.value != "SUCCEEDED":
                        raise RuntimeError(f"{query} under {name}: {job.state.value}: {job.error.message if job.error else ''}")
                    reason = job.progress.engine.reason if job.progress.engine else ""
                    spilled = job.resources.streaming_spilled_bytes if job.resources else None
                    results[query] = {"seconds": round(seconds, 3), "placement": reason.rsplit("; ", 1)[-1], "spilled_bytes": spilled, "sink": str(sink)}
                    log(f"{name} {query} #{attempt + 1}: {seconds:.2f} s, spilled {spilled}, {reason.rsplit('; ', 1)[-1]}")
    finally:
        service.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="TPC-H parquet: one directory per table.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw_spill"))
    parser.add_argument("--limit", default="2GB", help="The constrained run's device_memory_limit per worker.")
    parser.add_argument("--queries", default="q01,q09,q18")
    parser.add_argument("--iterations", type=int, default=2, help="Runs per query; the last is reported.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    queries = args.queries.split(",")
    data = args.data.resolve()
    roomy = run(data, args.work, queries, None, args.iterations)
    tight = run(data, args.work, queries, args.limit, args.iterations)
    table = ["| query | default limit, s | placement | limit " + args.limit + ", s | placement | spilled, GiB | same answer |", "|---|---|---|---|---|---|---|"]
    for query in queries:
        a, b = roomy[query], tight[query]
        same = same_answer(committed(Path(b["sink"])), committed(Path(a["sink"])), rtol=1e-6) is None
        spilled = f"{b['spilled_bytes'] / 2**30:.2f}" if b["spilled_bytes"] is not None else "n/a"
        table.append(f"| {query} | {a['seconds']:.2f} | {a['placement']} | {b['seconds']:.2f} | {b['placement']} | {spilled} | {same} |")
    (args.out / "gpu_spill.json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out), "data": str(args.data), "work": str(args.work)}, "default": roomy, "limited": tight}, indent=1))
    (args.out / "gpu_spill.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
