"""``spillway token create | list | revoke | rotate``: API tokens, in the service's database.

These run on the service's host against SPILLWAY_DATABASE_URL, as Airflow's ``users``
commands do: the first admin token has to come from somewhere. With a token in hand, the
same is at ``/tokens`` over REST (admin scope). SQLAlchemy loads inside the commands only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from spillway.service.cli_common import console, err, fail

if TYPE_CHECKING:
    from datetime import timedelta

    from spillway.service.token_models import IssuedToken
    from spillway.service.tokens import TokenStore

token_app = typer.Typer(
    help="API tokens in the service's database (SPILLWAY_DATABASE_URL); run on the service's host. "
    "Over REST: /tokens with an admin token.",
    no_args_is_help=True,
)

ExpiresOption = Annotated[
    Optional[str],  # noqa: UP007 - typer needs Optional
    typer.Option("--expires-in", help="Lifetime from now: 30d, 12h, 1w2d, 90m. Default: it does not expire.", show_default=False),
]
TokenArgument = Annotated[str, typer.Argument(help="The token's id, or its name#id as `token list` and job owners show it.")]
_TOKEN_REF = re.compile(r"(?:.*#)?(\d+)")


@contextmanager
def _tokens() -> Iterator[TokenStore]:
    """The token store of the configured database, with its errors said in one line."""
    from spillway.jobs.errors import SpillwayError
    from spillway.service.config import Settings
    from spillway.service.store import JobStore

    settings = Settings()
    try:
        store = JobStore(settings.database_url, migrate=settings.migrate_on_start)
    except SpillwayError as exc:
        raise fail(exc.message) from exc
    try:
        yield store.tokens
    except SpillwayError as exc:
        raise fail(exc.message) from exc
    finally:
        store.close()


def _lifetime(text: str | None) -> timedelta | None:
    from spillway.service.token_models import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise fail(f"--expires-in: {exc}", 2) from exc


def _token_id(reference: str) -> int:
    match = _TOKEN_REF.fullmatch(reference.strip())
    if match is None:
        raise fail(f"'{reference}' is not a token id: give the number, or name#id as `spillway token list` shows it", 2)
    return int(match.group(1))


def _when(moment: datetime | None, never: str = "") -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else never


def _print_issued(issued: IssuedToken, what: str) -> None:
    info = issued.info
    expiry = f", expires {_when(info.expires_at)} UTC" if info.expires_at else ", does not expire"
    err.print(f"{what} token {escape(info.owner)} (scope {info.scope.value}){expiry}; it is shown only now:")
    print(issued.token)  # alone on stdout, for $(spillway token create)


@token_app.command("create")
def create(
    scope: Annotated[str, typer.Option(help="read, submit (includes read) or admin (everything).")] = "submit",
    name: Annotated[str, typer.Option(help="Who or what the token is for.")] = "cli",
    expires_in: ExpiresOption = None,
) -> None:
    """Create a token; it is printed once (stdout) and stored hashed."""
    from spillway.service.token_models import NAME_PATTERN, Scope

    try:
        chosen = Scope(scope)
    except ValueError as exc:
        raise fail(f"--scope must be read, submit or admin, not '{scope}'", 2) from exc
    if re.fullmatch(NAME_PATTERN, name) is None:
        raise fail("--name takes 1 to 100 characters, without control characters", 2)
    lifetime = _lifetime(expires_in)
    with _tokens() as tokens:
        _print_issued(tokens.create(name, chosen, expires_in=lifetime), "created")


@token_app.command("list")
def list_tokens(as_json: Annotated[bool, typer.Option("--json", help="Print the tokens as JSON.")] = False) -> None:
    """List the tokens (never their secrets): scope, state, expiry and last use."""
    from rich.table import Table

    with _tokens() as tokens:
        infos = tokens.list()
    if as_json:
        print(json.dumps([info.model_dump(mode="json") for info in infos], indent=2))
        return
    table = Table(title=f"{len(infos)} token{'' if len(infos) == 1 else 's'}", title_justify="left")
    for column in ("id", "owner", "scope", "state", "created", "expires", "last used"):
        table.add_column(column)
    for info in infos:
        table.add_row(
            str(info.id), escape(info.owner), info.scope.value, info.state, _when(info.created_at), _when(info.expires_at, "never"), _when(info.last_used_at, "never")
        )
    console.print(table)


@token_app.command("revoke")
def revoke(token: TokenArgument) -> None:
    """Revoke a token: from its next request on, it gets 401. Its jobs and pipelines stay."""
    with _tokens() as tokens:
        info = tokens.revoke(_token_id(token))
    console.print(f"revoked {escape(info.owner)} ({info.scope.value})")


@token_app.command("rotate")
def rotate(token: TokenArgument, expires_in: ExpiresOption = None) -> None:
    """Give a token a new secret (printed once); the old one gets 401 from now on.

    It keeps its id, so it still owns its jobs and pipelines. Its expiry stays unless --expires-in sets a new one.
    """
    lifetime = _lifetime(expires_in)
    with _tokens() as tokens:
        _print_issued(tokens.rotate(_token_id(token), expires_in=lifetime), "rotated")
