"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request

if TYPE_CHECKING:
    from spillway.service.app import Services
    from spillway.service.config import Settings


def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated["Services", Depends(get_services)]

#: The largest page offset: a signed 64-bit integer is what SQLite and PostgreSQL bind.
MAX_OFFSET = 2**63 - 1


def submission_limits(settings: Settings) -> dict[str, Any]:
    """The settings :func:`jobs.validate.validate_submission` checks a submitted spec against, as its keywords."""
    return {"allowed_roots": settings.allowed_roots, "max_partitions": settings.max_partitions, "default_engine": settings.default_engine}
