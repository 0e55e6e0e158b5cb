"""The database's schema, migrated with Alembic: ``spillway db upgrade`` and the service's start-up.

The revisions in ``versions/`` start from the oldest schema Spillway shipped (0001) and add
what came later, one change each. A database made before migrations (by the old
``create_all`` and hand-written ``ALTER TABLE`` path, so without an ``alembic_version``
table) is recognised by what it holds and stamped at the matching revision first
(:mod:`service.migrations.legacy`), so upgrading it keeps its rows.

Upgrades run in one transaction that holds a lock, an advisory lock on PostgreSQL and the
write lock on SQLite, so replicas starting at once migrate one after the other.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, func, select
from sqlalchemy.engine import Connection, Engine

from spillway.jobs.errors import SpillwayError

HERE = Path(__file__).parent
#: The PostgreSQL advisory lock an upgrade holds ("spmg").
_MIGRATION_LOCK = 0x73706D67


class SchemaNotCurrent(SpillwayError):
    """The database is not at the schema this Spillway needs, and migrating was not asked for."""

    code = "schema_not_current"


def target_metadata() -> list[MetaData]:
    """The tables the models declare: jobs and tokens, and the pipeline tables."""
    import spillway.service.replicas  # noqa: F401 - puts the replica and lease tables on the store's metadata
    import spillway.service.tokens  # noqa: F401 - puts the tokens table on the store's metadata
    from spillway.service.pipelines import tables as pipeline_tables
    from spillway.service.store import metadata

    return [metadata, pipeline_tables.metadata]


def alembic_config(connection: Connection | None = None, *, versions: Path | None = None) -> Config:
    """An Alembic config for the migrations shipped in this package (no alembic.ini needed).

    ``versions`` reads (and writes) the revisions in another folder instead of the package's.
    """
    config = Config()
    config.set_main_option("script_location", str(HERE))
    config.set_main_option("path_separator", "os")  # version_locations is one path, spaces and all
    config.set_main_option("version_locations", str(versions or HERE / "versions"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision() -> str:
    """The newest revision: the schema the models describe."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "service/migrations/versions holds no revision"
    return head


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands.

    Parameters
    ----------
    revision
        The revision stamped in its ``alembic_version`` table; None when it has none.
    legacy
        For a database made before migrations: the revision its tables match.
    """

    revision: str | None
    legacy: str | None = None

    @property
    def empty(self) -> bool:
        """No Spillway table yet."""
        return self.revision is None and self.legacy is None

    @property
    def current(self) -> bool:
        """At the schema this Spillway needs."""
        return self.revision == head_revision()

    def describe(self) -> str:
        """One line for ``spillway db current`` and start-up errors."""
        head = head_revision()
        if self.revision == head:
            return f"at revision {head} (head)"
        if self.revision is not None:
            return f"at revision {self.revision}; the newest is {head}"
        if self.legacy is not None:
            return f"made before migrations, matching revision {self.legacy} (not stamped yet); the newest is {head}"
        return f"empty: no Spillway tables yet; the newest revision is {head}"


def schema_state(connection: Connection) -> SchemaState:
    """Where the database on ``connection`` stands."""
    from spillway.service.migrations.legacy import legacy_revision

    revision = MigrationContext.configure(connection).get_current_revision()
    if revision is not None:
        return SchemaState(revision)
    return SchemaState(None, legacy_revision(connection))


def ensure_schema(engine: Engine, *, migrate: bool) -> None:
    """Bring the database to the newest schema, or refuse one that is not at it.

    Raises
    ------
    SchemaNotCurrent
        Without ``migrate``, when the database is not at the head revision.
    """
    with engine.connect() as conn:
        state = schema_state(conn)
    if state.current:
        return
    if not migrate:
        raise SchemaNotCurrent(
            f"the database is {state.describe()}: run `spillway db upgrade` (SPILLWAY_DATABASE_URL names it), "
            "or start the service with SPILLWAY_DATABASE_MIGRATE=on"
        )
    upgrade(engine)


def upgrade(engine: Engine, revision: str = "head") -> SchemaState:
    """Upgrade to ``revision`` under the migration lock; a pre-migration store is stamped first.

    Returns where the database stands afterwards.
    """
    from spillway.service.migrations.legacy import adopt

    with _locked(engine) as conn:
        state = schema_state(conn)
        if state.revision is None and state.legacy is not None:
            adopt(conn, state.legacy, alembic_config(conn))
        command.upgrade(alembic_config(conn), revision)
        return schema_state(conn)


def current(engine: Engine) -> SchemaState:
    """Where the database behind ``engine`` stands (it is not changed)."""
    with engine.connect() as conn:
        return schema_state(conn)


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that only one migrator at a time holds; committed at the end."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        elif conn.dialect.name == "sqlite":
            # The write lock now, not at the first write: a second process waits here (busy_timeout).
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        yield conn
        conn.commit()
