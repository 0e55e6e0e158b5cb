"""Control-plane overhead on the CPU backend, side by side in one run.

    .venv/bin/python bench/control_plane.py --out bench/results

Measures, on the same machine and data:
- submit → RUNNING latency (POST /jobs until GET /jobs/{id} says RUNNING);
- GET /jobs/{id} requests per second (one client, sequential, keep-alive);
- end-to-end time of a trivial job through the service (submit → SUCCEEDED), seen two ways:
  a client polling ``GET /jobs/{id}`` without pause, and the SDK's ``wait`` on the SSE stream
  (what the CLI and ``bench/gpu_tpch.py`` use);
- the same job run directly: on the Dask engine the same graph with a Dask client on an equal
  LocalCluster (build, compute, write); on the Polars engine the same LazyFrame collected and
  written in this process (plan, collect, write);
- how long POST /jobs/{id}/cancel takes to return a running job as CANCELLED (tasks released);
and reports the overhead in milliseconds and as a ratio.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.samples import write_sample_data  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.status import JobStatus  # noqa: E402
from spillway.service.client import SpillwayClient  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402


def trivial_spec(data: Path, sink: Path) -> dict[str, Any]:
    return {"name": "trivial", "source": {"format": "parquet", "path": str(data)}, "steps": [{"op": "filter", "expr": "amount > 0"}, {"op": "select", "columns": ["order_id", "amount"]}], "sink": {"path": str(sink)}}


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def through_service(work: Path, data: Path, runs: int, engine: str) -> dict[str, Any]:
    env = {
        "SPILLWAY_CLUSTER__BACKEND": "pandas", "SPILLWAY_CLUSTER__N_WORKERS": "2", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0",
        "SPILLWAY_MAX_CONCURRENT_JOBS": "1", "SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]), "SPILLWAY_DEFAULT_ENGINE": engine,
    }
    service = launch_service(work / f"svc_{engine}", env)
    to_running: list[float] = []
    end_to_end: list[float] = []
    through_sse: list[float] = []
    try:
        with SpillwayClient(service.url) as sdk:
            for i in range(runs + 1):
                start = time.perf_counter()
                job = sdk.wait(sdk.submit(trivial_spec(data, work / f"out_sse_{engine}_{i}")).id, timeout=60)
                assert job.state == JobStatus.SUCCEEDED, job.state
                if i:
                    through_sse.append(time.perf_counter() - start)
        with httpx.Client(base_url=service.url, timeout=60) as http:
            for i in range(runs + 1):
                start = time.perf_counter()
                job_id = http.post("/jobs", json=trivial_spec(data, work / f"out_svc_{engine}_{i}")).json()["id"]
                running_at = None
                while True:
                    state = http.get(f"/jobs/{job_id}").json()["state"]
                    now = time.perf_counter()
                    if running_at is None and state != JobStatus.PENDING.value:
                        running_at = now
                    if JobStatus(state).is_terminal():
                        break
                assert state == JobStatus.SUCCEEDED.value, state
                if i:  # the first run warms the cluster up
                    to_running.append(running_at - start)
                    end_to_end.append(now - start)
            cancel_ms: list[float] = []
            for i in range(3):
                heavy = {**trivial_spec(data, work / f"out_cancel_{engine}_{i}"), "steps": [{"op": "sort", "by": ["amount"]}, {"op": "sort", "by": ["customer_id"]}]}
                job_id = http.post("/jobs", json=heavy).json()["id"]
                while http.get(f"/jobs/{job_id}").json()["progress"]["stages"] == []:
                    time.sleep(0.01)
                start = time.perf_counter()
                answer = http.post(f"/jobs/{job_id}/cancel")
                if answer.status_code == 409:  # it ended first (a small --rows): no cancel to time
                    continue
                cancel_ms.append((time.perf_counter() - start) * 1000)
                assert answer.json()["state"] == JobStatus.CANCELLED.value, answer.text
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < 5.0:
                http.get(f"/jobs/{job_id}").raise_for_status()
                count += 1
            rps = count / (time.perf_counter() - start)
    finally:
        service.stop()
    return {
        "submit_to_running_ms": median_ms(to_running),
        "end_to_end_ms": median_ms(end_to_end),
        "end_to_end_sse_ms": median_ms(through_sse),
        "get_job_rps": round(rps, 1),
        "cancel_running_job_ms": [round(x, 1) for x in cancel_ms],
        "runs": runs,
    }


def _polars_runs(data: Path, sinks: list[Path], queue: Any) -> None:
    from spillway.jobs.polars_frame import build_lazyframe
    from spillway.jobs.validate import plan_spec

    times = []
    for sink in sinks:
        start = time.perf_counter()
        spec = JobSpec.model_validate(trivial_spec(data, sink))
        sink.mkdir(parents=True)
        build_lazyframe(plan_spec(spec), filters_before_casts=True).collect(engine="streaming").write_parquet(sink / "part.0.parquet")
        times.append(time.perf_counter() - start)
    queue.put(times)


def direct_polars(work: Path, data: Path, runs: int, threads: int) -> dict[str, Any]:
    """The Polars engine's own work in a fresh process with the worker's threads: plan from the spec, collect, write."""
    context = multiprocessing.get_context("spawn")
    os.environ["POLARS_MAX_THREADS"] = str(threads)  # read by Polars when the child imports it
    queue = context.Queue()
    child = context.Process(target=_polars_runs, args=(data, [work / f"out_direct_polars_{i}" for i in range(runs + 1)], queue))
    child.start()
    times = queue.get(timeout=600)[1:]  # the first run warms up
    child.join()
    return {"end_to_end_ms": median_ms(times), "runs": runs, "threads": threads}


def direct_dask(work: Path, data: Path, runs: int) -> dict[str, Any]:
    import dask
    from distributed import Client, LocalCluster

    from spillway.jobs.pipeline import backend_config, build_frame

    times: list[float] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        for i in range(runs + 1):
            start = time.perf_counter()
            spec = JobSpec.model_validate(trivial_spec(data, work / f"out_direct_{i}"))
            with backend_config("pandas"):
                frame = build_frame(spec)
                dask.compute(frame.to_parquet(spec.sink.path, compute=False, write_index=False))
            if i:
                times.append(time.perf_counter() - start)
    return {"end_to_end_ms": median_ms(times), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--engines", default="polars,dask", help="comma-separated: polars, dask (default both)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", "rows": args.rows}
    direct_run = {"polars": lambda work, data, runs: direct_polars(work, data, runs, threads=1), "dask": direct_dask}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = write_sample_data(work / "data", rows=args.rows, files=8)["sales"]
        for engine in args.engines.split(","):
            service = through_service(work, data, args.runs, engine)
            direct = direct_run[engine](work, data, args.runs)
            result[engine] = {
                "service": service,
                "direct": direct,
                "overhead_ms": round(service["end_to_end_ms"] - direct["end_to_end_ms"], 2),
                "overhead_sse_ms": round(service["end_to_end_sse_ms"] - direct["end_to_end_ms"], 2),
                "overhead_ratio": round(service["end_to_end_ms"] / direct["end_to_end_ms"], 3),
            }
    (args.out / "control_plane.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
