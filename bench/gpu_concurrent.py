"""Eight mid-size TPC-H jobs submitted at once to one GPU: how they share it, side by side.

Each scenario is a real service on the same H200 and the same files (bench/gpu_tpch.py's SF 10
data), its GPU workers given by ``CUDA_VISIBLE_DEVICES``: ``0`` (one worker: the jobs queue for
it), ``0,0`` and ``0,0,0,0`` (two and four workers sharing the GPU, ``allow_gpu_sharing``). In
each, the eight jobs go in one after the other as fast as the API takes them, the service allowed
to run all eight at once, and ``GET /cluster`` is polled while they run (which job runs on which
worker). Reported per scenario, from the second of two rounds: the makespan (first submit → last
end), the sum of the jobs' own run times, each job's queue wait, and the most jobs seen running
at once. Also, as the peer, the same eight run one at a time on the one-worker service::

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site \\
        python3 bench/gpu_concurrent.py --out $OUT --data /tmp/spw_tpch/sf10
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log, service_env  # noqa: E402
from bench.tpch_examples import load_spec  # noqa: E402
from spillway.service.launcher import ServiceProcess, launch_service  # noqa: E402

QUERIES = ("q01", "q03", "q05", "q06", "q09", "q10", "q12", "q18")


def _watch(service: ServiceProcess, stop: threading.Event, seen: list[dict[str, Any]]) -> None:
    """Poll GET /cluster's running list until ``stop``: who runs where, every 50 ms."""
    with service.client() as client:
        while not stop.is_set():
            running = client.cluster().running
            seen.append({"t": time.perf_counter(), "running": {job.id: sorted(job.workers) for job in running}})
            stop.wait(0.05)


def one_round(service: ServiceProcess, data: Path, out: Path, concurrent: bool) -> dict[str, Any]:
    """The eight jobs, all at once or one at a time; the round's makespan and each job's split."""
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(service, stop, seen), daemon=True)
    watcher.start()
    started = time.perf_counter()
    with service.client() as client:
        ids = []
        for query in QUERIES:
            sink = out / query
            sink.parent.mkdir(parents=True, exist_ok=True)
            job_id = client.submit({**load_spec(query, data, sink), "engine": "auto"}).id
            if not concurrent:
                client.wait(job_id, timeout=600)
            ids.append(job_id)
        jobs = [client.wait(job_id, timeout=600) for job_id in ids]
    makespan = time.perf_counter() - started
    stop.set()
    watcher.join()
    failed = [f"{job.name}: {job.state.value}" for job in jobs if job.state.value != "SUCCEEDED"]
    if failed:
        raise RuntimeError(f"jobs did not succeed: {failed}")
    records = []
    for query, job in zip(QUERIES, jobs):
        assert job.started_at and job.finished_at
        records.append({
            "query": query, "queue_s": round((job.started_at - job.created_at).total_seconds(), 3),
            "run_s": round((job.finished_at - job.started_at).total_seconds(), 3),
            "workers": sorted({w for snap in seen for w in snap["running"].get(job.id, [])}),
        })
    return {
        "makespan_s": round(makespan, 3), "sum_run_s": round(sum(r["run_s"] for r in records), 3),
        # Jobs the service runs at once, and of those, jobs whose task a worker holds (assigned or executing).
        "max_running_at_once": max((len(s["running"]) for s in seen), default=0),
        "max_on_workers_at_once": max((sum(1 for workers in s["running"].values() if workers) for s in seen), default=0),
        "jobs": records,
    }


def scenario(name: str, data: Path, work: Path, gpus: str, concurrent: bool) -> dict[str, Any]:
    extra = {
        "SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work), str(data)]), "SPILLWAY_MAX_CONCURRENT_JOBS": "8",
    }
    if len(set(gpus.split(","))) < len(gpus.split(",")):
        extra["SPILLWAY_CLUSTER__ALLOW_GPU_SHARING"] = "true"
    service = launch_service(work / f"svc_{name}", service_env(work, "cudf", gpus=gpus, **extra), timeout=300)
    try:
        rounds = [one_round(service, data, work / f"out_{name}_{i}", concurrent) for i in range(2)]
    finally:
        service.stop()
    result = rounds[-1]
    log(f"{name}: makespan {result['makespan_s']:.2f} s, jobs' run times summed {result['sum_run_s']:.2f} s, "
        f"at most {result['max_running_at_once']} running at once")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="TPC-H parquet: one directory per table (bench/gpu_tpch.py's).")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw_concurrent"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    data = args.data.resolve()
    results = {
        "1 worker, one at a time": scenario("sequential", data, args.work, "0", concurrent=False),
        "1 worker, 8 at once": scenario("one_worker", data, args.work, "0", concurrent=True),
        "2 workers sharing the GPU, 8 at once": scenario("two_workers", data, args.work, "0,0", concurrent=True),
        "4 workers sharing the GPU, 8 at once": scenario("four_workers", data, args.work, "0,0,0,0", concurrent=True),
    }
    (args.out / "gpu_concurrent.json").write_text(json.dumps(results, indent=1))
    base = results["1 worker, one at a time"]["makespan_s"]
    lines = ["| scenario | makespan, s | vs one at a time | jobs' run times summed, s | most running at once (on workers) | median queue wait, s |",
             "|---|---|---|---|---|---|"]
    for name, result in results.items():
        waits = sorted(job["queue_s"] for job in result["jobs"])
        lines.append(f"| {name} | {result['makespan_s']:.2f} | {base / result['makespan_s']:.2f}× | {result['sum_run_s']:.2f} "
                     f"| {result['max_running_at_once']} ({result['max_on_workers_at_once']}) | {waits[len(waits) // 2]:.2f} |")
    (args.out / "gpu_concurrent.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
