"""Groupby-aggregate of 100M rows (sum, mean, std of v by a key of 1000 groups), side by side
in one run on the GPU machine: Spillway on 1 and 2 GPUs, dask-cudf directly on the same
clusters, cuDF alone on one GPU, and pandas in one process. Every variant reads the same
parquet files and writes its result as parquet, so the work compared is the same.

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site python3 bench/gpu_groupby.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log, run_job  # noqa: E402
from bench.gpu_service import gpu_env, make_data, versions  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402

AGGS = {"s": {"func": "sum", "column": "v"}, "m": {"func": "mean", "column": "v"}, "sd": {"func": "std", "column": "v"}}


def spec(facts: Path, sink: Path) -> dict[str, Any]:
    return {"name": "groupby_100m", "source": {"format": "parquet", "path": str(facts), "columns": ["key", "v"]}, "steps": [{"op": "groupby", "by": ["key"], "aggs": AGGS}], "sink": {"path": str(sink)}}


def timed(fn: Any, repeat: int) -> dict[str, Any]:
    times = []
    for _ in range(repeat + 1):  # the first run warms up
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return {"median_s": round(statistics.median(times[1:]), 4), "runs_s": [round(x, 4) for x in times]}


def spillway(work: Path, facts: Path, gpus: str, repeat: int) -> dict[str, Any]:
    service = launch_service(work / f"svc_{gpus}", gpu_env(work, "ucx", SPILLWAY_CLUSTER__CUDA_VISIBLE_DEVICES=gpus, SPILLWAY_CLUSTER__RMM_POOL_SIZE="16GB"), timeout=300)
    counter = iter(range(1000))
    try:
        runs = [run_job(service, spec(facts, work / f"out_sw_{gpus}_{next(counter)}")) for _ in range(repeat + 1)]
    finally:
        service.stop()
    warm = runs[1:]
    return {
        "states": [r["state"] for r in runs],
        "median_run_s": round(statistics.median(r["run_s"] for r in warm), 4),
        "median_submit_to_terminal_s": round(statistics.median(r["wall_s_submit_to_terminal"] for r in warm), 4),
        "runs_s": [r["run_s"] for r in runs],
        "tasks_per_worker": runs[-1]["progress"]["tasks_per_worker"],
    }


def dask_cudf_direct(work: Path, facts: Path, gpus: str, repeat: int) -> dict[str, Any]:
    import dask
    import dask.dataframe as dd
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    counter = iter(range(1000))
    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=gpus, protocol="ucx", rmm_pool_size="16GB", enable_cudf_spill=True, dashboard_address=":0") as cluster, Client(cluster):
        def run() -> None:
            with dask.config.set({"dataframe.backend": "cudf", "dataframe.shuffle.method": "tasks"}):
                frame = dd.read_parquet(str(facts), columns=["key", "v"])
                out = frame.groupby("key").agg({"v": ["sum", "mean", "std"]})
                out.columns = ["s", "m", "sd"]
                out.reset_index().to_parquet(str(work / f"out_dc_{gpus}_{next(counter)}"), write_index=False)

        return timed(run, repeat)


def cudf_alone(work: Path, facts: Path, repeat: int) -> dict[str, Any]:
    import cudf

    def run() -> None:
        frame = cudf.read_parquet(str(facts), columns=["key", "v"])
        out = frame.groupby("key").agg({"v": ["sum", "mean", "std"]})
        out.columns = ["s", "m", "sd"]
        out.reset_index().to_parquet(str(work / "out_cudf.parquet"))

    return timed(run, repeat)


def pandas_alone(work: Path, facts: Path, repeat: int) -> dict[str, Any]:
    import pandas as pd

    def run() -> None:
        frame = pd.read_parquet(str(facts), columns=["key", "v"])
        out = frame.groupby("key").agg({"v": ["sum", "mean", "std"]})
        out.columns = ["s", "m", "sd"]
        out.reset_index().to_parquet(str(work / "out_pandas.parquet"))

    return timed(run, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw"))
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for stale in list(args.work.glob("out_sw_*")) + list(args.work.glob("out_dc_*")):
        shutil.rmtree(stale, ignore_errors=True)
    facts = make_data(args.work / "data", args.rows, 32)["facts"]
    results: dict[str, Any] = {"versions": versions(), "rows": args.rows, "data_bytes": sum(p.stat().st_size for p in facts.iterdir())}

    def step(name: str, fn: Any, *fn_args: Any) -> None:
        log(f"--- {name}")
        try:
            results[name] = fn(*fn_args)
        except Exception as exc:  # noqa: BLE001 - record and go on
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"{name}: {results[name]}")
        (args.out / "gpu_groupby.json").write_text(json.dumps(results, indent=2, default=str))

    step("spillway_1gpu", spillway, args.work, facts, "0", args.repeat)
    step("spillway_2gpu", spillway, args.work, facts, "0,1", args.repeat)
    step("dask_cudf_1gpu", dask_cudf_direct, args.work, facts, "0", args.repeat)
    step("dask_cudf_2gpu", dask_cudf_direct, args.work, facts, "0,1", args.repeat)
    step("cudf_1gpu_no_dask", cudf_alone, args.work, facts, args.repeat)
    step("pandas_1_process", pandas_alone, args.work, facts, 1)


if __name__ == "__main__":
    main()
