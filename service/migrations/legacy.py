"""Databases made before migrations: recognise their revision by what they hold, and stamp it.

Before Alembic, the stores ran ``create_all`` and added new nullable columns by hand
(``ALTER TABLE ADD COLUMN``). Each revision up to 0008 left a mark that such a database
shows: a table or a column. The newest mark found is the revision to stamp.

Tables were created lazily then (the tokens table by the first `spillway token create`,
the pipeline tables by the first pipeline store), so a database may lack an older mark
while holding a newer one. :func:`adopt` runs the revisions of the missing marks before
stamping, so everything below the stamp is really there.
"""

from __future__ import annotations

from collections.abc import Callable

from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Inspector

Mark = Callable[[Inspector, set[str]], bool]


def _table(name: str) -> Mark:
    return lambda _, tables: name in tables


def _column(table: str, column: str) -> Mark:
    return lambda inspector, tables: table in tables and column in {c["name"] for c in inspector.get_columns(table)}


#: What each revision made before migrations leaves in a database, oldest first.
MARKS: list[tuple[str, Mark]] = [
    ("0001", _table("spillway_jobs")),
    ("0002", _column("spillway_jobs", "resources")),
    ("0003", _column("spillway_jobs", "idempotency_key")),
    ("0004", _table("spillway_tokens")),
    ("0005", _table("spillway_pipelines")),
    ("0006", _column("spillway_jobs", "logs")),
    ("0007", _column("spillway_jobs", "owner")),
    ("0008", _column("spillway_pipelines", "owner")),
]
_IDEMPOTENCY_INDEX = "uq_spillway_jobs_idempotency_key"
#: Every table a pre-migration Spillway made.
TABLES = {"spillway_jobs", "spillway_tokens", "spillway_pipelines", "spillway_pipeline_runs", "spillway_pipeline_attempts"}


def _present(connection: Connection) -> list[str]:
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    if not tables & TABLES:
        return []
    return [revision for revision, mark in MARKS if mark(inspector, tables)]


def legacy_revision(connection: Connection) -> str | None:
    """The revision a database without ``alembic_version`` matches; None for one without Spillway tables."""
    present = _present(connection)
    return present[-1] if present else None


def adopt(connection: Connection, revision: str, config: Config) -> list[str]:
    """Make a pre-migration database whole up to ``revision`` and stamp it there.

    Returns the revisions whose missing tables or columns were created first.
    """
    present = set(_present(connection))
    missing = [r for r, _ in MARKS[: [r for r, _ in MARKS].index(revision)] if r not in present]
    script = ScriptDirectory.from_config(config)
    context = MigrationContext.configure(connection)
    for name in missing:
        revision_script = script.get_revision(name)
        assert revision_script is not None, name
        with Operations.context(context):  # binds alembic's `op` for the revision's upgrade()
            revision_script.module.upgrade()
    if revision >= "0003":  # ids are zero-padded numbers, so they compare as strings
        with Operations.context(context):
            _idempotency_key_as_an_index(connection)
    command.stamp(config, revision)
    return missing


def _idempotency_key_as_an_index(connection: Connection) -> None:
    """Make the idempotency key's uniqueness the named unique index that revision 0003 creates.

    ``create_all`` made it a UNIQUE constraint instead (unnamed on SQLite); the guarantee is the
    same, but a later revision could not find it by the name the revisions use.
    """
    from alembic import op

    inspector = inspect(connection)
    if any(index["name"] == _IDEMPOTENCY_INDEX for index in inspector.get_indexes("spillway_jobs")):
        return
    constraints = [u for u in inspector.get_unique_constraints("spillway_jobs") if u["column_names"] == ["idempotency_key"]]
    if connection.dialect.name == "sqlite":
        # SQLite cannot drop a constraint: the table is rebuilt (rows copied) without it. The
        # convention names the reflected unnamed constraints, so the batch can refer to them.
        with op.batch_alter_table("spillway_jobs", recreate="always", naming_convention={"uq": "uq_%(table_name)s_%(column_0_name)s"}) as batch:
            if constraints:
                batch.drop_constraint(_IDEMPOTENCY_INDEX, type_="unique")
    else:
        for constraint in constraints:
            op.drop_constraint(constraint["name"], "spillway_jobs", type_="unique")
    op.create_index(_IDEMPOTENCY_INDEX, "spillway_jobs", ["idempotency_key"], unique=True)
