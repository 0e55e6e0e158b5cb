"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

if TYPE_CHECKING:
    from service.app import Services


def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated["Services", Depends(get_services)]

#: The largest page offset: a signed 64-bit integer is what SQLite and PostgreSQL bind.
MAX_OFFSET = 2**63 - 1
