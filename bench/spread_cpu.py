"""CPU simulation of an 8-worker cluster: do partitioning and task placement spread work evenly?

    .venv/bin/python bench/spread_cpu.py --out bench/results

Starts the service with a LocalCluster of N single-thread workers (pandas backend), runs a
groupby job and a full sort over 64 files, and reports the finished tasks per worker that the
progress plugin counted (``progress.tasks_per_worker``) with the max/min and max/mean ratios.
This is only the placement half of issue 10's scaling run: no GPUs and no timings that mean anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.samples import write_sample_data  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402


def spread(counts: dict[str, int], workers: int) -> dict[str, Any]:
    values = list(counts.values()) + [0] * (workers - len(counts))
    mean = statistics.mean(values)
    return {
        "tasks_per_worker": sorted(values),
        "workers_used": sum(1 for v in values if v),
        "max_over_min": round(max(values) / min(values), 3) if min(values) else None,
        "max_over_mean": round(max(values) / mean, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=3_200_000)
    parser.add_argument("--files", type=int, default=64)
    args = parser.parse_args()
    results: dict[str, Any] = {"workers": args.workers, "rows": args.rows, "files": args.files}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sales = write_sample_data(work / "data", rows=args.rows, files=args.files)["sales"]
        env = {
            "SPILLWAY_CLUSTER__N_WORKERS": str(args.workers),
            "SPILLWAY_CLUSTER__BACKEND": "pandas",
            "SPILLWAY_CLUSTER__MEMORY_LIMIT": "2GB",
            "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0",
            "SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]),
        }
        service = launch_service(work / "svc", env)
        jobs = {
            "groupby": [{"op": "groupby", "by": ["region", "product_id"], "aggs": {"revenue": {"func": "sum", "column": "amount"}}}],
            "sort": [{"op": "sort", "by": ["amount"]}],
        }
        try:
            with service.client() as client:
                for name, steps in jobs.items():
                    source = {"format": "parquet", "path": str(sales), "blocksize": "1MiB"}
                    job_id = client.submit({"name": name, "source": source, "steps": steps, "sink": {"path": str(work / f"out_{name}")}}).id
                    job = client.wait(job_id, timeout=600)
                    results[name] = {"state": job.state.value, "tasks": job.progress.total, **spread(job.progress.tasks_per_worker, args.workers)}
        finally:
            service.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spread_cpu.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
