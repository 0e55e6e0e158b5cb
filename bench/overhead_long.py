"""Service overhead on long jobs: the same spec through Spillway and as the same graph run directly.

The direct run builds the graph with Spillway's own ``jobs.pipeline.build_frame`` and
writes it with ``to_parquet`` on an identical cluster, so the difference is what the
service adds: REST, validation, queueing, planning under the progress plugin, the atomic
commit with its manifest, and store writes. Both sides run each job ``--repeat`` times;
the first run is cold and reported apart.

    .venv/bin/python bench/overhead_long.py --out bench/results                       # CPU
    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site \\
        python3 bench/overhead_long.py --backend cudf --rows 1000000000 --out $OUT       # GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_heavy import sort_spec  # noqa: E402
from bench.common import build_once, log, service_env, side_by_side  # noqa: E402
from spillway.jobs.pipeline import backend_config, build_frame  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402


def make_data(root: Path, rows: int, files: int = 16) -> Path:
    """``rows`` rows of (key, id, v, w) in ``files`` parquet files, made once per size."""
    per = rows // files

    def write(staging: Path) -> dict[str, Any]:
        (staging / "facts").mkdir()

        def write_file(index: int) -> None:
            rng = np.random.default_rng(index)  # one stream per file: the same data whatever the thread order
            pd.DataFrame(
                {"key": rng.integers(0, 1000, per), "id": np.arange(index * per, (index + 1) * per), "v": rng.random(per), "w": rng.random(per)}
            ).to_parquet(staging / "facts" / f"part-{index:03d}.parquet", index=False)

        side_by_side(write_file, files)
        return {"rows": per * files, "files": files}

    return build_once(root / f"facts_{rows}", write) / "facts"  # the marker stays out of the data directory


def specs(data: Path, sink: Path, blocksize: str) -> dict[str, dict[str, Any]]:
    source = {"format": "parquet", "path": str(data), "blocksize": blocksize}
    return {
        "sort": sort_spec(data, sink, blocksize),
        "groupby_many_groups": {
            "name": "long_groupby",
            "source": source,
            "steps": [
                {"op": "assign", "column": "g", "expr": "id % 1000003"},
                {"op": "groupby", "by": ["g"], "aggs": {"s": {"func": "sum", "column": "v"}, "m": {"func": "mean", "column": "w"}, "n": {"func": "size"}}},
            ],
            "sink": {"path": str(sink)},
        },
    }


def through_service(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    env = service_env(args.work, args.backend, gpus=args.gpus, rmm_pool=args.rmm_pool, cpu_workers=args.workers, SPILLWAY_MAX_CONCURRENT_JOBS="1")
    service = launch_service(args.work / "svc", env, timeout=300)
    result: dict[str, Any] = {}
    try:
        with service.client() as client:
            for name in specs(data, Path("unused"), args.blocksize):
                runs = []
                for index in range(args.repeat):
                    spec = specs(data, args.work / f"out_svc_{name}_{index}", args.blocksize)[name]
                    started = time.perf_counter()
                    job = client.wait(client.submit(spec).id, timeout=3600)
                    wall = time.perf_counter() - started
                    if job.state.value != "SUCCEEDED":
                        raise RuntimeError(f"{name}: {job.state.value} {job.error}")
                    runs.append({"run_s": round((job.finished_at - job.started_at).total_seconds(), 3), "submit_to_end_s": round(wall, 3)})
                    log(f"service {name} run {index + 1}: {runs[-1]}")
                result[name] = runs
    finally:
        service.stop()
    return result


def direct(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    from distributed import Client

    if args.backend == "cudf":
        from dask_cuda import LocalCUDACluster

        cluster: Any = LocalCUDACluster(CUDA_VISIBLE_DEVICES=args.gpus, protocol="tcp", rmm_pool_size=args.rmm_pool, enable_cudf_spill=True, dashboard_address=":0", local_directory=str(args.work / "dask"))
    else:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0", local_directory=str(args.work / "dask"))
    result: dict[str, Any] = {}
    with cluster, Client(cluster):
        for name in specs(data, Path("unused"), args.blocksize):
            runs = []
            for index in range(args.repeat):
                spec = JobSpec.model_validate(specs(data, args.work / f"out_direct_{name}_{index}", args.blocksize)[name])
                started = time.perf_counter()
                with backend_config(args.backend):
                    build_frame(spec).to_parquet(spec.sink.path, write_index=False)
                runs.append({"run_s": round(time.perf_counter() - started, 3)})
                log(f"direct {name} run {index + 1}: {runs[-1]}")
            result[name] = runs
    return result


def summarize(service: dict[str, Any], direct_runs: dict[str, Any]) -> dict[str, Any]:
    summary = {}
    for name, runs in service.items():
        warm_service = statistics.median(r["run_s"] for r in runs[1:])
        warm_submit = statistics.median(r["submit_to_end_s"] for r in runs[1:])
        warm_direct = statistics.median(r["run_s"] for r in direct_runs[name][1:])
        summary[name] = {
            "direct_s": warm_direct,
            "service_run_s": warm_service,
            "service_submit_to_end_s": warm_submit,
            "overhead_run_pct": round(100 * (warm_service / warm_direct - 1), 1),
            "overhead_submit_to_end_pct": round(100 * (warm_submit / warm_direct - 1), 1),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw_long"))
    parser.add_argument("--backend", choices=("pandas", "cudf"), default="pandas")
    parser.add_argument("--rows", type=int, default=20_000_000, help="Rows of the facts (choose so a warm job lasts ≥ 10 s).")
    parser.add_argument("--blocksize", default="64MiB")
    parser.add_argument("--workers", type=int, default=2, help="CPU workers (1 thread each).")
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--rmm-pool", default="48GB")
    parser.add_argument("--repeat", type=int, default=3, help="Runs per job and side; the first is cold.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in list(args.work.glob("out_*")):
        shutil.rmtree(stale, ignore_errors=True)
    data = make_data(args.work / "data", args.rows)
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    result["direct"] = direct(args, data)
    result["service"] = through_service(args, data)
    result["summary"] = summarize(result["service"], result["direct"])
    (args.out / f"overhead_long_{args.backend}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
