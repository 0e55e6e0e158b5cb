"""The pipeline tables: their own MetaData, created next to the job tables in the same database.

Times are stored in UTC (SQLite keeps no offset, so anything else would compare
wrongly); :func:`utc` is applied to every value bound and :func:`aware` to every
value read.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

metadata = MetaData()

pipelines_table = Table(
    "spillway_pipelines",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False, unique=True),
    Column("version", Integer, nullable=False),
    Column("definition", JSON, nullable=False),
    Column("paused", Boolean, nullable=False),
    # The latest firing instant the scheduler has accounted for: catch-up starts after it.
    Column("scheduled_through", DateTime(timezone=True), nullable=False),
    # Bumped by every claim: the row lock it takes serializes claimers across instances.
    Column("claim_seq", Integer, nullable=False, default=0),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # The token that created it (name#id); its runs' jobs are that token's. None with auth off.
    Column("owner", String(100)),
    sqlite_autoincrement=True,  # never reuse an id: runs of a deleted pipeline stay apart
)

runs_table = Table(
    "spillway_pipeline_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("uid", String(32), nullable=False, unique=True),
    Column("pipeline_id", Integer, nullable=False),
    Column("logical_date", DateTime(timezone=True), nullable=False),
    Column("data_interval_end", DateTime(timezone=True), nullable=False),
    Column("state", String(16), nullable=False, index=True),
    Column("trigger", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("params", JSON, nullable=False),
    Column("spec", JSON),  # the rendered JobSpec; none for a SKIPPED run
    Column("reason", String(2000)),
    Column("next_attempt_at", DateTime(timezone=True)),
    Column("result_location", String(4096)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    # The run key: however many schedulers, restarts or triggers, one run per interval.
    UniqueConstraint("pipeline_id", "logical_date", name="uq_spillway_pipeline_run_key"),
    sqlite_autoincrement=True,
)

attempts_table = Table(
    "spillway_pipeline_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, nullable=False, index=True),
    Column("attempt", Integer, nullable=False),
    Column("job_id", String(32)),
    Column("state", String(16), nullable=False, index=True),
    Column("error", String(2000)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    UniqueConstraint("run_id", "attempt", name="uq_spillway_pipeline_attempt"),
    sqlite_autoincrement=True,
)


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC, the only form stored or compared."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime given to the pipeline store")
    return moment.astimezone(timezone.utc)


def aware(value: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime (SQLite hands back naive ones)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def insert_unless_exists(conn: Connection, table: Table, values: dict[str, Any], key: list[str]) -> bool:
    """INSERT that loses quietly to an existing row with the same ``key``; returns whether it won."""
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = sqlite_insert if dialect == "sqlite" else pg_insert
        # RETURNING, not rowcount: with implicit RETURNING psycopg reports rowcount -1.
        statement = insert(table).values(**values).on_conflict_do_nothing(index_elements=key).returning(table.c.id)
        return conn.execute(statement).first() is not None
    try:
        with conn.begin_nested():
            conn.execute(table.insert().values(**values))
    except IntegrityError:
        return False
    return True
