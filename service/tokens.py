"""API tokens in the store: create, check, list, revoke and rotate them. No FastAPI here.

Tokens are 32 random bytes, so a plain SHA-256 is enough to store them (there is
nothing to brute-force, unlike a password); the token itself is shown once, at creation
or rotation. A token is checked against the database on every request, so a revoked,
rotated or expired one is refused at once, on every replica.

Its last use is written at most once a minute per token (:data:`LAST_USED_EVERY`), not
once per request: the time is for an operator deciding what to revoke, not an audit log.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from sqlalchemy import Boolean, Column, DateTime, Integer, String, Table, select, update
from sqlalchemy.engine import Engine

from spillway.jobs.errors import InvalidTransition, SpillwayError
from spillway.service.store import Clock, metadata, utc_now
from spillway.service.token_models import MAX_LIFETIME as MAX_LIFETIME
from spillway.service.token_models import IssuedToken, Scope, TokenIdentity, TokenInfo
from spillway.service.token_models import parse_duration as parse_duration

TOKEN_PREFIX = "spw_"
#: The longest a last-used time may lag behind a token's real last use.
LAST_USED_EVERY = timedelta(minutes=1)


class Unauthenticated(SpillwayError):
    """No token, or one the service does not accept (unknown, rotated, revoked or expired)."""

    code = "unauthenticated"


class TokenNotFound(SpillwayError):
    """No token with this id."""

    code = "token_not_found"


tokens_table = Table(
    "spillway_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False),
    Column("scope", String(16), nullable=False),
    Column("token_sha256", String(64), unique=True, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("last_used_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
    Column("rotated_at", DateTime(timezone=True)),
)

def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _aware(value: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes; everything stored is UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


def _new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class TokenStore:
    """Tokens in the service's database.

    Parameters
    ----------
    engine
        The job store's engine: the tokens table is one of its tables (see service/migrations).
    clock
        Returns the current aware time: creation, expiry and last-use times come from it.
    """

    def __init__(self, engine: Engine, *, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.clock = clock
        # Per process: when each token's last use was last written (or found recent), so that
        # a busy token costs one UPDATE a minute, not one per request.
        self._last_written: dict[int, datetime] = {}
        self._lock = threading.Lock()

    def create(self, name: str, scope: Scope, *, expires_in: timedelta | None = None) -> IssuedToken:
        """A new token; only its hash is stored. ``expires_in`` None: it does not expire."""
        now = self.clock()
        token = _new_secret()
        values: dict[str, Any] = {
            "name": name,
            "scope": scope.value,
            "token_sha256": _digest(token),
            "created_at": now,
            "revoked": False,
            "expires_at": None if expires_in is None else now + expires_in,
        }
        with self.engine.begin() as conn:
            token_id = conn.execute(tokens_table.insert().values(**values).returning(tokens_table.c.id)).scalar_one()
        return IssuedToken(token=token, info=self.get(token_id))

    def check(self, token: str) -> TokenIdentity:
        """The identity of a token the service accepts now.

        Raises
        ------
        Unauthenticated
            For an unknown (or rotated-away) token, a revoked one and an expired one.
        """
        columns = tokens_table.c
        with self.engine.connect() as conn:
            row = conn.execute(
                select(columns.id, columns.name, columns.scope, columns.revoked, columns.expires_at, columns.last_used_at).where(
                    columns.token_sha256 == _digest(token)
                )
            ).first()
        if row is None:
            raise Unauthenticated("the bearer token is not valid (unknown, or replaced by a rotation)")
        if row.revoked:
            raise Unauthenticated("the bearer token was revoked")
        now = self.clock()
        expires_at = _aware(row.expires_at)
        if expires_at is not None and expires_at <= now:
            raise Unauthenticated(f"the bearer token expired at {expires_at.isoformat(timespec='seconds')}")
        self._note_use(row.id, _aware(row.last_used_at), now)
        return TokenIdentity(id=row.id, owner=f"{row.name}#{row.id}", scope=Scope(row.scope))

    def _note_use(self, token_id: int, stored: datetime | None, now: datetime) -> None:
        with self._lock:
            known = max((t for t in (stored, self._last_written.get(token_id)) if t is not None), default=None)
            if known is not None and now - known < LAST_USED_EVERY:
                self._last_written[token_id] = known
                return
            self._last_written[token_id] = now
        with self.engine.begin() as conn:
            conn.execute(update(tokens_table).where(tokens_table.c.id == token_id).values(last_used_at=now))

    def list(self) -> list[TokenInfo]:
        """Every token, revoked and expired ones included, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(tokens_table).order_by(tokens_table.c.id)).mappings().all()
        now = self.clock()
        return [_info(row, now) for row in rows]

    def get(self, token_id: int) -> TokenInfo:
        """One token. Raises :class:`TokenNotFound`."""
        with self.engine.connect() as conn:
            row = conn.execute(select(tokens_table).where(tokens_table.c.id == token_id)).mappings().first()
        if row is None:
            raise TokenNotFound(f"no token with id {token_id}", field="id")
        return _info(row, self.clock())

    def revoke(self, token_id: int) -> TokenInfo:
        """Revoke a token: its next request is a 401. Revoking it again changes nothing.

        Raises :class:`TokenNotFound`.
        """
        with self.engine.begin() as conn:
            conn.execute(
                update(tokens_table)
                .where(tokens_table.c.id == token_id, tokens_table.c.revoked.is_(False))
                .values(revoked=True, revoked_at=self.clock())
            )
        return self.get(token_id)

    def rotate(self, token_id: int, *, expires_in: timedelta | None = None) -> IssuedToken:
        """Give a token a new secret; the old one is refused from now on.

        The token keeps its id, so its name#id, and with it the jobs and pipelines it owns.
        Its expiry stays unless ``expires_in`` sets a new one from now.

        Raises
        ------
        TokenNotFound
            When there is no such token.
        InvalidTransition
            For a revoked token (create a new one), and for an expired one without ``expires_in``.
        """
        current = self.get(token_id)
        if current.state == "revoked":
            raise InvalidTransition(f"token {current.owner} is revoked; create a new one instead", field="id")
        now = self.clock()
        if current.state == "expired" and expires_in is None:
            raise InvalidTransition(f"token {current.owner} has expired: give it a new expiry (expires_in) to rotate it", field="expires_in")
        token = _new_secret()
        values: dict[str, Any] = {"token_sha256": _digest(token), "rotated_at": now}
        if expires_in is not None:
            values["expires_at"] = now + expires_in
        with self.engine.begin() as conn:
            moved = conn.execute(
                update(tokens_table).where(tokens_table.c.id == token_id, tokens_table.c.revoked.is_(False)).values(**values)
            ).rowcount
        if moved != 1:  # revoked meanwhile
            raise InvalidTransition(f"token {current.owner} is revoked; create a new one instead", field="id")
        return IssuedToken(token=token, info=self.get(token_id))


def _info(row: Any, now: datetime) -> TokenInfo:
    expires_at = _aware(row["expires_at"])
    state: Literal["active", "expired", "revoked"] = "active"
    if row["revoked"]:
        state = "revoked"
    elif expires_at is not None and expires_at <= now:
        state = "expired"
    return TokenInfo(
        id=row["id"],
        name=row["name"],
        owner=f"{row['name']}#{row['id']}",
        scope=Scope(row["scope"]),
        state=state,
        created_at=_aware(row["created_at"]),
        expires_at=expires_at,
        last_used_at=_aware(row["last_used_at"]),
        revoked_at=_aware(row["revoked_at"]),
        rotated_at=_aware(row["rotated_at"]),
    )
