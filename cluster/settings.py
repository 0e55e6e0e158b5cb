"""Cluster settings: what kind of Dask cluster the service starts or joins."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Where the service serves the Dask dashboard (service/routes/dashboard.py). The scheduler's
#: HTTP server takes the same prefix (``http_prefix``, ``dask scheduler --dashboard-prefix``),
#: so the pages' own links and websocket URLs hold through the proxy unchanged.
DASHBOARD_PREFIX = "/dashboard"


class ClusterSettings(BaseModel):
    """How Spillway gets its Dask cluster.

    With ``scheduler_address`` set, the service joins that existing cluster (for
    example ``dask scheduler`` plus ``dask cuda worker`` on each node) and starts
    nothing. Otherwise it starts a local cluster: a ``LocalCUDACluster`` with one
    worker per GPU when the backend is cudf, or a CPU ``LocalCluster``.
    """

    model_config = ConfigDict(extra="forbid")

    scheduler_address: str | None = Field(
        default=None, description="Join this existing scheduler (e.g. tcp://10.0.0.5:8786 or ucx://...) instead of starting one."
    )
    backend: Literal["auto", "pandas", "cudf"] = Field(
        default="auto", description="Dataframe backend: cudf when GPUs and the gpu extra are present (auto), or forced."
    )
    n_workers: int = Field(default=2, ge=1, le=512, description="CPU cluster: number of worker processes.")
    threads_per_worker: int = Field(default=1, ge=1, le=256, description="Threads per worker (CPU and GPU).")
    memory_limit: str = Field(
        default="auto", description="Host memory limit per worker: bytes ('8GB'), a fraction of RAM (0.5) or 'auto'."
    )
    dashboard_address: str | None = Field(
        default="127.0.0.1:8787", description="Where the Dask dashboard listens; ':0' for any free port, empty to turn it off."
    )
    local_directory: str | None = Field(default=None, description="Worker scratch and spill directory on local disk.")
    dashboard_public_url: str | None = Field(
        default=None,
        description="Dashboard link handed to users, when it differs from the address the cluster reports (used only with dashboard_proxy off).",
    )
    dashboard_proxy: bool = Field(
        default=True,
        description=f"Serve the dashboard through the service at {DASHBOARD_PREFIX}/ behind its bearer-token auth, and link that "
        f"instead of the dashboard's own port. A local cluster's scheduler then serves under {DASHBOARD_PREFIX}; a joined "
        f"scheduler must be started with `dask scheduler --dashboard-prefix {DASHBOARD_PREFIX}`.",
    )
    # GPU options: used only for a LocalCUDACluster.
    cuda_visible_devices: str | None = Field(
        default=None, description="GPUs to use, as CUDA_VISIBLE_DEVICES ('0,1'); one worker per GPU. All visible when unset."
    )
    allow_gpu_sharing: bool = Field(
        default=False,
        description="Let cuda_visible_devices list a GPU more than once ('0,0': two workers on GPU 0, sharing its memory).",
    )
    device_memory_limit: str = Field(
        default="auto", description="Per-worker device memory limit: bytes ('40GB'), a fraction in (0, 1] or 'auto'."
    )
    gpu_trace_progress: bool = Field(
        default=True,
        description="Live progress of Polars jobs on the GPU from cudf-polars' traces (CUDF_POLARS_LOG_TRACES in the workers): "
        "the plan's nodes evaluated so far. Off: stages show 0 of 1 until the query ends.",
    )
    gpu_multi_worker: Literal["auto", "off", "always"] = Field(
        default="auto",
        description="Polars jobs across every GPU worker (cudf-polars' DaskEngine, each rank writing its share): 'auto' when a job "
        "does not fit one worker in memory and there are two or more GPU workers; 'always' for every job whose sink allows it "
        "(parquet, local, no partition_on); 'off' never (such jobs stream on one worker). Such a job has the GPU workers to itself.",
    )
    enable_cudf_spill: bool = Field(default=True, description="Let cuDF spill device buffers to host memory under pressure.")
    cudf_spill_device_limit: str | None = Field(
        default=None, description="Spill above this many device bytes per worker (CUDF_SPILL_DEVICE_LIMIT), e.g. '20GB'."
    )
    rmm_pool_size: str | None = Field(default=None, description="RMM pool size per worker ('16GB', or a fraction); none by default.")
    rmm_maximum_pool_size: str | None = Field(
        default=None, description="Cap on the RMM pool's growth ('20GB'); with spilling off, allocations past it fail."
    )
    rmm_async: bool = Field(default=False, description="Use RMM's CUDA async allocator instead of a pool.")
    protocol: Literal["tcp", "ucx"] = Field(
        default="tcp", description="Comms between scheduler and GPU workers; 'ucx' needs distributed-ucxx (gpu extra)."
    )

    @field_validator("memory_limit", "device_memory_limit")
    @classmethod
    def _limit_is_parseable(cls, value: str) -> str:
        parse_memory(value, field="limit")
        return value


def parse_memory(value: str, *, field: str) -> int | float | None:
    """Bytes (int), a fraction (float in (0, 1]) or None for 'auto'.

    Raises
    ------
    ValueError
        With a message naming ``field`` and the accepted forms.
    """
    from dask.utils import parse_bytes

    text = str(value).strip().lower()
    if text in ("auto", ""):
        return None
    try:
        number = float(text)
    except ValueError:
        try:
            return parse_bytes(text)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{field}: '{value}' is not bytes ('8GB'), a fraction (0.8) or 'auto'") from exc
    if 0 < number <= 1:
        return number
    if number > 1 and number == int(number):
        return int(number)
    raise ValueError(f"{field}: a fraction must be in (0, 1], got {value}")
