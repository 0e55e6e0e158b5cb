"""Heavy GPU work, side by side in one run: floors, service overhead on long jobs,
1 vs 2 GPUs, UCX vs TCP on shuffle-heavy jobs, and the spill penalty over time.

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site python3 bench/gpu_heavy.py --out $OUT --deadline 540

Sections (each saved to ``gpu_heavy.json`` as soon as it ends; ``--only`` picks some):

``floors``
    Copy bandwidths measured with CuPy in this run: device→device on one GPU,
    GPU0→GPU1 peer, host→device and device→host from pinned and from pageable
    memory. Each workload's floor is the bytes it must move over the slowest link
    it must cross, divided by that bandwidth.
``long``
    Two shuffle-heavy jobs on ``--rows`` rows: a full sort by a float column, and a
    hash join with a partner of half as many rows spread over as many files (so
    dask shuffles both sides rather than broadcasting one) followed by a groupby.
    Each runs through the service (job run time from its own timestamps) and as
    plain dask-cudf code on an identical LocalCUDACluster: 1 GPU over TCP, 2 GPUs
    over UCX and over TCP. Gives the service overhead on jobs of ≥ 10 s, the 2-GPU
    speed-up and UCX against TCP.
``spill``
    A full sort on one GPU: unconstrained first (its peak device memory above the
    idle baseline is the working set), then with a device limit of a third of that
    working set, once with cuDF's spilling and once with dask-cuda's worker spilling.
    A sampler reads every worker every 0.25 s: NVML memory in use, cuDF's spilled
    bytes each way, dask-cuda's device/host buffers; the spill rate is compared
    with the device→host bandwidth from ``floors``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import log, run_job  # noqa: E402
from bench.gpu_service import gpu_env, make_data, versions  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402

RESULTS: dict[str, Any] = {}
GB = 1e9


class Clock:
    """The run's deadline: sections check what is left before they start."""

    def __init__(self, seconds: float) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def save(out: Path) -> None:
    (out / "gpu_heavy.json").write_text(json.dumps(RESULTS, indent=2, default=str))


# ---------------------------------------------------------------------------- floors


def bandwidths(size_bytes: int = 2 << 30, repeat: int = 5) -> dict[str, float]:
    """Best-of-``repeat`` copy bandwidths in GB/s (bytes copied / time)."""
    import cupy as cp
    import numpy as np

    def best(copy: Callable[[], None], stream: Any) -> float:
        times = []
        for _ in range(repeat + 1):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            copy()
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1000)
        return round(size_bytes / min(times[1:]) / GB, 2)

    result: dict[str, float] = {}
    with cp.cuda.Device(0):
        stream = cp.cuda.Stream(non_blocking=True)
        src = cp.ones(size_bytes, dtype=cp.uint8)
        dst = cp.empty_like(src)
        with stream:
            result["device_to_device_gpu0"] = best(lambda: dst.__setitem__(Ellipsis, src), stream)
        pinned_mem = cp.cuda.alloc_pinned_memory(size_bytes)
        pinned = np.frombuffer(pinned_mem, dtype=np.uint8, count=size_bytes)
        pageable = np.ones(size_bytes, dtype=np.uint8)
        result["host_to_device_pinned"] = best(lambda: src.set(pinned, stream=stream), stream)
        result["device_to_host_pinned"] = best(lambda: src.get(stream=stream, out=pinned), stream)
        result["host_to_device_pageable"] = best(lambda: src.set(pageable, stream=stream), stream)
        result["device_to_host_pageable"] = best(lambda: src.get(stream=stream, out=pageable), stream)
    if cp.cuda.runtime.getDeviceCount() > 1:
        with cp.cuda.Device(1):
            far = cp.empty(size_bytes, dtype=cp.uint8)
        with cp.cuda.Device(0):
            result["gpu0_to_gpu1_peer"] = best(lambda: cp.cuda.runtime.memcpyPeerAsync(far.data.ptr, 1, src.data.ptr, 0, size_bytes, stream.ptr), stream)
        del far
    del src, dst
    cp.get_default_memory_pool().free_all_blocks()
    return result


def floors(data: dict[str, Path], partner: Path, bandwidth: dict[str, float]) -> dict[str, Any]:
    """Lower bounds per workload: the bytes it must move over its slowest link."""
    import pyarrow.parquet as pq

    def decoded_bytes(path: Path, columns: list[str] | None = None) -> int:
        total = 0
        for file in sorted(path.glob("*.parquet")) if path.is_dir() else [path]:
            meta = pq.ParquetFile(file).metadata
            for group in range(meta.num_row_groups):
                row_group = meta.row_group(group)
                for index in range(row_group.num_columns):
                    column = row_group.column(index)
                    if columns is None or column.path_in_schema in columns:
                        total += column.total_uncompressed_size
        return total

    facts = decoded_bytes(data["facts"])
    on_disk = sum(f.stat().st_size for f in data["facts"].glob("*.parquet"))
    h2d = bandwidth["host_to_device_pageable"]
    d2d = bandwidth["device_to_device_gpu0"]
    result = {
        "facts_decoded_bytes": facts,
        "facts_parquet_bytes": on_disk,
        # A sort reads every byte in (host→device, the files are in the page cache),
        # moves every byte once through the shuffle and once into order on the device,
        # and writes every byte out (device→host).
        "sort_floor_s": round(on_disk / h2d / GB + 2 * facts / d2d / GB + facts / bandwidth["device_to_host_pageable"] / GB, 4),
        "join_floor_s": round((decoded_bytes(data["facts"], ["id", "key", "v"]) + decoded_bytes(partner)) / h2d / GB, 4),
        "groupby_100m_floor_s": round(decoded_bytes(data["facts"], ["key", "v"]) / h2d / GB, 4),
        "assumptions": "parquet pages cross PCIe from the page cache (pageable host→device); device passes at the measured D2D copy rate",
    }
    if "gpu0_to_gpu1_peer" in bandwidth:
        # With 2 GPUs half of each shuffled byte crosses NVLink once.
        result["sort_2gpu_shuffle_floor_s"] = round(facts / 2 / bandwidth["gpu0_to_gpu1_peer"] / GB, 4)
    return result


# ---------------------------------------------------------------------------- long jobs


def make_partner(root: Path, rows: int, files: int) -> Path:
    """``rows`` distinct ids of the facts (0..2*rows) with a value ``u``, in ``files`` files."""
    import cudf
    import cupy as cp

    partner = root / f"partner_{rows}"
    if not partner.exists():
        partner.mkdir(parents=True)
        picked = cp.random.RandomState(7).permutation(2 * rows)[:rows].astype("int64")
        for index, chunk in enumerate(cp.array_split(picked, files)):
            cudf.DataFrame({"id": chunk, "u": cp.ones(len(chunk))}).to_parquet(partner / f"part-{index:03d}.parquet")
    return partner


def sort_spec(facts: Path, sink: Path, blocksize: str) -> dict[str, Any]:
    return {"name": "long_sort", "source": {"format": "parquet", "path": str(facts), "blocksize": blocksize}, "steps": [{"op": "sort", "by": ["v"]}], "sink": {"path": str(sink)}}


def join_spec(facts: Path, partner: Path, sink: Path, blocksize: str) -> dict[str, Any]:
    return {
        "name": "long_join",
        "source": {"format": "parquet", "path": str(facts), "columns": ["id", "key", "v"], "blocksize": blocksize},
        "steps": [
            {"op": "join", "right": {"format": "parquet", "path": str(partner), "blocksize": blocksize}, "on": ["id"]},
            {"op": "groupby", "by": ["key"], "aggs": {"s": {"func": "sum", "column": "v"}, "u": {"func": "sum", "column": "u"}, "n": {"func": "size"}}},
        ],
        "sink": {"path": str(sink)},
    }


def direct_sort(facts: Path, sink: Path, blocksize: str) -> None:
    import dask.dataframe as dd

    dd.read_parquet(str(facts), blocksize=blocksize).sort_values("v").to_parquet(str(sink), write_index=False)


def direct_join(facts: Path, partner: Path, sink: Path, blocksize: str) -> None:
    import dask.dataframe as dd

    left = dd.read_parquet(str(facts), columns=["id", "key", "v"], blocksize=blocksize)
    right = dd.read_parquet(str(partner), blocksize=blocksize)
    joined = left.merge(right, on="id")
    out = joined.groupby("key").agg({"v": "sum", "u": ["sum", "size"]})
    out.columns = ["s", "u", "n"]
    out.reset_index().to_parquet(str(sink), write_index=False)


def service_long(work: Path, facts: Path, partner: Path, gpus: str, protocol: str, blocksize: str, repeat: int, out: Path) -> dict[str, Any]:
    service = launch_service(work / f"svc_long_{protocol}_{gpus}", gpu_env(work, protocol, SPILLWAY_CLUSTER__CUDA_VISIBLE_DEVICES=gpus, SPILLWAY_CLUSTER__RMM_POOL_SIZE="48GB"), timeout=300)
    result: dict[str, Any] = {}
    try:
        for name, make in (("sort", lambda sink: sort_spec(facts, sink, blocksize)), ("join", lambda sink: join_spec(facts, partner, sink, blocksize))):
            runs = [run_job(service, make(work / f"out_long_{name}_{protocol}_{gpus}_{i}"), timeout=600) for i in range(repeat)]
            result[name] = {
                "states": [r["state"] for r in runs],
                "run_s": [r.get("run_s") for r in runs],
                "submit_to_end_s": [r["wall_s_submit_to_terminal"] for r in runs],
                "tasks_per_worker": runs[-1]["progress"]["tasks_per_worker"],
                "errors": [(r.get("error") or {}).get("message") for r in runs if r.get("error")],
            }
            log(f"service {name} gpus={gpus} {protocol}: {result[name]['run_s']} {result[name]['states']}")
    finally:
        service.stop()
        (out / f"service_long_{protocol}_{gpus.replace(',', '')}.log").write_text(service.log()[-100_000:])
    return result


def direct_long(work: Path, facts: Path, partner: Path, gpus: str, protocol: str, blocksize: str, repeat: int) -> dict[str, Any]:
    import dask
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    result: dict[str, Any] = {}
    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=gpus, protocol=protocol, rmm_pool_size="48GB", enable_cudf_spill=True, dashboard_address=":0", local_directory=str(work / "dask")) as cluster, Client(cluster):
        with dask.config.set({"dataframe.backend": "cudf", "dataframe.shuffle.method": "tasks"}):
            for name, run in (("sort", lambda sink: direct_sort(facts, sink, blocksize)), ("join", lambda sink: direct_join(facts, partner, sink, blocksize))):
                times = []
                for i in range(repeat):
                    sink = work / f"out_direct_{name}_{protocol}_{gpus}_{i}"
                    started = time.perf_counter()
                    run(sink)
                    times.append(round(time.perf_counter() - started, 3))
                result[name] = {"run_s": times}
                log(f"direct {name} gpus={gpus} {protocol}: {times}")
    return result


def long_jobs(work: Path, data: dict[str, Path], partner: Path, args: argparse.Namespace, clock: Clock, out: Path) -> dict[str, Any]:
    variants = [("0", "tcp"), ("0,1", "ucx"), ("0,1", "tcp")]
    result: dict[str, Any] = {"rows": args.rows, "partner_rows": args.rows // 2, "blocksize": args.blocksize}
    for gpus, protocol in variants:
        for kind, fn in (("service", service_long), ("direct", direct_long)):
            key = f"{kind}_{len(gpus.split(','))}gpu_{protocol}"
            if clock.left() < 90:
                result[key] = "skipped: deadline"
                continue
            try:
                extra = (out,) if kind == "service" else ()
                result[key] = fn(work, data["facts"], partner, gpus, protocol, args.blocksize, args.repeat, *extra)
            except Exception as exc:  # noqa: BLE001 - record, go on
                result[key] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
            RESULTS["long"] = result
            save(out)
    return result


# ---------------------------------------------------------------------------- spill


def sample_worker(dask_worker: Any = None) -> dict[str, Any]:
    """One worker's memory reading: NVML in use, cuDF spill totals, dask-cuda buffers."""
    from spillway.cluster.gpu_stats import worker_gpu_stats

    reading = worker_gpu_stats()
    try:
        from cudf.core.buffer.spill_manager import get_global_manager

        manager = get_global_manager()
        totals = getattr(manager.statistics, "spill_totals", {}) if manager else {}
        reading["cudf_unspilled_bytes"] = int(totals.get(("cpu", "gpu"), (0,))[0])
    except Exception:  # noqa: BLE001
        pass
    data = getattr(dask_worker, "data", None)
    for side in ("device_buffer", "host_buffer"):
        fast = getattr(getattr(data, side, None), "fast", None)
        if fast is not None and hasattr(fast, "total_weight"):
            reading[f"dask_cuda_{side}_bytes"] = int(fast.total_weight)
    return reading


class Sampler(threading.Thread):
    """Reads every worker every ``interval`` s through its own client until stopped."""

    def __init__(self, scheduler: str, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        from distributed import Client

        self.client = Client(scheduler, timeout=30)
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.halt = threading.Event()
        self.t0 = time.perf_counter()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                readings = self.client.run(sample_worker)
                self.samples.append({"t": round(time.perf_counter() - self.t0, 3), "workers": readings})
            except Exception as exc:  # noqa: BLE001
                self.samples.append({"t": round(time.perf_counter() - self.t0, 3), "error": repr(exc)[:200]})
            self.halt.wait(self.interval)

    def stop(self) -> list[dict[str, Any]]:
        self.halt.set()
        self.join(10)
        self.client.close()
        return self.samples


def summarize(samples: list[dict[str, Any]], d2h: float) -> dict[str, Any]:
    """Peak memory, total spilled, and the spill rate against device→host bandwidth."""
    rows = [(s["t"], next(iter(s["workers"].values()))) for s in samples if "workers" in s and s["workers"]]
    if not rows:
        return {"samples": 0}
    used = [r.get("memory_used") or 0 for _, r in rows]
    spilled = [r.get("spilled_to_host_bytes") or 0 for _, r in rows]
    rates = [(b2 - b1) / (t2 - t1) for (t1, _), (t2, _), b1, b2 in zip(rows, rows[1:], spilled, spilled[1:]) if t2 > t1]
    return {
        "samples": len(rows),
        "peak_memory_used_bytes": max(used),
        "cudf_spilled_bytes_total": spilled[-1] - spilled[0],
        "cudf_unspilled_bytes_total": (rows[-1][1].get("cudf_unspilled_bytes") or 0) - (rows[0][1].get("cudf_unspilled_bytes") or 0),
        "peak_dask_cuda_host_buffer_bytes": max((r.get("dask_cuda_host_buffer_bytes") or 0) for _, r in rows),
        "peak_spill_rate_GBps": round(max(rates, default=0) / GB, 3),
        "mean_spill_rate_GBps": round((spilled[-1] - spilled[0]) / max(rows[-1][0] - rows[0][0], 1e-9) / GB, 3),
        "device_to_host_pinned_GBps": d2h,
        "timeline": [{"t": t, "used": r.get("memory_used"), "spilled": r.get("spilled_to_host_bytes"), "unspilled": r.get("cudf_unspilled_bytes"), "host_buffer": r.get("dask_cuda_host_buffer_bytes")} for t, r in rows],
    }


def spill_run(work: Path, facts: Path, tag: str, env_extra: dict[str, str], d2h: float, blocksize: str, out: Path) -> dict[str, Any]:
    env = gpu_env(work, "tcp", SPILLWAY_CLUSTER__CUDA_VISIBLE_DEVICES="0", **env_extra)
    service = launch_service(work / f"svc_spill_{tag}", env, timeout=300)
    try:
        with service.client() as client:
            scheduler = client.cluster().scheduler_address
        sampler = Sampler(scheduler)
        sampler.start()
        time.sleep(1.0)  # the idle baseline
        job = run_job(service, sort_spec(facts, work / f"out_spill_{tag}", blocksize), timeout=900)
        samples = sampler.stop()
    finally:
        service.stop()
        (out / f"service_spill_{tag}.log").write_text(service.log()[-100_000:])
    result = {"state": job["state"], "run_s": job.get("run_s"), "resources": job.get("resources"), "error": (job.get("error") or {}).get("message"), **summarize(samples, d2h)}
    if job["state"] == "SUCCEEDED":
        import pandas as pd

        frame = pd.read_parquet(work / f"out_spill_{tag}", columns=["v"])
        result["sorted_ok"] = bool(frame.v.is_monotonic_increasing) and len(frame) == job["result"]["total_rows"]
    baseline = result.get("timeline", [{}])[0].get("used") or 0
    result["baseline_used_bytes"] = baseline
    log(f"spill {tag}: {job['state']} run_s={job.get('run_s')} peak={result.get('peak_memory_used_bytes')} spilled={result.get('cudf_spilled_bytes_total')}")
    return result


def spill(work: Path, facts: Path, bandwidth: dict[str, float], blocksize: str, clock: Clock, out: Path) -> dict[str, Any]:
    d2h = bandwidth.get("device_to_host_pinned", 0.0)
    result: dict[str, Any] = {}
    result["unconstrained"] = spill_run(work, facts, "unconstrained", {"SPILLWAY_CLUSTER__ENABLE_CUDF_SPILL": "false"}, d2h, blocksize, out)
    working_set = result["unconstrained"]["peak_memory_used_bytes"] - result["unconstrained"]["baseline_used_bytes"]
    limit = max(int(working_set / 3), 64 << 20)
    result["working_set_bytes"] = working_set
    result["device_limit_bytes"] = limit
    RESULTS["spill"] = result
    save(out)
    variants = {
        "cudf_spill_third": {"SPILLWAY_CLUSTER__CUDF_SPILL_DEVICE_LIMIT": str(limit)},
        "dask_cuda_spill_third": {"SPILLWAY_CLUSTER__ENABLE_CUDF_SPILL": "false", "SPILLWAY_CLUSTER__DEVICE_MEMORY_LIMIT": str(limit)},
    }
    for tag, env_extra in variants.items():
        if clock.left() < 120:
            result[tag] = "skipped: deadline"
            continue
        try:
            result[tag] = spill_run(work, facts, tag, env_extra, d2h, blocksize, out)
            if result[tag].get("run_s") and result["unconstrained"].get("run_s"):
                result[tag]["penalty"] = round(result[tag]["run_s"] / result["unconstrained"]["run_s"] - 1, 3)
        except Exception as exc:  # noqa: BLE001
            result[tag] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        RESULTS["spill"] = result
        save(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Where gpu_heavy.json and service logs go.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw"), help="Scratch: data, stores, outputs.")
    parser.add_argument("--rows", type=int, default=100_000_000, help="Rows of the long jobs' facts.")
    parser.add_argument("--spill-rows", type=int, default=40_000_000, help="Rows sorted in the spill runs.")
    parser.add_argument("--blocksize", default="256MiB", help="Read partition size of every job (service and direct alike).")
    parser.add_argument("--repeat", type=int, default=2, help="Runs of each long job per variant (the first is cold).")
    parser.add_argument("--only", default="floors,long,spill", help="Sections to run.")
    parser.add_argument("--deadline", type=float, default=540, help="Seconds; sections that would start later are skipped.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    clock = Clock(args.deadline)
    for stale in list(args.work.glob("out_long_*")) + list(args.work.glob("out_direct_*")) + list(args.work.glob("out_spill_*")):
        shutil.rmtree(stale, ignore_errors=True)
    only = set(args.only.split(","))
    RESULTS["versions"] = versions()
    RESULTS["args"] = {k: str(v) for k, v in vars(args).items()}
    started = time.perf_counter()
    data = make_data(args.work / "data", args.rows, 32)
    partner = make_partner(args.work / "data", args.rows // 2, 32)
    RESULTS["data_generation_s"] = round(time.perf_counter() - started, 2)
    save(args.out)
    bandwidth = bandwidths()
    RESULTS["bandwidth_GBps"] = bandwidth
    log(f"bandwidth GB/s: {bandwidth}")
    if "floors" in only:
        RESULTS["floors"] = floors(data, partner, bandwidth)
        log(f"floors: {RESULTS['floors']}")
    save(args.out)
    if "long" in only:
        long_jobs(args.work, data, partner, args, clock, args.out)
    if "spill" in only and clock.left() > 150:
        spill_data = make_data(args.work / "data", args.spill_rows, 32)
        try:
            spill(args.work, spill_data["facts"], bandwidth, "64MiB", clock, args.out)
        except Exception as exc:  # noqa: BLE001
            RESULTS["spill_error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
    elif "spill" in only:
        RESULTS["spill"] = "skipped: deadline"
    save(args.out)
    log("done")


if __name__ == "__main__":
    main()
