"""Job persistence with SQLAlchemy: a SQLite file by default, PostgreSQL by URL.

State changes are single conditional UPDATEs (``... WHERE state IN (allowed)``), so
no race, restart or second writer can move a job out of a terminal state.

Reads take an ``owner``: given one, another owner's job is not found, exactly as a
missing one (see :class:`service.auth.Caller`); None reads every job.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    create_engine,
    event,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import Select
from sqlalchemy.exc import IntegrityError

from spillway.jobs.errors import JobNotFound, QueueFull
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ALLOWED_TRANSITIONS, ErrorDetail, JobProgress, JobResources, JobStatus, ResultManifest
from spillway.service.schemas import JobView

if TYPE_CHECKING:
    from spillway.service.status_reads import StatusReads
    from spillway.service.replicas import ReplicaStore
    from spillway.service.tokens import TokenStore

Clock = Callable[[], datetime]
#: The PostgreSQL advisory lock a submission holds while it counts the queue and inserts.
_QUEUE_LOCK = 0x73707771  # "spwq"
#: The PostgreSQL advisory lock a claim holds while it counts an owner's running jobs ("spwc").
_CLAIM_LOCK = 0x73707763

#: The job and token tables; service/migrations holds their history (one Alembic revision per change).
metadata = MetaData()
jobs_table = Table(
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
    Column("resources", JSON),
    Column("idempotency_key", String(200)),
    Column("logs", JSON),
    Column("owner", String(100)),
    # The replica (service process) that claimed the job and runs it; None until claimed (revision 0010).
    Column("replica_id", String(64)),
    # Set by a cancel that reached another replica than the one running the job: the owner acts on it.
    Column("cancel_requested_at", DateTime(timezone=True)),
    # A unique index, not a constraint: SQLite can add this to an existing table (revision 0003).
    Index("uq_spillway_jobs_idempotency_key", "idempotency_key", unique=True),
)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes; everything stored is UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


#: One lock per SQLite database this process writes (by URL), see :func:`write_lock`.
_SQLITE_WRITE_LOCKS: dict[str, threading.RLock] = {}
_SQLITE_WRITE_LOCKS_GUARD = threading.Lock()


def write_lock(engine: Engine) -> contextlib.AbstractContextManager[Any]:
    """What a write transaction on ``engine`` holds in this process: SQLite's one writer, taken in turn.

    SQLite lets one transaction write at a time; the others get SQLITE_BUSY and its busy
    handler sleeps them in steps of up to 100 ms before they retry. Threads of one process
    that queue on a lock instead start the moment the writer before them commits: 300 job
    inserts from 6 threads took p99 107 ms (max 180-330 ms) behind the busy handler, 16-19 ms
    (max 20 ms) queued on this lock (issue 16 item 14). Writers in other processes still meet
    the busy handler (busy_timeout). PostgreSQL locks rows: nothing to hold here.
    """
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    with _SQLITE_WRITE_LOCKS_GUARD:
        return _SQLITE_WRITE_LOCKS.setdefault(str(engine.url), threading.RLock())


class _SpecCache:
    """Parsed specs by (job id, created_at), the newest ``size`` kept.

    A job's spec is written once, with its row, and never changed: parsing it again (every
    validator of :class:`JobSpec`) on each read of the job was a large part of a status read's
    own work. Readers treat the spec as read-only, as they always did.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._specs: OrderedDict[tuple[str, Any], JobSpec] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str, created_at: Any, raw: Any) -> JobSpec:
        key = (job_id, created_at)
        with self._lock:
            spec = self._specs.get(key)
            if spec is not None:
                self._specs.move_to_end(key)
                return spec
        spec = JobSpec.model_validate(raw)  # outside the lock: two threads may parse one spec once each
        with self._lock:
            self._specs[key] = spec
            if len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return spec


_specs = _SpecCache()


def _use_wal(cursor: Any, wait_s: float = 30.0) -> None:
    """Put the SQLite database in WAL mode (it stays so: later connections find it there).

    The switch needs the database to itself, and SQLite answers "database is locked" at once, without
    its busy handler, while another connection holds a write lock: replicas starting together on a new
    file (one of them migrating) met that. So it waits for the lock, as the busy timeout would."""
    deadline = time.monotonic() + wait_s
    while cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and a busy timeout for concurrent readers."""
    if url.startswith("sqlite"):
        database = url.split("///", 1)[-1]
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA busy_timeout=30000")
            _use_wal(cursor)
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


class JobStore:
    """Reads and writes jobs. Every method is a short transaction; call from a thread."""

    def __init__(self, url: str, *, clock: Clock = utc_now, migrate: bool = True) -> None:
        """Open the store at ``url``.

        With ``migrate``, the database is brought to the newest schema first (see
        :func:`service.migrations.ensure_schema`); without, one that is not at it is refused.

        Raises
        ------
        service.migrations.SchemaNotCurrent
            Without ``migrate``, when the database needs `spillway db upgrade`.
        """
        from spillway.service.migrations import ensure_schema  # alembic loads with a store, not with the CLI

        self.engine = make_engine(url)
        self.clock = clock
        self._listeners: list[Callable[[str], None]] = []
        self._write_lock = write_lock(self.engine)
        try:
            ensure_schema(self.engine, migrate=migrate)
        except BaseException:
            self.engine.dispose()
            raise

    @functools.cached_property
    def replicas(self) -> ReplicaStore:
        """The service replicas' heartbeats, leases and the job claims between them, in this store's database."""
        from spillway.service.replicas import ReplicaStore

        return ReplicaStore(self.engine, clock=self.clock)

    @functools.cached_property
    def tokens(self) -> TokenStore:
        """The API tokens, kept in this store's database."""
        from spillway.service.tokens import TokenStore

        return TokenStore(self.engine, clock=self.clock)

    @functools.cached_property
    def status_reads(self) -> StatusReads:
        """:meth:`get` for coroutines: the reads that queue up together made in one query (see :class:`StatusReads`)."""
        from spillway.service.status_reads import StatusReads

        return StatusReads(self)

    def close(self) -> None:
        if (reads := self.__dict__.get("status_reads")) is not None:
            reads.close()
        self.engine.dispose()

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(job_id)`` after every committed write to a job (from the writing thread)."""
        self._listeners.append(listener)

    def _changed(self, job_id: str) -> None:
        for listener in self._listeners:
            listener(job_id)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction, begun once this process's writers before it have committed (see :func:`write_lock`)."""
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    def create(
        self,
        spec: JobSpec,
        backend: str,
        *,
        idempotency_key: str | None = None,
        owner: str | None = None,
        max_pending: int | None = None,
    ) -> tuple[JobView, bool]:
        """Persist a new PENDING job; returns it and whether it is new.

        With an ``idempotency_key`` already used by ``owner``, nothing is inserted and
        the job created under that key is returned: the unique constraint settles races
        between concurrent requests and between service replicas. Keys are per owner:
        another owner's use of the same key is neither found nor in the way.

        With ``max_pending``, counting the PENDING jobs and inserting are one atomic
        step: an ``INSERT ... SELECT ... WHERE count < max_pending``, which SQLite runs
        under its write lock and PostgreSQL after a transaction-scoped advisory lock
        that every limited insert takes (under READ COMMITTED, concurrent counts would
        not see each other's inserts).

        Raises
        ------
        QueueFull
            When ``max_pending`` jobs are already waiting.
        """
        if idempotency_key is not None and owner is not None:
            # Also finds a key this owner used before keys were per owner (stored as it was sent).
            with contextlib.suppress(JobNotFound):
                return self.get_by_idempotency_key(idempotency_key, owner=owner), False
        now = self.clock()
        job_id = uuid.uuid4().hex[:16]
        values = {
            "id": job_id,
            "name": spec.name,
            "state": JobStatus.PENDING.value,
            "backend": backend,
            "spec": spec.model_dump(mode="json"),
            "created_at": now,
            "updated_at": now,
            "progress": JobProgress().model_dump(mode="json"),
            "idempotency_key": None if idempotency_key is None else _scoped_key(idempotency_key, owner),
            "owner": owner,
        }
        try:
            with self._writing() as conn:
                if max_pending is None:
                    row = conn.execute(jobs_table.insert().values(**values).returning(*jobs_table.c)).mappings().first()
                elif (row := _insert_below(conn, values, max_pending)) is None:
                    raise QueueFull(f"{max_pending} jobs are waiting, which is the limit. Retry later.")
        except IntegrityError:
            if idempotency_key is None:
                raise
            return self.get_by_idempotency_key(idempotency_key, owner=owner), False
        self._changed(job_id)
        return _to_view(row), True  # the inserted row as the insert returned it: no second read

    def get_by_idempotency_key(self, key: str, *, owner: str | None = None) -> JobView:
        """The job ``owner`` created under an idempotency key. Raises :class:`JobNotFound`."""
        match = jobs_table.c.idempotency_key == _scoped_key(key, owner)
        if owner is not None:  # a key stored before keys were per owner, by this owner
            match = or_(match, (jobs_table.c.idempotency_key == key) & (jobs_table.c.owner == owner))
        with self.engine.connect() as conn:
            row = conn.execute(select(*_VIEW_COLUMNS).where(match)).mappings().first()
        if row is None:
            raise JobNotFound(f"no job with idempotency key '{key}'", field="Idempotency-Key")
        return _to_view(row)

    def get(self, job_id: str, *, owner: str | None = None) -> JobView:
        """One job (of ``owner``, when given). Raises :class:`JobNotFound`."""
        params = {"job_id": job_id} if owner is None else {"job_id": job_id, "owner": owner}
        with self.engine.connect() as conn:
            row = conn.execute(_get_statement(owner is not None), params).mappings().first()
        if row is None:
            raise _not_found(job_id)
        return _to_view(row)

    def get_many(self, reads: Sequence[tuple[str, str | None]]) -> list[JobView | JobNotFound]:
        """Many :meth:`get` in one query: for each ``(job_id, owner)``, the job, or the
        :class:`JobNotFound` that :meth:`get` raises for it (another owner's job is not found)."""
        with self.engine.connect() as conn:
            found = conn.execute(_get_many_statement(), {"ids": sorted({job_id for job_id, _ in reads})}).mappings()
            rows = {row["id"]: row for row in found}
        views: list[JobView | JobNotFound] = []
        for job_id, owner in reads:
            row = rows.get(job_id)
            views.append(_to_view(row) if row is not None and (owner is None or row["owner"] == owner) else _not_found(job_id))
        return views

    def list(
        self, *, state: JobStatus | None = None, limit: int = 50, offset: int = 0, owner: str | None = None
    ) -> tuple[list[JobView], int]:
        """A page of jobs (of ``owner``, when given), newest first, and the total count matching the filter."""
        query = _owned(select(*_VIEW_COLUMNS), owner)
        count = _owned(select(func.count()).select_from(jobs_table), owner)
        if state is not None:
            query = query.where(jobs_table.c.state == state.value)
            count = count.where(jobs_table.c.state == state.value)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(jobs_table.c.seq.desc()).limit(limit).offset(offset)).mappings().all()
            total = conn.execute(count).scalar_one()
        return [_to_view(r) for r in rows], int(total)

    def transition(self, job_id: str, to: JobStatus, **fields: Any) -> bool:
        """Move a job to ``to`` if its lifecycle allows it from the current state.

        Returns whether the job moved. Terminal moves stamp ``finished_at``.
        """
        allowed_from = [s.value for s, targets in ALLOWED_TRANSITIONS.items() if to in targets]
        now = self.clock()
        values: dict[str, Any] = {"state": to.value, "updated_at": now, **fields}
        if to == JobStatus.RUNNING:
            values.setdefault("started_at", now)
        if to.is_terminal():
            values.setdefault("finished_at", now)
        with self._writing() as conn:
            result = conn.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job_id, jobs_table.c.state.in_(allowed_from))
                .values(**values)
            )
        moved = result.rowcount == 1
        if moved:
            self._changed(job_id)
        return moved

    def finish(
        self,
        job_id: str,
        to: JobStatus,
        *,
        progress: JobProgress | None = None,
        error: ErrorDetail | None = None,
        result: ResultManifest | None = None,
    ) -> bool:
        """Move a job to a terminal state with its final progress, error or result."""
        fields: dict[str, Any] = {}
        if progress is not None:
            fields["progress"] = progress.model_dump(mode="json")
        if error is not None:
            fields["error"] = error.model_dump(mode="json")
        if result is not None:
            fields["result"] = result.model_dump(mode="json")
        return self.transition(job_id, to, **fields)

    def claim_next(self, replica: str, *, max_running_per_owner: int | None = None) -> JobView | None:
        """Claim the oldest PENDING job for ``replica``: it is RUNNING there from now on. None: none waits.

        Exactly one replica claims each job. On PostgreSQL the candidate row is locked with
        ``FOR UPDATE SKIP LOCKED``, so a replica claiming at the same moment takes the next job
        instead of waiting on this one; on SQLite the claim is one ``UPDATE`` under the write
        lock. On both the move is conditional on the job still being PENDING. With
        ``max_running_per_owner``, a job whose owner has that many RUNNING, on any replica,
        keeps its place while later jobs of other owners go ahead; on PostgreSQL those claims
        take a transaction-scoped advisory lock, as two counts under READ COMMITTED would not
        see each other's claims.
        """
        jobs = jobs_table.c
        pending = JobStatus.PENDING.value
        candidate = select(jobs.seq).where(jobs.state == pending).order_by(jobs.seq).limit(1)
        if max_running_per_owner is not None:
            running = jobs_table.alias("running")
            busy = (
                select(func.count()).select_from(running)
                .where(running.c.owner == jobs.owner, running.c.state == JobStatus.RUNNING.value)
                .scalar_subquery()
            )
            candidate = candidate.where(or_(jobs.owner.is_(None), busy < max_running_per_owner))
        now = self.clock()
        with self._writing() as conn:
            if conn.dialect.name == "postgresql":
                if max_running_per_owner is not None:
                    conn.execute(select(func.pg_advisory_xact_lock(_CLAIM_LOCK)))
                seq = conn.execute(candidate.with_for_update(skip_locked=True, of=jobs_table)).scalar()
                if seq is None:
                    return None
                which = jobs.seq == seq
            else:
                which = jobs.seq == candidate.scalar_subquery()
            claim = (
                update(jobs_table)
                .where(which, jobs.state == pending)
                .values(state=JobStatus.RUNNING.value, started_at=now, updated_at=now, replica_id=replica)
                .returning(*jobs_table.c)
            )
            row = conn.execute(claim).mappings().first()
        if row is None:
            return None
        self._changed(row["id"])
        return _to_view(row)

    def has_pending(self) -> bool:
        """Whether any job is PENDING (a cheap read, before a claim that writes)."""
        with self.engine.connect() as conn:
            return conn.execute(select(jobs_table.c.seq).where(jobs_table.c.state == JobStatus.PENDING.value).limit(1)).first() is not None

    def save_progress(self, job_id: str, progress: JobProgress) -> None:
        """Record progress of a RUNNING job (a no-op once it is terminal)."""
        with self._writing() as conn:
            conn.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job_id, jobs_table.c.state == JobStatus.RUNNING.value)
                .values(progress=progress.model_dump(mode="json"), updated_at=self.clock())
            )
        self._changed(job_id)

    def save_resources(self, job_id: str, resources: JobResources) -> None:
        """Record GPU memory and spilling measured while the job ran."""
        with self._writing() as conn:
            conn.execute(update(jobs_table).where(jobs_table.c.id == job_id).values(resources=resources.model_dump(mode="json")))
        self._changed(job_id)

    def save_logs(self, job_id: str, lines: list[str]) -> None:
        """Record a finished job's log lines."""
        with self._writing() as conn:
            conn.execute(update(jobs_table).where(jobs_table.c.id == job_id).values(logs=lines))
        self._changed(job_id)

    def logs(self, job_id: str, *, owner: str | None = None) -> list[str]:
        """A job's log lines (empty while it has not finished). Raises :class:`JobNotFound`."""
        query = _owned(select(jobs_table.c.logs).where(jobs_table.c.id == job_id), owner)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise JobNotFound(f"no job with id '{job_id}'", field="id")
        return list(row[0] or [])

    def ids_in_state(self, state: JobStatus) -> list[str]:
        """Ids of jobs in ``state``, in submission order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(jobs_table.c.id).where(jobs_table.c.state == state.value).order_by(jobs_table.c.seq)
            ).all()
        return [r[0] for r in rows]

    def pending_count(self) -> int:
        """How many jobs are PENDING (one count on the state index, not a count of every state)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(jobs_table).where(jobs_table.c.state == JobStatus.PENDING.value)).scalar_one())

    def versions(self, job_ids: Iterable[str]) -> dict[str, tuple[str, datetime | None]]:
        """:func:`job_version` of each of ``job_ids`` that exists, in one query per 500 ids.

        What the event streams' shared look at the database reads each second for the jobs they
        follow (see :class:`service.job_changes.JobChanges`), instead of each stream its whole row.
        """
        ids = list(job_ids)
        found: dict[str, tuple[str, datetime | None]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                rows = conn.execute(select(jobs_table.c.id, jobs_table.c.state, jobs_table.c.updated_at).where(jobs_table.c.id.in_(chunk)))
                found.update({row.id: (row.state, _aware(row.updated_at)) for row in rows})
        return found

    def count_by_state(self) -> dict[JobStatus, int]:
        """How many jobs are in each state (every state present, zero included)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs_table.c.state, func.count()).group_by(jobs_table.c.state)).all()
        counts = {s: 0 for s in JobStatus}
        counts.update({JobStatus(state): int(n) for state, n in rows})
        return counts


#: What a :class:`JobView` is made of. Reads of jobs leave out the log, a JSON list of up to 64 KiB
#: that only ``GET /jobs/{id}/logs`` shows (:meth:`JobStore.logs` reads it), which each status read
#: decoded and dropped, and the columns only the store itself uses.
_VIEW_COLUMNS = tuple(
    jobs_table.c[name]
    for name in (
        "id", "name", "state", "backend", "spec", "created_at", "started_at", "finished_at",
        "updated_at", "progress", "error", "result", "resources", "owner", "replica_id",
    )
)


@functools.cache
def _get_statement(owned: bool) -> Select[Any]:
    """``SELECT <view columns> ... WHERE id = :job_id`` (``AND owner = :owner``): built once, so a
    status read, the most frequent request, does not build and key a new statement each time."""
    query = select(*_VIEW_COLUMNS).where(jobs_table.c.id == bindparam("job_id"))
    return query.where(jobs_table.c.owner == bindparam("owner")) if owned else query


@functools.cache
def _get_many_statement() -> Select[Any]:
    """``SELECT <view columns> ... WHERE id IN (:ids)``, built once (the ids expand at execution)."""
    return select(*_VIEW_COLUMNS).where(jobs_table.c.id.in_(bindparam("ids", expanding=True)))


def _not_found(job_id: str) -> JobNotFound:
    return JobNotFound(f"no job with id '{job_id}'", field="id")


def _owned(query: Select[Any], owner: str | None) -> Select[Any]:
    """``query`` narrowed to ``owner``'s jobs; all jobs for None."""
    return query if owner is None else query.where(jobs_table.c.owner == owner)


def _scoped_key(key: str, owner: str | None) -> str:
    """The stored form of an idempotency key: the key itself without an owner, else a digest
    of owner and key (the column is unique, and two owners may pick the same key)."""
    if owner is None:
        return key
    return "owner:" + hashlib.sha256(f"{owner}\0{key}".encode()).hexdigest()


def job_version(job: JobView) -> tuple[str, datetime | None]:
    """What changes whenever a write changes what an event stream shows of ``job`` (its state,
    progress or error): every such write moves ``updated_at``. As :meth:`JobStore.versions` reads it."""
    return job.state.value, job.updated_at


def _insert_below(conn: Connection, values: dict[str, Any], max_pending: int) -> Any:
    """Insert ``values`` only while fewer than ``max_pending`` jobs are PENDING; the inserted row, or None."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(_QUEUE_LOCK)))
    return conn.execute(_insert_below_statement(tuple(values)), {**values, "max_pending": max_pending}).mappings().first()


@functools.cache
def _insert_below_statement(names: tuple[str, ...]) -> Any:
    """``INSERT ... SELECT <names> WHERE (PENDING jobs) < :max_pending RETURNING *``, with bound
    parameters: one statement object, so SQLAlchemy compiles it once, not at every submit."""
    pending = select(func.count()).select_from(jobs_table).where(jobs_table.c.state == JobStatus.PENDING.value).scalar_subquery()
    row = select(*(bindparam(name, type_=jobs_table.c[name].type).label(name) for name in names)).where(pending < bindparam("max_pending"))
    # RETURNING, not rowcount: with implicit RETURNING psycopg reports rowcount -1.
    return jobs_table.insert().from_select(list(names), row).returning(*jobs_table.c)


def _to_view(row: Any) -> JobView:
    # Built from the parts validated here, not validated again as a whole: that re-checked values
    # of typed columns and ran every validator of the (cached) spec again at each read.
    return JobView.model_construct(
        id=row["id"],
        name=row["name"],
        state=JobStatus(row["state"]),
        backend=row["backend"],
        spec=_specs.get(row["id"], row["created_at"], row["spec"]),
        created_at=_aware(row["created_at"]),
        started_at=_aware(row["started_at"]),
        finished_at=_aware(row["finished_at"]),
        updated_at=_aware(row["updated_at"]),
        progress=JobProgress.model_validate(row["progress"]),
        error=ErrorDetail.model_validate(row["error"]) if row["error"] else None,
        result=ResultManifest.model_validate(row["result"]) if row["result"] else None,
        resources=JobResources.model_validate(row["resources"]) if row["resources"] else None,
        owner=row["owner"],
        replica=row["replica_id"],
    )
