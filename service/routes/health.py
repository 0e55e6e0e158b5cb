"""Health checks and Prometheus metrics."""

from __future__ import annotations

import asyncio
import os

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from spillway.service.auth import Scope, require
from spillway.service.routes.deps import ServicesDep
from spillway.service.schemas import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz(services: ServicesDep, response: Response) -> Health:
    """200 when the store answers and the cluster has workers; 503 otherwise."""
    try:
        info = await asyncio.wait_for(services.cluster.info(), 5.0)
        workers = len(info.workers)
    except (OSError, TimeoutError) as exc:
        response.status_code = 503
        return Health(status="unavailable", backend=services.cluster.backend, workers=0, details={"cluster": str(exc)})
    if workers == 0:
        response.status_code = 503
    return Health(
        status="ok" if workers else "no-workers",
        backend=services.cluster.backend,
        workers=workers,
        # The pid tells a launcher that this answer came from the process it started.
        details={"running_jobs": services.manager.running_count, "pid": os.getpid()},
    )


@router.get("/metrics", response_class=Response, dependencies=[require(Scope.READ)])
async def metrics(services: ServicesDep) -> Response:
    """Prometheus text format: the series README "Metrics" lists, the cluster read at each scrape."""
    return Response(await services.metrics.render(services.cluster), media_type=CONTENT_TYPE_LATEST)
