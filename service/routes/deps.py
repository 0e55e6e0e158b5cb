"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request

if TYPE_CHECKING:
    from spillway.service.app import Services
    from spillway.service.config import Settings


async def get_services(request: Request) -> Services:
    """The services the app built in its lifespan.

    Dependencies that do no blocking work are ``async def``: FastAPI runs a plain ``def``
    dependency in its thread pool, a thread hop per dependency per request, which on a busy
    event loop cost more than the request's own work (bench/RESULTS.md, issue 16 item 14).
    """
    return request.app.state.services


ServicesDep = Annotated["Services", Depends(get_services)]

#: The largest page offset: a signed 64-bit integer is what SQLite and PostgreSQL bind.
MAX_OFFSET = 2**63 - 1


def submission_limits(settings: Settings) -> dict[str, Any]:
    """The settings :func:`jobs.validate.validate_submission` checks a submitted spec against, as its keywords."""
    return {"allowed_roots": settings.allowed_roots, "max_partitions": settings.max_partitions, "default_engine": settings.default_engine}
