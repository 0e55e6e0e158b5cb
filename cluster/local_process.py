"""The embedded cluster's own process: starts a LocalCluster or LocalCUDACluster and
keeps it until the service closes the pipe (or dies, which closes it too).

Why a process of its own: the scheduler's event loop then never competes with the
HTTP server for the GIL, and graph building in the service (which computes eagerly
for a sort's boundaries) cannot deadlock with the scheduler materialising graphs on
Python 3.11's class-wide ``cached_property`` lock. The service joins it by address,
exactly as it joins an external cluster.

Protocol: one line of ClusterSettings JSON on stdin; one stdout line
``HANDSHAKE {"address", "dashboard"}`` (or ``HANDSHAKE {"error"}``), which the service
finds among whatever else libraries print there; then EOF on stdin stops it.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from spillway.cluster.settings import DASHBOARD_PREFIX, ClusterSettings

HANDSHAKE = "SPILLWAY-CLUSTER"


def dashboard_options(settings: ClusterSettings) -> dict[str, Any]:
    """LocalCluster's (and LocalCUDACluster's) dashboard arguments; an empty address turns it off.

    With the dashboard proxied by the service, the scheduler serves it (and its health and
    metrics routes) under :data:`~cluster.settings.DASHBOARD_PREFIX`.
    ``dashboard_address=None`` alone leaves the scheduler's HTTP server (health, metrics)
    on port 8787, which the scheduler then reports as its dashboard; off, that server
    takes a free loopback port instead and no dashboard link is handed out.
    """
    if settings.dashboard_address:
        if settings.dashboard_proxy:  # the service proxies it at the same path (service/routes/dashboard.py)
            return {"dashboard_address": settings.dashboard_address, "scheduler_kwargs": {"http_prefix": DASHBOARD_PREFIX}}
        return {"dashboard_address": settings.dashboard_address}
    return {"dashboard_address": None, "scheduler_kwargs": {"dashboard": False, "dashboard_address": "127.0.0.1:0"}}


#: The scheduler's worker-ttl while a job may run across the GPU workers: as long as a job may run
#: (SPILLWAY_DEFAULT_JOB_TIMEOUT_S's default).
MULTI_GPU_WORKER_TTL = "24h"


def scheduler_config(settings: ClusterSettings, backend: str) -> dict[str, Any]:
    """Dask settings for the scheduler this process starts.

    A job across the GPU workers (cudf-polars' DaskEngine, jobs/gpu_multi.py) runs in
    ``client.run``, which holds each worker's event loop for the whole query: no heartbeat
    goes out, and Dask's ``worker-ttl`` (5 minutes) would remove every worker of a longer
    query. With such jobs possible the ttl is :data:`MULTI_GPU_WORKER_TTL`; a worker that
    hangs in any other job is still restarted by the service within ``SPILLWAY_HUNG_WORKER_S``
    (cluster/hung_workers.py), which spares a multi-GPU job's workers only while it runs.
    """
    if backend == "cudf" and settings.gpu_multi_worker != "off":
        return {"distributed.scheduler.worker-ttl": MULTI_GPU_WORKER_TTL}
    return {}


def _start(settings: ClusterSettings, backend: str) -> object:
    import dask

    dask.config.set(scheduler_config(settings, backend))  # this process is the scheduler's: set for its lifetime
    if backend == "cudf":
        from spillway.cluster.gpu import local_cuda_cluster

        return local_cuda_cluster(settings)
    from distributed import LocalCluster

    from spillway.cluster.settings import parse_memory

    return LocalCluster(
        n_workers=settings.n_workers,
        threads_per_worker=settings.threads_per_worker,
        processes=True,
        memory_limit=parse_memory(settings.memory_limit, field="memory_limit") or "auto",
        **dashboard_options(settings),
        local_directory=settings.local_directory,
        host="127.0.0.1",
        # A Polars job runs as one task with the worker's threads; Polars sizes its pool at import.
        env={"POLARS_MAX_THREADS": str(settings.threads_per_worker)},
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    request = json.loads(sys.stdin.readline())
    settings = ClusterSettings.model_validate(request["settings"])
    try:
        cluster = _start(settings, request["backend"])
    except Exception as exc:  # noqa: BLE001 - reported to the service, which raises it
        print(HANDSHAKE, json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        raise SystemExit(1) from exc
    print(HANDSHAKE, json.dumps({"address": cluster.scheduler_address, "dashboard": cluster.dashboard_link if settings.dashboard_address else None}), flush=True)
    sys.stdin.read()  # until the service closes the pipe or dies
    cluster.close(timeout=30)


if __name__ == "__main__":
    main()
