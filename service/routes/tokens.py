"""``/tokens``: list, create, revoke and rotate API tokens over REST (admin scope, auth on).

The same as ``spillway token ...`` on the service's host; a secret is in a response only
once, in the one that made it. With auth off these routes answer 403.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from spillway.service.auth import Forbidden, Scope, require
from spillway.service.routes.deps import MAX_OFFSET, ServicesDep
from spillway.service.schemas import ErrorBody
from spillway.service.token_models import NAME_PATTERN, IssuedToken, TokenInfo, parse_duration


async def _auth_on(services: ServicesDep) -> None:
    # With auth off anyone who reaches the port could mint an admin token that stays good once auth is on.
    if not services.settings.auth_required:
        raise Forbidden("auth is off on this service, so tokens are not managed over REST: use `spillway token ...` on its host")


router = APIRouter(tags=["tokens"], dependencies=[Depends(_auth_on), require(Scope.ADMIN)])


def _checked(text: str | None) -> str | None:
    if text is not None:
        parse_duration(text)  # a ValueError here is a 422 naming expires_in
    return text


ExpiresIn = Annotated[
    str | None,
    Field(description="Lifetime from now: 30d, 12h, 1w2d, 90m or 45s. None: it does not expire (create) or keeps its expiry (rotate).", examples=["30d"]),
    AfterValidator(_checked),
]
TokenId = Annotated[int, Path(ge=1, le=MAX_OFFSET, description="The token's id (the number in its name#id).")]
_NOT_FOUND = {404: {"model": ErrorBody, "description": "No token with this id."}}


class TokenCreate(BaseModel):
    """A new token."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Who or what the token is for: 1 to 100 characters, no control characters.")
    scope: Scope = Field(default=Scope.SUBMIT, description="read, submit (includes read) or admin (everything).")
    expires_in: ExpiresIn = None


class TokenRotate(BaseModel):
    """A rotation: a new secret, and optionally a new expiry."""

    model_config = ConfigDict(extra="forbid")

    expires_in: ExpiresIn = None


def _lifetime(text: str | None) -> timedelta | None:
    return None if text is None else parse_duration(text)


@router.get("/tokens", response_model=list[TokenInfo])
async def list_tokens(services: ServicesDep) -> list[TokenInfo]:
    """Every token, revoked and expired ones included: scope, state, expiry and last use (never a secret)."""
    return await asyncio.to_thread(services.store.tokens.list)


@router.post("/tokens", response_model=IssuedToken, status_code=201)
async def create_token(body: TokenCreate, services: ServicesDep) -> IssuedToken:
    """Create a token; the response holds its secret, which is not shown again."""
    return await asyncio.to_thread(services.store.tokens.create, body.name, body.scope, expires_in=_lifetime(body.expires_in))


@router.get("/tokens/{token_id}", response_model=TokenInfo, responses=_NOT_FOUND)
async def get_token(token_id: TokenId, services: ServicesDep) -> TokenInfo:
    """One token."""
    return await asyncio.to_thread(services.store.tokens.get, token_id)


@router.post("/tokens/{token_id}/revoke", response_model=TokenInfo, responses=_NOT_FOUND)
async def revoke_token(token_id: TokenId, services: ServicesDep) -> TokenInfo:
    """Revoke a token: its next request, on any replica, is a 401. Revoking again changes nothing."""
    return await asyncio.to_thread(services.store.tokens.revoke, token_id)


@router.post(
    "/tokens/{token_id}/rotate",
    response_model=IssuedToken,
    responses={**_NOT_FOUND, 409: {"model": ErrorBody, "description": "The token is revoked, or expired and no new expiry was given."}},
)
async def rotate_token(token_id: TokenId, services: ServicesDep, body: TokenRotate | None = None) -> IssuedToken:
    """Give a token a new secret (in the response, once); the old secret is refused from now on.

    The token keeps its id, and so its jobs and pipelines; its expiry stays unless ``expires_in`` is given.
    """
    lifetime = _lifetime(body.expires_in if body else None)
    return await asyncio.to_thread(services.store.tokens.rotate, token_id, expires_in=lifetime)
