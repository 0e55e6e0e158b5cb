"""``GET /cluster``: workers, threads, memory, backend, the dashboard link, and what runs where."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from spillway.cluster.info import ClusterInfo, RunningJob
from spillway.jobs.errors import JobNotFound
from spillway.service.auth import CallerDep, Scope, require
from spillway.service.routes.dashboard import dashboard_link
from spillway.service.routes.deps import ServicesDep

router = APIRouter(tags=["cluster"], dependencies=[require(Scope.READ)])


@router.get("/cluster", response_model=ClusterInfo)
async def get_cluster(services: ServicesDep, caller: CallerDep, request: Request) -> ClusterInfo:
    """The cluster jobs run on, as its scheduler sees it now, and the caller's running jobs on it.

    The dashboard link is the service's own ``/dashboard/status`` (behind its auth) unless
    the proxy is off.
    """
    info = await services.cluster.info()
    running = await services.manager.running()
    visible = await asyncio.to_thread(_visible_to, services, caller.sees, running)
    return info.model_copy(update={"running": visible, "dashboard_link": dashboard_link(request)})


def _visible_to(services: ServicesDep, owner: str | None, running: list[RunningJob]) -> list[RunningJob]:
    """The jobs of ``running`` that ``owner`` may see (None: an admin, or auth off: all)."""
    if owner is None:
        return running
    visible = []
    for job in running:
        try:
            services.store.get(job.id, owner=owner)
        except JobNotFound:
            continue
        visible.append(job)
    return visible
