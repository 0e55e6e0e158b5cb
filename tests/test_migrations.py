"""Alembic migrations: databases made by every earlier schema upgrade with their rows intact,
the head revision matches the models, and `spillway db` says where a database stands.

Each test runs on SQLite and, with SPILLWAY_TEST_POSTGRES_URL set, on a fresh PostgreSQL schema.
The old schemas below are frozen copies of what the released code created (``git log -p
service/store.py service/pipelines/tables.py service/auth.py``), not today's models.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, Boolean, Column, DateTime, Index, Integer, MetaData, String, Table, UniqueConstraint, inspect, select, text
from sqlalchemy.engine import Engine

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobProgress, JobStatus
from spillway.service.client import SpillwayClient
from spillway.service.config import Settings
from spillway.service.migrations import SchemaNotCurrent, alembic_config, current, ensure_schema, head_revision, target_metadata, upgrade
from spillway.service.pipelines.store import PipelineStore
from spillway.service.store import JobStore, make_engine
from spillway.service.tokens import Scope, _digest
from tests.conftest import ROOT, start_service

T0 = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
SPEC = {"source": {"format": "parquet", "path": "/tmp/in"}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": "/tmp/out"}, "name": "old-job"}


def _jobs(metadata: MetaData, *extra: Column[Any], idempotency_unique: str = "") -> Table:
    """spillway_jobs as the first release made it (42fd4e9), plus columns added later."""
    columns = [Column(c.name, c.type) for c in extra]
    args: list[Any] = []
    if idempotency_unique == "constraint":  # create_all of a release that had the column (b77cfa6 on)
        columns = [Column("idempotency_key", String(200), unique=True) if c.name == "idempotency_key" else c for c in columns]
    elif idempotency_unique == "index":  # the hand-written upgrade (add_new_columns) on SQLite and PostgreSQL
        args.append(Index("uq_spillway_jobs_idempotency_key", "idempotency_key", unique=True))
    return Table(
        "spillway_jobs",
        metadata,
        Column("seq", Integer, primary_key=True, autoincrement=True),
        Column("id", String(32), unique=True, nullable=False),
        Column("name", String(100), nullable=False),
        Column("state", String(16), nullable=False, index=True),
        Column("backend", String(16), nullable=False),
        Column("spec", JSON, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("started_at", DateTime(timezone=True)),
        Column("finished_at", DateTime(timezone=True)),
        Column("updated_at", DateTime(timezone=True), nullable=False),
        Column("progress", JSON, nullable=False),
        Column("error", JSON),
        Column("result", JSON),
        *columns,
        *args,
    )


def _tokens(metadata: MetaData) -> Table:
    """spillway_tokens as 9a2b366 made it."""
    return Table(
        "spillway_tokens",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("name", String(100), nullable=False),
        Column("scope", String(16), nullable=False),
        Column("token_sha256", String(64), unique=True, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("revoked", Boolean, nullable=False, default=False),
    )


def _pipelines(metadata: MetaData, *, owner: bool) -> None:
    """The pipeline tables as 06c83d3 made them (the owner column came with 86f0e6f)."""
    Table(
        "spillway_pipelines",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("name", String(100), nullable=False, unique=True),
        Column("version", Integer, nullable=False),
        Column("definition", JSON, nullable=False),
        Column("paused", Boolean, nullable=False),
        Column("scheduled_through", DateTime(timezone=True), nullable=False),
        Column("claim_seq", Integer, nullable=False, default=0),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False),
        *([Column("owner", String(100))] if owner else []),
        sqlite_autoincrement=True,
    )
    Table(
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
        Column("spec", JSON),
        Column("reason", String(2000)),
        Column("next_attempt_at", DateTime(timezone=True)),
        Column("result_location", String(4096)),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("started_at", DateTime(timezone=True)),
        Column("finished_at", DateTime(timezone=True)),
        UniqueConstraint("pipeline_id", "logical_date", name="uq_spillway_pipeline_run_key"),
        sqlite_autoincrement=True,
    )
    Table(
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


RESOURCES = Column("resources", JSON)
IDEMPOTENCY = Column("idempotency_key", String(200))
LOGS = Column("logs", JSON)
OWNER = Column("owner", String(100))


def _schema_0001(m: MetaData) -> None:
    _jobs(m)


def _schema_0003_by_hand(m: MetaData) -> None:
    # A first-release store that the hand-written ALTER TABLE path brought to b77cfa6.
    _jobs(m, RESOURCES, IDEMPOTENCY, idempotency_unique="index")


def _schema_0006_without_tokens(m: MetaData) -> None:
    # The tokens table came lazily (the first `token create`): a store may lack it and hold newer tables.
    _jobs(m, RESOURCES, IDEMPOTENCY, LOGS, idempotency_unique="constraint")
    _pipelines(m, owner=False)


def _schema_0008(m: MetaData) -> None:
    # The last schema before migrations, as create_all made it for a new store.
    _jobs(m, RESOURCES, IDEMPOTENCY, LOGS, OWNER, idempotency_unique="constraint")
    _tokens(m)
    _pipelines(m, owner=True)


OLD_SCHEMAS: dict[str, tuple[Callable[[MetaData], None], str]] = {
    "oldest (0001)": (_schema_0001, "0001"),
    "0003 by hand-written ALTERs": (_schema_0003_by_hand, "0003"),
    "0006 without the tokens table": (_schema_0006_without_tokens, "0006"),
    "0008, the last before migrations": (_schema_0008, "0008"),
}


def _old_database(url: str, build: Callable[[MetaData], None]) -> tuple[Engine, MetaData]:
    metadata = MetaData()
    build(metadata)
    engine = make_engine(url)
    metadata.create_all(engine)
    return engine, metadata


def _insert_old_rows(engine: Engine, metadata: MetaData) -> None:
    """Two jobs (one finished, with a result) and, where the tables exist, a token and a pipeline run."""
    jobs = metadata.tables["spillway_jobs"]
    job = {
        "name": "old-job",
        "backend": "pandas",
        "spec": SPEC,
        "created_at": T0,
        "updated_at": T0,
        "progress": JobProgress().model_dump(mode="json"),
    }
    with engine.begin() as conn:
        conn.execute(jobs.insert().values(**job, id="a" * 16, state="PENDING"))
        conn.execute(jobs.insert().values(**job, id="b" * 16, state="FAILED", finished_at=T0, error={"code": "boom", "message": "it broke"}))
        if "spillway_tokens" in metadata.tables:
            conn.execute(metadata.tables["spillway_tokens"].insert().values(name="ops", scope="admin", token_sha256=_digest("spw_old-secret"), created_at=T0, revoked=False))
        if "spillway_pipeline_runs" in metadata.tables:
            conn.execute(
                metadata.tables["spillway_pipeline_runs"].insert().values(
                    uid="r1", pipeline_id=7, logical_date=T0, data_interval_end=T0 + timedelta(hours=1), state="SUCCEEDED", trigger="schedule", version=1, params={}, created_at=T0
                )
            )


def _diffs(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), target_metadata())


def _columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_a_new_database_is_created_at_head_and_matches_the_models(database_url: str) -> None:
    store = JobStore(database_url)
    try:
        assert current(store.engine).revision == head_revision()
        assert _diffs(store.engine) == [], "the models and the head revision differ: write a revision (spillway db revision -m ...)"
    finally:
        store.close()


def test_the_model_comparison_sees_a_column_no_revision_adds(database_url: str) -> None:
    """The check above can fail: a column only the models have is a difference."""
    store = JobStore(database_url)
    metadata = MetaData()
    for table in target_metadata()[0].tables.values():
        table.to_metadata(metadata)
    metadata.tables["spillway_jobs"].append_column(Column("lease_owner", String(100)))
    try:
        with store.engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), [metadata, target_metadata()[1]])
        assert [d[0] for d in diffs] == ["add_column"] and diffs[0][3].name == "lease_owner"
    finally:
        store.close()


@pytest.mark.parametrize("schema", list(OLD_SCHEMAS))
def test_an_old_database_upgrades_with_its_rows_intact(database_url: str, schema: str) -> None:
    build, matches = OLD_SCHEMAS[schema]
    engine, metadata = _old_database(database_url, build)
    _insert_old_rows(engine, metadata)
    assert current(engine).legacy == matches, "recognised as the revision its tables match"
    assert "alembic_version" not in inspect(engine).get_table_names()

    store = JobStore(database_url)  # the service's start-up path, with migrating on
    try:
        assert current(store.engine).revision == head_revision()
        old = store.get("a" * 16)
        assert (old.name, old.state, old.spec, old.created_at) == ("old-job", JobStatus.PENDING, JobSpec.model_validate(SPEC), T0)
        assert old.owner is None and old.resources is None
        failed = store.get("b" * 16)
        assert failed.state is JobStatus.FAILED and failed.error is not None and failed.error.message == "it broke"
        assert store.logs("b" * 16) == []
        assert {"resources", "idempotency_key", "logs", "owner"} <= _columns(store.engine, "spillway_jobs")
        assert {"expires_at", "last_used_at", "revoked_at", "rotated_at"} <= _columns(store.engine, "spillway_tokens")
        assert {"owner"} <= _columns(store.engine, "spillway_pipelines")

        # The upgraded store works: idempotency keys stay unique, tokens old and new are accepted.
        spec = JobSpec.model_validate(SPEC)
        first, created = store.create(spec, "pandas", idempotency_key="k", owner="ops#1")
        again, created_again = store.create(spec, "pandas", idempotency_key="k", owner="ops#1")
        assert created and not created_again and again.id == first.id
        if "spillway_tokens" in metadata.tables:
            identity = store.tokens.check("spw_old-secret")
            assert (identity.owner, identity.scope) == ("ops#1", Scope.ADMIN)
            assert store.tokens.get(identity.id).expires_at is None
        new_token = store.tokens.create("new", Scope.READ, expires_in=timedelta(days=1)).token
        assert store.tokens.check(new_token).scope is Scope.READ
        if "spillway_pipeline_runs" in metadata.tables:
            with store.engine.connect() as conn:
                assert conn.execute(text("SELECT uid, state FROM spillway_pipeline_runs")).all() == [("r1", "SUCCEEDED")]
        pipelines = PipelineStore(store.engine)
        assert pipelines.list() == []
        assert _diffs(store.engine) == [], "an adopted database is the same as one the revisions made"
    finally:
        store.close()
        engine.dispose()


def test_without_migrating_an_old_database_is_refused_and_left_alone(database_url: str) -> None:
    engine, metadata = _old_database(database_url, _schema_0001)
    _insert_old_rows(engine, metadata)
    with pytest.raises(SchemaNotCurrent, match=r"made before migrations, matching revision 0001.*spillway db upgrade"):
        JobStore(database_url, migrate=False)
    assert "alembic_version" not in inspect(engine).get_table_names()
    assert "owner" not in _columns(engine, "spillway_jobs")
    with pytest.raises(SchemaNotCurrent, match="spillway db upgrade"):
        PipelineStore(database_url, migrate=False)
    upgrade(engine)
    JobStore(database_url, migrate=False).close()  # at head: accepted
    engine.dispose()


def test_replicas_upgrading_at_once_migrate_one_after_the_other(database_url: str) -> None:
    engines = [make_engine(database_url) for _ in range(3)]
    errors: list[BaseException] = []

    def migrate(engine: Engine) -> None:
        try:
            ensure_schema(engine, migrate=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(engine,)) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert errors == []
        with engines[0].connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head_revision()]
    finally:
        for engine in engines:
            engine.dispose()


def test_downgrade_to_the_oldest_and_back_keeps_the_rows(database_url: str) -> None:
    engine, metadata = _old_database(database_url, _schema_0001)
    _insert_old_rows(engine, metadata)
    upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0001")
    assert _columns(engine, "spillway_jobs") == {c.name for c in metadata.tables["spillway_jobs"].columns}
    assert set(inspect(engine).get_table_names()) == {"spillway_jobs", "alembic_version"}
    upgrade(engine)
    try:
        assert _diffs(engine) == []
        with engine.connect() as conn:
            assert conn.execute(select(text("count(*)")).select_from(text("spillway_jobs"))).scalar_one() == 2
    finally:
        engine.dispose()


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPILLWAY_DATABASE_URL": url, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "spillway", "db", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_spillway_db_current_and_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine, metadata = _old_database(url, _schema_0001)
    _insert_old_rows(engine, metadata)
    engine.dispose()

    shown = _cli(url, "current")
    assert shown.returncode == 0, shown.stderr
    assert "made before migrations, matching revision 0001" in shown.stdout
    assert _cli(url, "current", "--check").returncode == 1

    upgraded = _cli(url, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"now at revision {head_revision()} (head)" in upgraded.stdout
    checked = _cli(url, "current", "--check")
    assert checked.returncode == 0 and f"at revision {head_revision()} (head)" in checked.stdout

    unknown = _cli(url, "upgrade", "--revision", "nope")
    assert unknown.returncode == 2 and "cannot upgrade to 'nope'" in unknown.stderr


@pytest.mark.slow
def test_the_migrations_ship_in_the_wheel_and_run_from_it(tmp_path: Path, built_wheel: Path) -> None:
    """From an installed wheel (no source tree), Alembic finds env.py and every revision."""
    wheel = built_wheel
    names = set(zipfile.ZipFile(wheel).namelist())
    revisions = sorted(p.name for p in (ROOT / "service" / "migrations" / "versions").glob("*.py"))
    assert {"spillway/service/migrations/env.py", "spillway/service/migrations/script.py.mako"} <= names
    assert {f"spillway/service/migrations/versions/{name}" for name in revisions} <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import spillway.service.migrations as m, sys; from spillway.service.store import JobStore;"
        "assert m.__file__.startswith(sys.argv[1]), m.__file__;"
        f"s = JobStore('sqlite:///{tmp_path / 'w.db'}'); print(m.current(s.engine).describe())"
    )
    # Run outside the source tree, with only the unpacked wheel (and the venv's libraries) importable.
    ran = subprocess.run([sys.executable, "-c", probe, str(site)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert f"at revision {head_revision()} (head)" in ran.stdout


def test_migrating_at_start_up_is_on_for_sqlite_and_off_for_postgresql_by_default() -> None:
    assert Settings(database_url="sqlite:///var/x.db").migrate_on_start
    assert not Settings(database_url="postgresql+psycopg://u@h/db").migrate_on_start
    assert Settings(database_url="postgresql+psycopg://u@h/db", database_migrate="on").migrate_on_start
    assert not Settings(database_url="sqlite:///var/x.db", database_migrate="off").migrate_on_start


@pytest.mark.slow
def test_a_service_with_migrating_off_refuses_an_old_database_and_starts_after_an_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine, metadata = _old_database(url, _schema_0001)
    _insert_old_rows(engine, metadata)
    engine.dispose()
    env = {"SPILLWAY_DATABASE_URL": url, "SPILLWAY_DATABASE_MIGRATE": "off"}
    with pytest.raises(RuntimeError, match=r"(?s)exited.*made before migrations, matching revision 0001.*spillway db upgrade"):
        start_service(tmp_path / "refused", extra_env=env)
    assert _cli(url, "upgrade").returncode == 0
    service = start_service(tmp_path / "started", extra_env=env)
    try:
        with SpillwayClient(service.url) as client:
            assert {job.id for job in client.list().items} == {"a" * 16, "b" * 16}, "the old jobs, served after the upgrade"
    finally:
        service.stop()


_ADD_A_COLUMN = """
import sys
from sqlalchemy import Column, String
from spillway.service.store import jobs_table
jobs_table.append_column(Column("lease_owner", String(100)))  # a model change without a revision
from spillway.service.cli import app
app(["db", "revision", "-m", "jobs lease owner", "--versions", sys.argv[1]])
"""


def test_spillway_db_revision_writes_the_next_revision_from_the_models(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    shutil.copytree(ROOT / "service" / "migrations" / "versions", versions, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-c", _ADD_A_COLUMN, str(versions)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    following = f"{int(head_revision()) + 1:04d}"
    (written,) = versions.glob(f"{following}_*.py")
    source = written.read_text()
    assert f"down_revision: str | None = '{head_revision()}'" in source
    assert "batch_op.add_column(sa.Column('lease_owner', sa.String(length=100)" in source, source
    assert "batch_op.drop_column('lease_owner')" in source
