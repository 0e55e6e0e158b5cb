"""Spillway on the GPU machine: the service drives a 2-GPU LocalCUDACluster.

Run on the device (see bench/RESULTS.md for the exact call)::

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site python3 bench/gpu_service.py --out $OUT

Scenarios, each a real service started with ``spillway serve`` and jobs over REST:

1. ucx, 2 GPUs: an ETL job (filter, assign, join, groupby, sort) runs on both workers;
   the same spec on the CPU backend (pandas LocalCluster) gives the same result.
2. The same job over tcp; both times reported.
3. Spilling: a full sort whose working set is >= 2x the per-worker device budget, run
   with a soft cuDF spill limit, with no limit and no spilling, and with a hard RMM cap
   with and without spilling (see SPILL_VARIANTS).
4. No GPU visible (CUDA_VISIBLE_DEVICES=""): the service starts on the CPU backend and says why.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log, run_job, service_env  # noqa: E402
from spillway.jobs.status import JobStatus  # noqa: E402
from spillway.service.launcher import ServiceProcess, launch_service  # noqa: E402

RESULTS: dict[str, Any] = {}


def save(out: Path) -> None:
    (out / "gpu_service.json").write_text(json.dumps(RESULTS, indent=2, default=str))


def make_data(root: Path, rows: int, files: int) -> dict[str, Path]:
    """Facts (key, id, v, w, cat) and a 1000-row dimension, generated on GPU 0 with cudf."""
    import cudf
    import cupy as cp

    facts = root / f"facts_{rows}"
    if not facts.exists():
        facts.mkdir(parents=True)
        per = rows // files
        for i in range(files):
            rs = cp.random.RandomState(1000 + i)
            cudf.DataFrame(
                {
                    "key": rs.randint(0, 1000, per, dtype="int64"),
                    "id": cp.arange(i * per, (i + 1) * per, dtype="int64"),
                    "v": rs.random_sample(per),
                    "w": rs.random_sample(per) * 0.3,
                    "cat": rs.randint(0, 16, per).astype("int32"),
                }
            ).to_parquet(facts / f"part-{i:03d}.parquet")
    dims = root / "dims.parquet"
    if not dims.exists():
        keys = pd.RangeIndex(1000)
        pd.DataFrame({"key": keys.astype("int64"), "label": [f"g{k % 37:02d}" for k in keys]}).to_parquet(dims, index=False)
    return {"facts": facts, "dims": dims}


def etl_spec(data: dict[str, Path], sink: Path) -> dict[str, Any]:
    return {
        "name": "gpu_etl",
        "source": {"format": "parquet", "path": str(data["facts"])},
        "steps": [
            {"op": "filter", "expr": "v > 0.1 and cat != 3"},
            {"op": "assign", "column": "x", "expr": "v * (1 - w)"},
            {"op": "join", "right": {"format": "parquet", "path": str(data["dims"])}, "on": ["key"]},
            {
                "op": "groupby",
                "by": ["label"],
                "aggs": {
                    "total": {"func": "sum", "column": "x"},
                    "avg_v": {"func": "mean", "column": "v"},
                    "sd_v": {"func": "std", "column": "v"},
                    "n": {"func": "count", "column": "id"},
                    "rows": {"func": "size"},
                },
            },
            {"op": "sort", "by": ["label"]},
        ],
        "sink": {"path": str(sink)},
    }


def sort_spec(data: dict[str, Path], sink: Path) -> dict[str, Any]:
    # Partitions well under the budget: a task's own working memory cannot be spilled.
    source = {"format": "parquet", "path": str(data["facts"]), "blocksize": "64MiB"}
    return {"name": "gpu_sort_all", "source": source, "steps": [{"op": "sort", "by": ["v"]}], "sink": {"path": str(sink)}}


def gpu_env(work: Path, protocol: str, **extra: str) -> dict[str, str]:
    """The 2-GPU service of this file's scenarios, with INFO logs."""
    return service_env(work, "cudf", gpus="0,1", protocol=protocol, SPILLWAY_LOG_LEVEL="INFO", **extra)


def start(work: Path, env: dict[str, str], name: str) -> ServiceProcess:
    t = time.perf_counter()
    service = launch_service(work / name, env, timeout=300)
    RESULTS.setdefault("service_start_s", {})[name] = round(time.perf_counter() - t, 2)
    return service


def scenario(name: str, out: Path, fn: Any, *args: Any) -> None:
    log(f"--- {name}")
    try:
        RESULTS[name] = fn(*args)
    except Exception as exc:  # noqa: BLE001 - record and go on to the next scenario
        RESULTS[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        log(f"{name} FAILED: {exc}")
    save(out)


def read_sorted(path: str) -> pd.DataFrame:
    return pd.read_parquet(path).sort_values("label").reset_index(drop=True)


def etl_two_gpus_vs_cpu(work: Path, data: dict[str, Path], out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for protocol in ("ucx", "tcp"):
        service = start(work, gpu_env(work, protocol, SPILLWAY_CLUSTER__RMM_POOL_SIZE="16GB"), f"etl_{protocol}")
        try:
            with service.client() as client:
                result[f"cluster_{protocol}"] = json.loads(client.cluster().model_dump_json())
            runs = [run_job(service, etl_spec(data, work / f"out_etl_{protocol}_{i}")) for i in range(3)]
            result[f"jobs_{protocol}"] = runs
            result[f"run_s_{protocol}"] = [r.get("run_s") for r in runs]
            log(f"{protocol}: run_s {result[f'run_s_{protocol}']}, states {[r['state'] for r in runs]}")
        finally:
            service.stop()
            (out / f"service_etl_{protocol}.log").write_text(service.log()[-200_000:])
    cpu = start(work, {"SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]), "SPILLWAY_CLUSTER__BACKEND": "pandas", "SPILLWAY_CLUSTER__N_WORKERS": "16", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0"}, "etl_cpu")
    try:
        result["job_cpu"] = run_job(cpu, etl_spec(data, work / "out_etl_cpu"))
    finally:
        cpu.stop()
    gpu_frame = read_sorted(str(work / "out_etl_ucx_0"))
    cpu_frame = read_sorted(str(work / "out_etl_cpu"))
    numeric = ["total", "avg_v", "sd_v"]
    rel = ((gpu_frame[numeric] - cpu_frame[numeric]).abs() / cpu_frame[numeric].abs()).max().max()
    result["gpu_equals_cpu"] = bool(
        list(gpu_frame.label) == list(cpu_frame.label)
        and (gpu_frame[["n", "rows"]].to_numpy() == cpu_frame[["n", "rows"]].to_numpy()).all()
        and rel < 1e-9
    )
    result["max_relative_difference"] = float(rel)
    result["rows"] = len(gpu_frame)
    return result


SPILL_VARIANTS = {
    # cuDF spills above a device-byte threshold per worker; no hard cap.
    "soft_limit_spill_on": lambda budget: {"SPILLWAY_CLUSTER__CUDF_SPILL_DEVICE_LIMIT": budget},
    # No limit, no spilling: what the job uses when nothing holds it back.
    "no_limit_spill_off": lambda budget: {"SPILLWAY_CLUSTER__ENABLE_CUDF_SPILL": "false"},
    # A hard cap (RMM pool of exactly the budget) without spilling: out of memory.
    "hard_cap_spill_off": lambda budget: {
        "SPILLWAY_CLUSTER__RMM_POOL_SIZE": budget,
        "SPILLWAY_CLUSTER__RMM_MAXIMUM_POOL_SIZE": budget,
        "SPILLWAY_CLUSTER__ENABLE_CUDF_SPILL": "false",
    },
    # The same hard cap with spilling: cuDF spills when an allocation fails.
    "hard_cap_spill_on": lambda budget: {"SPILLWAY_CLUSTER__RMM_POOL_SIZE": budget, "SPILLWAY_CLUSTER__RMM_MAXIMUM_POOL_SIZE": budget},
}


def spill(work: Path, data: dict[str, Path], out: Path, budget: str, variants: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"budget_per_worker": budget, "data_bytes_on_disk": sum(p.stat().st_size for p in data["facts"].iterdir())}
    for tag in variants:
        service = start(work, gpu_env(work, "ucx", **SPILL_VARIANTS[tag](budget)), tag)
        try:
            job = run_job(service, sort_spec(data, work / f"out_sort_{tag}"), timeout=900)
            result[tag] = job
            log(f"{tag}: {job['state']} run_s={job.get('run_s')} peak={job['resources'] and job['resources']['peak_device_memory_bytes']} spilled={job['resources'] and job['resources']['spilled_to_host_bytes']} error={(job.get('error') or {}).get('message', '')[:200]}")
            if job["state"] == JobStatus.SUCCEEDED.value:
                frame = pd.read_parquet(work / f"out_sort_{tag}", columns=["v"])
                result[f"{tag}_sorted_ok"] = bool(frame.v.is_monotonic_increasing) and len(frame) == job["result"]["total_rows"]
        finally:
            service.stop()
            (out / f"service_{tag}.log").write_text(service.log()[-200_000:])
    return result


def shuffle_join_spec(data: dict[str, Path], partner: Path, sink: Path) -> dict[str, Any]:
    """A hash join of the facts with a 10%-sized partner on ``id``: every row crosses the network once."""
    return {
        "name": "gpu_join",
        "source": {"format": "parquet", "path": str(data["facts"]), "columns": ["id", "key", "v"]},
        "steps": [
            {"op": "join", "right": {"format": "parquet", "path": str(partner)}, "on": ["id"]},
            {"op": "groupby", "by": ["key"], "aggs": {"s": {"func": "sum", "column": "v"}, "u": {"func": "sum", "column": "u"}, "n": {"func": "size"}}},
        ],
        "sink": {"path": str(sink)},
    }


def shuffle_join(work: Path, data: dict[str, Path], out: Path) -> dict[str, Any]:
    import cudf
    import cupy as cp

    partner = work / "data" / "partner.parquet"
    rows = int(RESULTS["args"]["rows"])
    if not partner.exists():
        picked = cp.random.RandomState(7).choice(rows, rows // 10, replace=False).astype("int64")
        cudf.DataFrame({"id": picked, "u": cp.ones(len(picked))}).to_parquet(partner)
    result: dict[str, Any] = {}
    for protocol in ("ucx", "tcp"):
        service = start(work, gpu_env(work, protocol, SPILLWAY_CLUSTER__RMM_POOL_SIZE="24GB"), f"join_{protocol}")
        try:
            runs = [run_job(service, shuffle_join_spec(data, partner, work / f"out_join_{protocol}_{i}")) for i in range(3)]
        finally:
            service.stop()
        result[protocol] = {"states": [r["state"] for r in runs], "run_s": [r.get("run_s") for r in runs], "tasks": runs[-1]["progress"]["tasks_per_worker"], "errors": [r.get("error") for r in runs]}
        log(f"join {protocol}: {result[protocol]}")
    return result


def no_gpu(work: Path, out: Path) -> dict[str, Any]:
    env = {"CUDA_VISIBLE_DEVICES": "", "SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]), "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_CLUSTER__N_WORKERS": "2"}
    service = start(work, env, "no_gpu")
    try:
        with service.client() as client:
            info = json.loads(client.cluster().model_dump_json())
    finally:
        service.stop()
    lines = [line for line in service.log().splitlines() if "backend" in line]
    (out / "service_no_gpu.log").write_text(service.log()[-50_000:])
    return {"cluster_backend": info["backend"], "cluster_kind": info["kind"], "log_lines": lines[:5]}


def versions() -> dict[str, Any]:
    import importlib

    found: dict[str, Any] = {"python": platform.python_version()}
    for name in ("cudf", "dask_cudf", "dask_cuda", "dask", "distributed", "distributed_ucxx", "rmm", "pandas", "pyarrow", "fastapi"):
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception as exc:  # noqa: BLE001
            found[name] = f"unavailable: {exc}"
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    found["gpus"] = smi.stdout.strip().splitlines()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Where JSON results and service logs go.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw"), help="Scratch: data, stores, outputs.")
    parser.add_argument("--rows", type=int, default=100_000_000, help="Rows of the ETL dataset.")
    parser.add_argument("--spill-rows", type=int, default=40_000_000, help="Rows of the spill dataset.")
    parser.add_argument("--budget", default="320MB", help="Per-worker device budget (RMM pool, capped) of the spill run.")
    parser.add_argument("--spill-variants", default=",".join(SPILL_VARIANTS), help=f"Spill runs: {', '.join(SPILL_VARIANTS)}.")
    parser.add_argument("--only", default="etl,spill,nogpu", help="Scenarios to run.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.work.glob("out_*"):
        shutil.rmtree(stale, ignore_errors=True)
    RESULTS["versions"] = versions()
    RESULTS["args"] = {k: str(v) for k, v in vars(args).items()}
    save(args.out)
    t = time.perf_counter()
    data = make_data(args.work / "data", args.rows, 32)
    spill_data = make_data(args.work / "data", args.spill_rows, 32) if "spill" in args.only else data
    RESULTS["data_generation_s"] = round(time.perf_counter() - t, 2)
    log(f"data ready in {RESULTS['data_generation_s']} s")
    only = set(args.only.split(","))
    if "etl" in only:
        scenario("etl_two_gpus", args.out, etl_two_gpus_vs_cpu, args.work, data, args.out)
    if "spill" in only:
        scenario("spill", args.out, spill, args.work, spill_data, args.out, args.budget, args.spill_variants.split(","))
    if "join" in only:
        scenario("shuffle_join", args.out, shuffle_join, args.work, data, args.out)
    if "nogpu" in only:
        scenario("no_gpu", args.out, no_gpu, args.work, args.out)
    log("done")


if __name__ == "__main__":
    main()
