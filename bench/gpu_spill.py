"""A device limit below the working set: the same TPC-H jobs on one GPU, unconstrained and constrained, side by side.

Two services on the same GPU and the same files, one after the other: ``device_memory_limit``
left to dask-cuda's default (the jobs fit, so they run in memory), then set below the jobs'
working sets, so Spillway places them on cudf-polars' streaming executor, which spills to host
above the limit (jobs/gpu_placement.py). Then, as the peer, the same LazyFrames collected by
cudf-polars' streaming executor directly, in a fresh process under the same spill limit. For
each query: the seconds each way, the executor each ran on, the bytes spilled, and whether the
answers are equal::

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site \\
        python3 bench/gpu_spill.py --out $OUT --data /tmp/spw_tpch/sf10 --limit 2GB --queries q01,q09,q18

The data is that of bench/gpu_tpch.py (tpchgen-cli parquet, one directory per table).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log, service_env  # noqa: E402
from bench.gpu_tpch import committed, same_answer  # noqa: E402
from bench.tpch_examples import load_spec  # noqa: E402
from spillway.cluster.settings import parse_memory  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402


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


def _direct_runs(data: Path, work: Path, queries: list[str], limit_bytes: int, iterations: int, queue: Any) -> None:
    """In a fresh process: each query's LazyFrame collected by cudf-polars' streaming executor under ``limit_bytes``."""
    from spillway.jobs.gpu_streaming import streaming_gpu_engine, take_spilled_bytes
    from spillway.jobs.polars_frame import build_lazyframe
    from spillway.jobs.spec import JobSpec
    from spillway.jobs.validate import plan_spec

    engine = streaming_gpu_engine(limit_bytes)  # the limit is read when the engine is first built: before any query
    results: dict[str, Any] = {}
    for query in queries:
        sink = work / "out_direct" / query
        sink.mkdir(parents=True, exist_ok=True)
        frame = build_lazyframe(plan_spec(JobSpec.model_validate(load_spec(query, data, sink))))
        for _ in range(iterations):
            start = time.perf_counter()
            frame.collect(engine=engine).write_parquet(sink / "part.0.parquet")
            seconds = time.perf_counter() - start
            spilled = take_spilled_bytes()
        results[query] = {"seconds": round(seconds, 3), "spilled_bytes": spilled, "sink": str(sink)}
    queue.put(results)


def direct(data: Path, work: Path, queries: list[str], limit: str, iterations: int) -> dict[str, Any]:
    """cudf-polars streaming without the service, under the limit the constrained service ran with."""
    limit_bytes = parse_memory(limit, field="limit")
    assert limit_bytes is not None
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_direct_runs, args=(data, work, queries, limit_bytes, iterations, queue))
    child.start()
    results = queue.get(timeout=580)
    child.join()
    for query, result in results.items():
        log(f"direct streaming {query}: {result['seconds']:.2f} s, spilled {result['spilled_bytes']}")
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
    peer = direct(data, args.work, queries, args.limit, args.iterations)
    table = [
        f"| query | default limit, s | placement | limit {args.limit}, s | placement | spilled, GiB | cudf-polars streaming direct, limit {args.limit}, s "
        "| its spilled, GiB | Spillway ÷ direct | same answers |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for query in queries:
        a, b, c = roomy[query], tight[query], peer[query]
        expected = committed(Path(a["sink"]))
        same = (same_answer(committed(Path(b["sink"])), expected, rtol=1e-6) is None
                and same_answer(pd.read_parquet(Path(c["sink"]) / "part.0.parquet"), expected, rtol=1e-6) is None)
        spilled = [f"{x['spilled_bytes'] / 2**30:.2f}" if x["spilled_bytes"] is not None else "n/a" for x in (b, c)]
        table.append(f"| {query} | {a['seconds']:.2f} | {a['placement']} | {b['seconds']:.2f} | {b['placement']} | {spilled[0]} "
                     f"| {c['seconds']:.2f} | {spilled[1]} | {b['seconds'] / c['seconds']:.2f}× | {same} |")
    (args.out / "gpu_spill.json").write_text(json.dumps(
        {"args": vars(args) | {"out": str(args.out), "data": str(args.data), "work": str(args.work)}, "default": roomy, "limited": tight, "direct": peer}, indent=1))
    (args.out / "gpu_spill.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
