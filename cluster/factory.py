"""Settings → a Dask cluster and an asynchronous client to it.

Every option is validated before anything starts. A local cluster runs its
scheduler on its own event-loop thread, and the service talks to it through an
ordinary client, exactly as it talks to an existing cluster joined by address.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from distributed import Client

from spillway.cluster.gpu_stats import nanny_gpu_stats, worker_gpu_stats
from spillway.cluster.info import ClusterInfo, worker_info
from spillway.cluster.local_process import HANDSHAKE
from spillway.cluster.nannies import nanny_answers
from spillway.cluster.settings import DASHBOARD_PREFIX, ClusterSettings, parse_memory
from spillway.jobs.errors import ClusterConfigError
from spillway.jobs.pipeline import Backend

log = logging.getLogger(__name__)

GPU_EXTRA_HINT = "install the gpu extra: pip install '.[gpu]' (CUDA 13 wheels of RAPIDS 26.10)"


def visible_gpu_count() -> int:
    """GPUs this process can see through NVML, honouring CUDA_VISIBLE_DEVICES; 0 when none or no NVML."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


def gpu_stack_installed() -> bool:
    """Whether cudf, dask-cudf and dask-cuda can be imported."""
    return all(importlib.util.find_spec(name) is not None for name in ("cudf", "dask_cudf", "dask_cuda"))


def resolve_backend(settings: ClusterSettings) -> tuple[Backend, str]:
    """The backend to use and why.

    Raises
    ------
    ClusterConfigError
        If cudf is asked for but the gpu extra or a GPU is missing.
    """
    if settings.backend == "pandas":
        return "pandas", "backend=pandas was set"
    installed = gpu_stack_installed()
    gpus = visible_gpu_count() if installed else 0
    if settings.backend == "cudf":
        if not installed:
            raise ClusterConfigError(f"backend=cudf needs cudf, dask-cudf and dask-cuda: {GPU_EXTRA_HINT}", field="cluster.backend")
        if gpus == 0 and settings.scheduler_address is None:
            raise ClusterConfigError("backend=cudf but no GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)", field="cluster.backend")
        return "cudf", "backend=cudf was set"
    if not installed:
        return "pandas", "no GPU stack installed (cudf, dask-cudf, dask-cuda); running on CPU with pandas"
    if gpus == 0:
        return "pandas", "the GPU stack is installed but no GPU is visible; running on CPU with pandas"
    return "cudf", f"{gpus} GPU(s) visible and the GPU stack installed"


@dataclass
class ClusterHandle:
    """The service's cluster: the client it submits through and what it started (if anything).

    ``client`` is asynchronous and lives on the service's event loop. ``planner`` is a
    synchronous client for graph building in worker threads: building some graphs
    computes eagerly (a sort's partition boundaries), and that work belongs on the
    cluster, never on the service process.
    """

    client: Client
    planner: Client
    backend: Backend
    kind: str
    protocol: str
    cluster: LocalClusterProcess | None = None
    dashboard_public_url: str | None = None
    backend_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    dashboard_proxy: bool = False

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's status page at its own address (the service links its proxy instead, when on)."""
        if self.dashboard_public_url and not self.dashboard_proxy:
            return self.dashboard_public_url.rstrip("/") + "/status"
        upstream = self.dashboard_upstream
        if upstream is None:
            return None
        return upstream + (DASHBOARD_PREFIX if self.dashboard_proxy else "") + "/status"

    @property
    def dashboard_upstream(self) -> str | None:
        """``scheme://host:port`` of the dashboard's HTTP server, as the service reaches it; None when it is off."""
        if self.cluster is not None:  # started here: its handshake says whether the dashboard is on
            link = self.cluster.dashboard_link
        else:
            link = self.client.dashboard_link
        if not link:
            return None
        parts = urlsplit(link)
        return f"{parts.scheme}://{parts.netloc}"

    async def gpu_stats(self) -> dict[str, dict[str, Any]]:
        """Each GPU worker's reading (empty on the pandas backend or when workers cannot run it)."""
        if self.backend != "cudf":
            return {}
        try:
            return await self.client.run(worker_gpu_stats)
        except Exception as exc:  # noqa: BLE001 - best effort: e.g. workers without Spillway installed
            log.debug("no GPU readings from the workers: %s", exc)
            return {}

    async def rank_gpu_stats(self, ranks: list[str]) -> dict[str, dict[str, Any]]:
        """The GPU readings of ``ranks``, workers whose event loops a query holds, taken by their nannies (NVML only)."""
        if self.backend != "cudf":
            return {}
        try:
            return await nanny_answers(self.client, nanny_gpu_stats, ranks)
        except Exception as exc:  # noqa: BLE001 - best effort, as gpu_stats
            log.debug("no GPU readings from the ranks' nannies: %s", exc)
            return {}

    async def info(self) -> ClusterInfo:
        """Workers, threads and memory as the scheduler sees them now."""
        identity = await self.client.scheduler.identity(n_workers=-1)
        gpu = await self.gpu_stats()
        limit = self.extra.get("device_memory_limit")
        workers = [worker_info(addr, raw, gpu.get(addr), limit) for addr, raw in sorted(identity.get("workers", {}).items())]
        limits = [w.memory_limit for w in workers]
        return ClusterInfo(
            backend=self.backend,
            kind=self.kind,
            scheduler_address=self.client.scheduler.address,
            protocol=self.protocol,
            dashboard_link=self.dashboard_link,
            workers=workers,
            total_threads=sum(w.threads for w in workers),
            total_memory_limit=None if any(v is None for v in limits) else sum(v for v in limits if v is not None),
        )

    async def close(self) -> None:
        """Close the client, then the cluster this handle started."""
        await self.client.close()
        await asyncio.to_thread(self.planner.close)
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.close)


class LocalClusterProcess:
    """A local cluster in a child process (see :mod:`cluster.local_process`)."""

    def __init__(self, settings: ClusterSettings, backend: Backend) -> None:
        self.settings = settings
        self.backend = backend
        self.process: subprocess.Popen[str] | None = None
        self.scheduler_address = ""
        self.dashboard_link: str | None = None

    def start(self, timeout: float = 180.0) -> None:
        """Start the child and wait for its scheduler address (blocking; run off the event loop).

        Raises
        ------
        ClusterConfigError
            If the cluster could not start; the child's reason is in the message.
        """
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spillway.cluster.local_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",  # a worker's stray bytes must not end the reading (then the pipe fills: see _read_handshake)
            start_new_session=True,  # a terminal's Ctrl-C stops the service, which then stops this
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"settings": self.settings.model_dump(mode="json"), "backend": self.backend}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = _read_handshake(self.process.stdout, timeout)
        if "error" in reply:
            self.close()
            raise ClusterConfigError(f"the local cluster did not start: {reply['error']}", field="cluster")
        self.scheduler_address = reply["address"]
        self.dashboard_link = reply.get("dashboard")

    def close(self) -> None:
        """Close the pipe, which stops the cluster; kill it if it lingers."""
        if self.process is None:
            return
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(45)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


#: The longest piece of the cluster's stdout read as one line (a line without end is read in such pieces).
MAX_LINE_CHARS = 64 * 1024
#: What the service's log keeps of each: a worker's flood must not flood the log too.
LOGGED_CHARS = 2000


def _read_handshake(stream: Any, timeout: float) -> dict[str, Any]:
    """The child's handshake reply. Its stdout is read for as long as it lives: other lines (library chatter) go to the log.

    The child's workers write to the same pipe (they inherit its stdout), for the cluster's whole
    life. A pipe nobody reads fills at 64 KiB, and the next ``print`` in any worker then blocks
    for good: on the GPU machine a multi-GPU query stalled in cudf-polars' trace logging, both
    ranks waiting, until the service stopped.
    """
    result: dict[str, Any] = {"error": "the cluster process exited before it started; see the log above"}
    shook_hands = threading.Event()

    def read() -> None:
        for line in iter(lambda: stream.readline(MAX_LINE_CHARS), ""):  # a line without end is logged in pieces, never held whole
            try:
                if not shook_hands.is_set() and line.startswith(HANDSHAKE):
                    reply = json.loads(line[len(HANDSHAKE):])
                    result.clear()
                    result.update(reply)
                    shook_hands.set()
                    continue
                text = line.rstrip()
                cut = f"… ({len(text) - LOGGED_CHARS} more characters)" if len(text) > LOGGED_CHARS else ""
                log.info("cluster process: %s%s", text[:LOGGED_CHARS], cut)
            except Exception as exc:  # noqa: BLE001 - a line it cannot take: say so and read on, or the pipe fills
                log.warning("cluster process: unreadable line %r (%s: %s)", line[:200], type(exc).__name__, exc)
        shook_hands.set()  # EOF: the child exited

    reader = threading.Thread(target=read, daemon=True, name="spillway-cluster-stdout")
    reader.start()
    if not shook_hands.wait(timeout):
        raise ClusterConfigError(f"the local cluster did not start within {timeout:.0f} s", field="cluster")
    return result


async def start_cluster(settings: ClusterSettings) -> ClusterHandle:
    """Start (or join) the cluster that ``settings`` describe and connect a client.

    Raises
    ------
    ClusterConfigError
        For settings that cannot work, before anything is started.
    """
    backend, reason = resolve_backend(settings)
    log.info("backend: %s (%s)", backend, reason)
    if settings.scheduler_address:
        client, planner = await _connect(settings.scheduler_address)
        protocol = settings.scheduler_address.split("://", 1)[0] if "://" in settings.scheduler_address else "tcp"
        return ClusterHandle(
            client, planner, backend, "external", protocol, None, settings.dashboard_public_url, reason,
            {"gpu_multi_worker": settings.gpu_multi_worker, "allow_gpu_sharing": settings.allow_gpu_sharing}, dashboard_proxy=settings.dashboard_proxy,
        )
    device_limit = parse_memory(settings.device_memory_limit, field="device_memory_limit")
    if backend == "cudf":
        from spillway.cluster.gpu import cuda_cluster_kwargs

        # Validates here, before a process starts; the limit is the one each worker gets (split where workers share a GPU).
        device_limit = cuda_cluster_kwargs(settings, visible_gpu_count()).get("device_memory_limit", device_limit)
        kind, protocol = "LocalCUDACluster", settings.protocol
    else:
        kind, protocol = "LocalCluster", "tcp"
    cluster = LocalClusterProcess(settings, backend)
    await asyncio.to_thread(cluster.start)
    client, planner = await _connect(cluster.scheduler_address)
    log.info("started %s at %s, dashboard %s", kind, cluster.scheduler_address, cluster.dashboard_link or "off")
    extra = {
        "device_memory_limit": device_limit,
        "gpu_multi_worker": settings.gpu_multi_worker,
        "allow_gpu_sharing": settings.allow_gpu_sharing,
    }
    return ClusterHandle(
        client, planner, backend, kind, protocol, cluster, settings.dashboard_public_url, reason, extra, dashboard_proxy=settings.dashboard_proxy
    )


async def _connect(address: str) -> tuple[Client, Client]:
    # Neither client becomes dask's global default: only code that asks for one uses it.
    client = await Client(address, asynchronous=True, set_as_default=False)
    planner = await asyncio.to_thread(Client, address, set_as_default=False)
    return client, planner
