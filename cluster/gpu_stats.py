"""Per-worker GPU readings, run on each worker with ``client.run``.

Best effort by design: a reading that a worker cannot take (no NVML, cuDF spilling
off) is left out rather than guessed. Needs Spillway importable on the workers,
which holds for the local clusters and for the documented multi-node images.
"""

from __future__ import annotations

import os
from typing import Any


def worker_gpu_stats() -> dict[str, Any]:
    """This worker's GPU: index, name, memory used/total (NVML) and cuDF spill totals."""
    stats = _nvml_reading(os.environ.get("CUDA_VISIBLE_DEVICES"))
    stats["spilled_to_host_bytes"] = _cudf_spilled_to_host()
    limit = os.environ.get("CUDF_SPILL_DEVICE_LIMIT")
    stats["cudf_spill_device_limit"] = int(limit) if limit and limit.isdigit() else None
    return stats


def nanny_gpu_stats(dask_worker: Any) -> tuple[str | None, dict[str, Any]]:
    """On a nanny: its worker's address and the reading of its worker's GPU, NVML's only.

    For a worker whose event loop a query holds (a rank of a job across the GPU workers): its nanny
    answers, and knows the GPU from the environment it starts the worker with. cuDF's spill
    counts live in the worker's process and are left out.
    """
    devices = (getattr(dask_worker, "env", None) or {}).get("CUDA_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
    return dask_worker.worker_address, _nvml_reading(devices)


def _nvml_reading(visible_devices: str | None) -> dict[str, Any]:
    """Index, name and memory used/total of the first GPU of ``visible_devices`` (just the index where NVML is missing)."""
    index = (visible_devices or "").split(",")[0].strip() or None
    stats: dict[str, Any] = {"index": index}
    try:
        import pynvml

        pynvml.nvmlInit()
        if index is None or index.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(index or 0))
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        name = pynvml.nvmlDeviceGetName(handle)
        stats.update(name=name.decode() if isinstance(name, bytes) else name, memory_total=int(memory.total), memory_used=int(memory.used))
    except Exception:  # noqa: BLE001 - no NVML here: no reading
        pass
    return stats


def _cudf_spilled_to_host() -> int | None:
    try:
        from cudf.core.buffer.spill_manager import get_global_manager
    except ImportError:
        return None
    manager = get_global_manager()
    if manager is None:
        return None
    totals = getattr(manager.statistics, "spill_totals", {}) or {}
    moved = totals.get(("gpu", "cpu"))
    return int(moved[0]) if moved else 0
