"""Bearer API tokens on requests: scoped read < submit < admin, checked on every request.

A token owns the jobs and pipelines it creates and sees only those; an admin token sees
all (:class:`Caller`). With auth off nothing has an owner and everything is visible.
Storing, listing, revoking and rotating tokens is :mod:`service.tokens`' job.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, ParamSpec, TypeVar

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from spillway.jobs.errors import SpillwayError
from spillway.service.store import JobStore
from spillway.service.token_models import TokenIdentity
from spillway.service.tokens import TOKEN_PREFIX
from spillway.service.tokens import Scope as Scope
from spillway.service.tokens import Unauthenticated as Unauthenticated

P = ParamSpec("P")
R = TypeVar("R")


class Forbidden(SpillwayError):
    """A valid token whose scope does not allow the request."""

    code = "forbidden"


def create_token(store: JobStore, name: str, scope: Scope, *, expires_in: timedelta | None = None) -> str:
    """Create a token in ``store``'s database and return it; only its hash is stored."""
    return store.tokens.create(name, scope, expires_in=expires_in).token


_QUERY_TOKEN = "__spillway_query_token__"


def accepts_query_token(endpoint: Callable[P, R]) -> Callable[P, R]:
    """Mark a GET route (a server-sent event stream) as taking ``?token=`` when no header is sent.

    The mark is on the matched route's endpoint, so no other route can get it by its path's
    shape (a pipeline named ``events`` is not an event stream).
    """
    setattr(endpoint, _QUERY_TOKEN, True)
    return endpoint


def _takes_query_token(request: Request) -> bool:
    return request.method == "GET" and getattr(request.scope.get("endpoint"), _QUERY_TOKEN, False)


def identify(connection: HTTPConnection, token: str) -> TokenIdentity:
    """Who ``token`` is: a Spillway token, or a JWT from the identity provider when OIDC is on.

    Raises
    ------
    Unauthenticated
        For an unknown, revoked or expired token, or a JWT that does not verify.
    """
    raw = token.strip()
    oidc = getattr(connection.app.state, "oidc", None)  # an OidcVerifier when SPILLWAY_OIDC__ISSUER is set
    if oidc is not None and not raw.startswith(TOKEN_PREFIX):
        return oidc.check(raw)  # raises Unauthenticated: signature, issuer, audience, expiry, scope
    return connection.app.state.services.store.tokens.check(raw)  # raises Unauthenticated: unknown, revoked, expired


def require(needed: Scope):  # noqa: ANN201 - a FastAPI dependency factory
    """A dependency that checks the bearer token for ``needed`` (a no-op when auth is off).

    It runs on the event loop; only the token's lookup (a database read, or a JWT check) goes
    to a thread, and only with auth on.
    """

    async def check(request: Request) -> None:
        services = request.app.state.services
        if not services.settings.auth_required:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if not header and _takes_query_token(request) and request.query_params.get("token"):
            # EventSource cannot send headers; the access log redacts this (see redact_tokens).
            scheme, token = "bearer", request.query_params["token"]
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("this service needs a bearer token: send 'Authorization: Bearer <token>' (create one with `spillway token create`)")
        identity = await asyncio.to_thread(identify, request, token)
        request.state.token_name, scope = identity.owner, identity.scope
        request.state.token_scope = scope  # read by current_caller: admin sees every owner's jobs
        if not scope.allows(needed):
            raise Forbidden(f"this token has scope '{scope.value}'; the request needs '{needed.value}'")

    return Depends(check)


ReadAccess = Annotated[None, require(Scope.READ)]
SubmitAccess = Annotated[None, require(Scope.SUBMIT)]


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the owner of what it creates, and what it may see.

    Parameters
    ----------
    owner
        The token's identity (``name#id``); None with auth off, where nothing has an owner.
    admin
        An ``admin`` token sees and changes every owner's jobs and pipelines.
    """

    owner: str | None
    admin: bool = False

    @property
    def sees(self) -> str | None:
        """The only owner whose jobs and pipelines this caller may see; None for all of them."""
        return None if self.admin else self.owner


async def current_caller(request: Request) -> Caller:
    """The :class:`Caller` of a request whose token a :func:`require` dependency has checked.

    Raises
    ------
    Unauthenticated
        With auth on, when no token was checked: a route that forgot :func:`require`
        then sees nothing rather than everything.
    """
    if not request.app.state.services.settings.auth_required:
        return Caller(owner=None)
    owner = getattr(request.state, "token_name", None)
    if owner is None:
        raise Unauthenticated("this service needs a bearer token: send 'Authorization: Bearer <token>'")
    return Caller(owner=owner, admin=request.state.token_scope is Scope.ADMIN)


CallerDep = Annotated[Caller, Depends(current_caller)]


class RedactTokens(logging.Filter):
    """Blank ``token=`` query values in uvicorn's access log lines."""

    _pattern = re.compile(r"(token=)[^&\s\"]+")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self._pattern.sub(r"\1[redacted]", a) if isinstance(a, str) else a for a in record.args)
        return True


def redact_tokens() -> None:
    """Install :class:`RedactTokens` on uvicorn's access logger."""
    logging.getLogger("uvicorn.access").addFilter(RedactTokens())
