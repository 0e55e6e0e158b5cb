"""The GPU cluster: a dask-cuda ``LocalCUDACluster`` with one worker per GPU.

Validated before anything starts, with messages that say how to fix the setting.
Imported only when the backend is cudf, so CPU installs never need dask-cuda.
"""

from __future__ import annotations

import copy
import importlib.util
import os
from typing import Any

from spillway.cluster.local_process import dashboard_options
from spillway.cluster.settings import ClusterSettings, parse_memory
from spillway.jobs.errors import ClusterConfigError
from spillway.jobs.gpu_trace_progress import TRACES_ENV, TRACES_FRAMES_ENV, TRACES_MEMORY_ENV

UCX_HINT = "protocol=ucx needs distributed-ucxx: pip install '.[gpu]' (or set SPILLWAY_CLUSTER__PROTOCOL=tcp)"


def _device_list(settings: ClusterSettings, visible: int) -> list[str]:
    if settings.cuda_visible_devices is None:
        return [str(i) for i in range(visible)]
    devices = [d.strip() for d in settings.cuda_visible_devices.split(",") if d.strip()]
    if not devices:
        raise ClusterConfigError("cuda_visible_devices is empty; list GPU indices like '0,1'", field="cluster.cuda_visible_devices")
    distinct = set(devices)
    if len(distinct) > visible:
        raise ClusterConfigError(
            f"cuda_visible_devices asks for {len(distinct)} GPUs ({settings.cuda_visible_devices}) but {visible} are visible",
            field="cluster.cuda_visible_devices",
        )
    if len(distinct) < len(devices) and not settings.allow_gpu_sharing:
        shared = sorted(d for d in distinct if devices.count(d) > 1)
        raise ClusterConfigError(
            f"cuda_visible_devices lists GPU {', '.join(shared)} more than once ({settings.cuda_visible_devices}): its workers would "
            "share one GPU's memory; set cluster.allow_gpu_sharing=true if that is meant (tests of several workers on one GPU)",
            field="cluster.cuda_visible_devices",
        )
    return devices


def cuda_cluster_kwargs(settings: ClusterSettings, visible_gpus: int) -> dict[str, Any]:
    """LocalCUDACluster keyword arguments for ``settings``.

    Raises
    ------
    ClusterConfigError
        If the protocol's package is missing, more GPUs are asked for than are
        visible, or a memory setting cannot be parsed.
    """
    if settings.protocol == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        raise ClusterConfigError(UCX_HINT, field="cluster.protocol")
    devices = _device_list(settings, visible_gpus)
    try:
        device_limit = parse_memory(settings.device_memory_limit, field="device_memory_limit")
        host_limit = parse_memory(settings.memory_limit, field="memory_limit")
        spill_limit = parse_memory(settings.cudf_spill_device_limit or "auto", field="cudf_spill_device_limit")
    except ValueError as exc:
        raise ClusterConfigError(str(exc), field="cluster") from exc
    if settings.rmm_maximum_pool_size and not settings.rmm_pool_size:
        raise ClusterConfigError("rmm_maximum_pool_size needs rmm_pool_size", field="cluster.rmm_maximum_pool_size")
    if settings.rmm_async and settings.rmm_pool_size:
        raise ClusterConfigError("choose rmm_pool_size or rmm_async, not both", field="cluster.rmm_async")
    if spill_limit is not None and not settings.enable_cudf_spill:
        raise ClusterConfigError("cudf_spill_device_limit needs enable_cudf_spill=true", field="cluster.cudf_spill_device_limit")
    if spill_limit is not None:
        # cuDF reads its spill threshold from the environment of each worker process.
        os.environ["CUDF_SPILL_DEVICE_LIMIT"] = str(spill_limit)
    # cudf-polars reads these when imported in a worker: its per-node trace events are the GPU's live
    # progress. Only the events are needed, not the memory and frame snapshots it can add to each one
    # (NVML and RMM queries per node: 5.7 % of TPC-H SF 10 with them, 0.7 % without, on an H200).
    os.environ[TRACES_ENV] = "1" if settings.gpu_trace_progress else "0"
    os.environ[TRACES_MEMORY_ENV] = os.environ[TRACES_FRAMES_ENV] = "0"
    kwargs: dict[str, Any] = {
        "CUDA_VISIBLE_DEVICES": ",".join(devices),
        "n_workers": len(devices),
        "threads_per_worker": settings.threads_per_worker,
        "memory_limit": host_limit if host_limit is not None else "auto",
        "enable_cudf_spill": settings.enable_cudf_spill,
        "cudf_spill_stats": 1 if settings.enable_cudf_spill else 0,
        "local_directory": settings.local_directory,
        "protocol": settings.protocol,
        "rmm_pool_size": settings.rmm_pool_size,
        "rmm_maximum_pool_size": settings.rmm_maximum_pool_size,
        "rmm_async": settings.rmm_async,
        **dashboard_options(settings),
    }
    device_limit = shared_device_limit(device_limit, devices)
    if device_limit is not None:  # "auto" on GPUs of their own keeps dask-cuda's own default
        kwargs["device_memory_limit"] = device_limit
    return kwargs


def shared_device_limit(limit: int | float | None, devices: list[str]) -> int | float | None:
    """Each worker's device limit where ``devices`` lists a GPU more than once: 'auto' and fractions split among its workers.

    Left alone, each of two workers on one GPU would take 'auto' (80 %) of the whole device: 160 %
    between them. rapidsmpf, on the multi-GPU engine, then reserves memory the other rank holds,
    and cuDF and dask-cuda spill too late. A limit in bytes is the user's own and is kept.
    """
    from spillway.jobs.gpu_placement import AUTO_DEVICE_SHARE

    sharers = max((devices.count(device) for device in devices), default=1)
    if sharers == 1 or isinstance(limit, int):
        return limit
    return (limit if isinstance(limit, float) else AUTO_DEVICE_SHARE) / sharers


def local_cuda_cluster(settings: ClusterSettings) -> Any:
    """Start a LocalCUDACluster (blocking; run it off the event loop).

    A GPU listed twice (``0,0``, with ``allow_gpu_sharing``) gets a second worker of its own:
    dask-cuda names its workers after their GPUs and will not start two on one, so the cluster
    starts one per distinct GPU and each further worker is a copy of its GPU's worker spec.
    """
    from dask_cuda import LocalCUDACluster

    from spillway.cluster.factory import visible_gpu_count

    kwargs = cuda_cluster_kwargs(settings, visible_gpu_count())
    devices = kwargs["CUDA_VISIBLE_DEVICES"].split(",")
    distinct = list(dict.fromkeys(devices))
    cluster = LocalCUDACluster(**{**kwargs, "CUDA_VISIBLE_DEVICES": ",".join(distinct), "n_workers": len(distinct)})
    if len(distinct) < len(devices):
        add_shared_workers(cluster, devices)
    return cluster


def add_shared_workers(cluster: Any, devices: list[str]) -> None:
    """Give each GPU as many workers as ``devices`` lists it, copying the spec of its first one."""
    specs = {str(name): spec for name, spec in cluster.worker_spec.items()}
    for device in dict.fromkeys(devices):
        for copy_number in range(1, devices.count(device)):
            cluster.worker_spec[f"{device}-{copy_number}"] = copy.deepcopy(specs[device])
    cluster.sync(cluster._correct_state)  # starts the new workers, as scale() does
