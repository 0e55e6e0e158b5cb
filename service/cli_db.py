"""``spillway db upgrade | current | revision``: the database's schema, migrated with Alembic.

Alembic and SQLAlchemy load inside the commands only (see service/cli_common.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from spillway.service.cli_common import console, fail

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

db_app = typer.Typer(
    help="The database's schema (SPILLWAY_DATABASE_URL), migrated with Alembic. Run `spillway db upgrade` "
    "before starting a new release on PostgreSQL; SQLite stores upgrade at start-up.",
    no_args_is_help=True,
)


@contextmanager
def _engine() -> Iterator[Engine]:
    from spillway.service.config import Settings
    from spillway.service.store import make_engine

    engine = make_engine(Settings().database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def _where(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@db_app.command("upgrade")
def upgrade(revision: Annotated[str, typer.Option(help="The revision to upgrade to.")] = "head") -> None:
    """Upgrade the schema (a database made before migrations is recognised and stamped first); rows are kept."""
    from alembic.util import CommandError

    from spillway.service.config import Settings
    from spillway.service.migrations import current
    from spillway.service.migrations import upgrade as run_upgrade

    with _engine() as engine:
        before = current(engine)
        try:
            after = run_upgrade(engine, revision)
        except CommandError as exc:
            raise fail(f"cannot upgrade to '{revision}': {exc}", 2) from exc
    console.print(f"{escape(_where(Settings().database_url))}: was {escape(before.describe())}")
    console.print(f"now {escape(after.describe())}")


@db_app.command("current")
def show_current(
    check: Annotated[bool, typer.Option("--check", help="Exit 1 unless the database is at the newest revision.")] = False,
) -> None:
    """Say which revision the database is at, and the newest one."""
    from spillway.service.config import Settings
    from spillway.service.migrations import current

    with _engine() as engine:
        state = current(engine)
    console.print(f"{escape(_where(Settings().database_url))}: {escape(state.describe())}")
    if check and not state.current:
        raise typer.Exit(1)


@db_app.command("revision")
def revision(
    message: Annotated[str, typer.Option("-m", "--message", help="What the revision changes.")],
    versions: Annotated[
        Optional[Path],  # noqa: UP007 - typer needs Optional
        typer.Option("--versions", help="The folder of revisions to extend (default: service/migrations/versions).", show_default=False),
    ] = None,
) -> None:
    """For developers: write a revision from what the models (SQLAlchemy tables) have that the newest revision lacks.

    The diff is taken against a scratch SQLite database at the newest revision, so no database is needed;
    read and edit the file it writes before committing it.
    """
    import tempfile

    from alembic import command
    from alembic.script import ScriptDirectory

    from spillway.service.migrations import alembic_config
    from spillway.service.store import make_engine

    head = ScriptDirectory.from_config(alembic_config(versions=versions)).get_current_head() or "0"
    with tempfile.TemporaryDirectory() as scratch:
        engine = make_engine(f"sqlite:///{Path(scratch) / 'head.db'}")
        try:
            with engine.begin() as conn:
                command.upgrade(alembic_config(conn, versions=versions), "head")
                written = command.revision(alembic_config(conn, versions=versions), message=message, autogenerate=True, rev_id=f"{int(head) + 1:04d}")
        finally:
            engine.dispose()
    scripts = written if isinstance(written, list) else [written]
    for script in scripts:
        if script is not None:
            console.print(f"wrote {escape(script.path)}")
