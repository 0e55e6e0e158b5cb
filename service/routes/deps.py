"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

if TYPE_CHECKING:
    from service.app import Services


def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated["Services", Depends(get_services)]
