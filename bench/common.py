"""What every benchmark shares: a timestamped log line, data made once, a service's settings, one job run.

Benchmarks start the real service (``service.launcher.launch_service``) with
:func:`service_env` and submit over REST with :func:`run_job`, so what they time is what
a user gets.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from spillway.service.client import SpillwayClient
from spillway.service.launcher import ServiceProcess


def log(message: str) -> None:
    """A progress line with the wall-clock time, flushed at once (device logs are read later)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


DONE_MARKER = "_DONE.json"


def build_once(final: Path, write: Callable[[Path], dict[str, Any]], log: Callable[[str], None] | None = log) -> Path:
    """``final``, made by ``write`` into a staging sibling and renamed into place when complete.

    A directory holding ``DONE_MARKER`` (what ``write`` returned, and the seconds it took)
    is reused as it is; a partial one left by a killed run is made again.
    """
    if (final / DONE_MARKER).exists():
        return final
    staging = final.with_name(final.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    start = time.perf_counter()
    written = write(staging)
    (staging / DONE_MARKER).write_text(json.dumps({"tables": written, "seconds": round(time.perf_counter() - start, 1)}, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    if log is not None:
        log(f"generated {final.name} in {time.perf_counter() - start:.1f} s")
    return final


def side_by_side(task: Callable[[int], None], count: int) -> None:
    """``task(0) … task(count - 1)`` on threads, one per core: for numpy and Arrow work, which releases the GIL."""
    with ThreadPoolExecutor(max_workers=max(1, min(count, os.cpu_count() or 1))) as pool:
        list(pool.map(task, range(count)))


def service_env(
    work: Path, backend: str, *, gpus: str = "0", protocol: str = "tcp", rmm_pool: str | None = None, cpu_workers: int = 2,
    cpu_threads: int = 1, **extra: str
) -> dict[str, str]:
    """``SPILLWAY_*`` settings of a benchmark's service: data root ``work``, a cluster on ``backend``.

    cudf: one worker per GPU in ``gpus`` over ``protocol`` (RMM pool if given); pandas:
    ``cpu_workers`` workers of ``cpu_threads`` threads. ``extra`` overrides any of them.
    """
    env = {
        "SPILLWAY_CLUSTER__BACKEND": backend,
        "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0",
        "SPILLWAY_CLUSTER__LOCAL_DIRECTORY": str(work / "dask"),
        "SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]),
    }
    if backend == "cudf":
        env.update(SPILLWAY_CLUSTER__CUDA_VISIBLE_DEVICES=gpus, SPILLWAY_CLUSTER__PROTOCOL=protocol)
        if len(set(gpus.split(","))) < len(gpus.split(",")):  # '0,0': two workers sharing GPU 0
            env["SPILLWAY_CLUSTER__ALLOW_GPU_SHARING"] = "true"
        if rmm_pool:
            env["SPILLWAY_CLUSTER__RMM_POOL_SIZE"] = rmm_pool
    else:
        env.update(SPILLWAY_CLUSTER__N_WORKERS=str(cpu_workers), SPILLWAY_CLUSTER__THREADS_PER_WORKER=str(cpu_threads))
    return {**env, **extra}


def run_job(service: ServiceProcess, spec: dict[str, Any], timeout: float = 600, submit_timeout: float = 30.0) -> dict[str, Any]:
    """Submit ``spec`` and wait: the job's record plus submit→end and RUNNING→end seconds.

    ``submit_timeout``: how long the submit may take (its checks read every source file's footer).
    """
    with SpillwayClient(service.url, submit_timeout=submit_timeout) as client:
        start = time.perf_counter()
        job_id = client.submit(spec).id
        job = client.wait(job_id, timeout=timeout)
        wall = time.perf_counter() - start
    record = json.loads(job.model_dump_json())
    record["wall_s_submit_to_terminal"] = round(wall, 3)
    if job.started_at and job.finished_at:
        record["run_s"] = round((job.finished_at - job.started_at).total_seconds(), 3)
    return record
