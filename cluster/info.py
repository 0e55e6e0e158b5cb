"""What ``GET /cluster`` reports, read from the scheduler's view of its workers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class GpuInfo(BaseModel):
    """A worker's GPU as the worker reports it (best effort: needs NVML on the worker)."""

    name: str | None = None
    index: str | None = Field(default=None, description="The CUDA_VISIBLE_DEVICES entry the worker runs on.")
    memory_total: int | None = None
    memory_used: int | None = None
    device_memory_limit: int | None = Field(default=None, description="The configured per-worker device memory limit, in bytes.")
    cudf_spill_device_limit: int | None = Field(default=None, description="cuDF spills above this many device bytes (when set).")
    spilled_to_host_bytes: int | None = Field(default=None, description="cuDF spill statistics: bytes moved device → host so far.")


class WorkerInfo(BaseModel):
    """One Dask worker."""

    name: str
    address: str
    threads: int
    memory_limit: int | None = Field(description="Host memory limit in bytes (None: unlimited).")
    memory_used: int = Field(description="Process memory in bytes, from the last heartbeat.")
    spilled_to_disk_bytes: int = Field(default=0, description="Bytes the worker spilled host → disk.")
    tasks_processing: int = 0
    gpu: GpuInfo | None = None


class RunningJob(BaseModel):
    """A job running now, and the workers its tasks are running on."""

    id: str
    engine: str | None = Field(default=None, description="polars or dask, once chosen.")
    device: str | None = Field(default=None, description="cpu or gpu, once chosen.")
    reason: str | None = Field(default=None, description="Why this engine (and, on the GPU, which executor).")
    workers: dict[str, int] = Field(
        default_factory=dict, description="Worker address → the job's tasks running there now (a Polars job: its one task)."
    )


class ClusterInfo(BaseModel):
    """The cluster the service runs jobs on."""

    backend: str = Field(description="Dataframe backend jobs run on: pandas or cudf.")
    kind: str = Field(description="LocalCluster, LocalCUDACluster, or external (joined by address).")
    scheduler_address: str
    protocol: str
    dashboard_link: str | None
    workers: list[WorkerInfo]
    total_threads: int
    total_memory_limit: int | None
    running: list[RunningJob] = Field(
        default_factory=list, description="The caller's running jobs (every running job for an admin) and where their tasks run."
    )


def worker_info(address: str, raw: dict[str, Any], gpu_stats: dict[str, Any] | None = None, device_limit: int | float | None = None) -> WorkerInfo:
    """Turn one entry of the scheduler's ``identity()['workers']`` into a WorkerInfo.

    ``gpu_stats`` is the worker's :func:`cluster.gpu_stats.worker_gpu_stats` reading;
    ``device_limit`` the configured limit (bytes, or a fraction of the GPU's memory).
    """
    metrics = raw.get("metrics", {})
    gpu_static = raw.get("gpu") or {}
    gpu_metrics = metrics.get("gpu") or {}
    gpu = None
    if gpu_static or gpu_metrics or gpu_stats:
        stats = gpu_stats or {}
        total = stats.get("memory_total") or gpu_static.get("memory-total")
        if isinstance(device_limit, float) and total:
            device_limit = int(device_limit * total)
        gpu = GpuInfo(
            name=stats.get("name") or gpu_static.get("name"),
            index=stats.get("index"),
            memory_total=total,
            memory_used=stats.get("memory_used") or gpu_metrics.get("memory-used"),
            device_memory_limit=device_limit,
            cudf_spill_device_limit=stats.get("cudf_spill_device_limit"),
            spilled_to_host_bytes=stats.get("spilled_to_host_bytes"),
        )
    return WorkerInfo(
        name=str(raw.get("name", address)),
        address=address,
        threads=int(raw.get("nthreads", 0)),
        memory_limit=raw.get("memory_limit") or None,
        memory_used=int(metrics.get("memory", 0)),
        spilled_to_disk_bytes=int((metrics.get("spilled_bytes") or {}).get("disk", 0)),
        tasks_processing=int((metrics.get("task_counts") or {}).get("executing", 0)),
        gpu=gpu,
    )
