"""``GET /cluster``: workers, threads, memory, backend and the dashboard link."""

from __future__ import annotations

from fastapi import APIRouter

from cluster.info import ClusterInfo
from service.auth import Scope, require
from service.routes.deps import ServicesDep

router = APIRouter(tags=["cluster"], dependencies=[require(Scope.READ)])


@router.get("/cluster", response_model=ClusterInfo)
async def get_cluster(services: ServicesDep) -> ClusterInfo:
    """The cluster jobs run on, as its scheduler sees it now."""
    return await services.cluster.info()
