"""API token models shared by the service, the SDK and the CLI: no SQLAlchemy here.

The store of tokens is :mod:`service.tokens`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

#: A token's name: 1 to 100 characters, no control characters (it is shown in lists and owners).
NAME_PATTERN = r"^[^\x00-\x1f\x7f]{1,100}$"
#: The longest lifetime ``--expires-in`` takes (ten years): beyond it, leave the expiry off.
MAX_LIFETIME = timedelta(days=3650)


class Scope(str, Enum):
    """What a token may do; each scope includes the ones before it."""

    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"

    def allows(self, needed: Scope) -> bool:
        order = [Scope.READ, Scope.SUBMIT, Scope.ADMIN]
        return order.index(self) >= order.index(needed)


_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``1w2d``, ``90m`` or ``45s`` as a timedelta.

    Raises
    ------
    ValueError
        For anything else, for zero, and for more than :data:`MAX_LIFETIME`.
    """
    spelled = text.strip().lower()
    if not spelled or _DURATION.sub("", spelled):
        raise ValueError(f"'{text}' is not a duration: write a number and a unit, such as 30d, 12h, 1w2d, 90m or 45s")
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION.findall(spelled))
    if seconds <= 0:
        raise ValueError(f"'{text}' is no time at all: an expiry must lie in the future")
    if seconds > MAX_LIFETIME.total_seconds():
        raise ValueError(f"'{text}' is over {MAX_LIFETIME.days} days: leave the expiry off for a token that does not expire")
    return timedelta(seconds=seconds)


class TokenInfo(BaseModel):
    """A token as an operator sees it: never its secret, which is shown only once."""

    id: int
    name: str
    owner: str = Field(description="The token's identity, name#id: the owner of the jobs and pipelines it creates.")
    scope: Scope
    state: Literal["active", "expired", "revoked"]
    created_at: datetime
    expires_at: datetime | None = Field(default=None, description="When it stops working; none: it does not expire.")
    last_used_at: datetime | None = Field(default=None, description="Its last accepted request, to within a minute.")
    revoked_at: datetime | None = None
    rotated_at: datetime | None = Field(default=None, description="When its secret was last replaced.")


class IssuedToken(BaseModel):
    """A new secret (from a create or a rotation) and the token it belongs to."""

    token: str = Field(description="The bearer token. It is shown only now; the service keeps only its hash.")
    info: TokenInfo


class TokenIdentity(BaseModel):
    """Who an accepted token is."""

    id: int | None = Field(description="The Spillway token's id; None for an OIDC token, which has no row here.")
    owner: str
    scope: Scope
