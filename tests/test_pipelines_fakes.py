"""Fakes and fixtures shared by the pipeline tests: a settable clock, an in-memory job
service behind the ``submit``/``get_job`` callbacks, and a database per test (SQLite
file, or a fresh schema on PostgreSQL when SPILLWAY_TEST_POSTGRES_URL is set)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest

from spillway.jobs.errors import JobNotFound
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ColumnSchema, ErrorDetail, JobStatus, ResultManifest
from spillway.service.pipelines import PipelineScheduler, PipelineStore
from spillway.service.pipelines.models import PipelineCreate, RunView
from spillway.service.pipelines.scheduler import TickReport

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 0, 5, tzinfo=UTC)  # the tests' "now": five minutes past the first hourly tick


def hour(h: float) -> datetime:
    """``h`` hours after midnight of the tests' day."""
    return datetime(2026, 5, 1, tzinfo=UTC) + timedelta(hours=h)


class FakeClock:
    """A clock the test sets; every reader sees the same instant."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def set(self, when: datetime) -> None:
        self.now = when

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class FakeJob:
    """What get_job returns: the attributes the scheduler reads of a JobView."""

    id: str
    spec: JobSpec
    key: str
    state: JobStatus = JobStatus.PENDING
    error: ErrorDetail | None = None
    result: ResultManifest | None = None


@dataclass
class FakeJobs:
    """The job service: ``submit`` honours idempotency keys, like the real store does."""

    jobs: dict[str, FakeJob] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    submit_errors: list[Exception] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def submit(self, spec: JobSpec, key: str) -> str:
        with self.lock:
            if self.submit_errors:
                raise self.submit_errors.pop(0)
            if key in self.by_key:
                return self.by_key[key]
            job_id = f"job{len(self.jobs) + 1}"
            self.jobs[job_id] = FakeJob(job_id, spec, key)
            self.by_key[key] = job_id
            return job_id

    async def get_job(self, job_id: str) -> FakeJob:
        if job_id not in self.jobs:
            raise JobNotFound(f"no job with id '{job_id}'", field="id")
        return self.jobs[job_id]

    def finish(self, job_id: str, state: JobStatus) -> None:
        """End a job; a SUCCEEDED one gets a manifest at its sink path."""
        job = self.jobs[job_id]
        job.state = state
        if state == JobStatus.SUCCEEDED:
            job.result = ResultManifest(location=job.spec.sink.path, files=[], total_rows=0, total_bytes=0, columns=[ColumnSchema(name="x", type="int64")])
        elif state == JobStatus.FAILED:
            job.error = ErrorDetail(code="job_failed", message=f"{job_id} failed")

    def open_ids(self) -> list[str]:
        return [j.id for j in self.jobs.values() if not j.state.is_terminal()]


def spec_template(**overrides: Any) -> dict[str, Any]:
    """A JobSpec template using the interval variables."""
    return {
        "name": "daily_sales",
        "source": {"format": "parquet", "path": "data/sales/{{ ds }}/*.parquet"},
        "steps": [{"op": "filter", "expr": "region == '{{ region }}'"}],
        "sink": {"path": "out/{{ params.region }}/{{ ds_nodash }}"},
        **overrides,
    }


def pipeline(name: str = "sales", **fields: Any) -> PipelineCreate:
    """A valid pipeline body; ``fields`` override any part of it."""
    body: dict[str, Any] = {"name": name, "spec": spec_template(), "schedule": "0 * * * *", "params": {"region": "north"}}
    return PipelineCreate.model_validate({**body, **fields})


def make_scheduler(url: str, clock: FakeClock, jobs: FakeJobs, **options: Any) -> PipelineScheduler:
    """A scheduler with its own store (its own engine), as a separate process would have."""
    return PipelineScheduler(PipelineStore(url, clock=clock), submit=jobs.submit, get_job=jobs.get_job, clock=clock, **options)


def tick(scheduler: PipelineScheduler) -> TickReport:
    """One scheduler pass, on a fresh event loop."""
    return asyncio.run(scheduler.tick())


T = TypeVar("T")


def arun(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine of the scheduler (trigger, backfill) to completion."""
    return asyncio.run(coro)


def runs_of(scheduler: PipelineScheduler, name: str = "sales") -> list[RunView]:
    """All runs, oldest logical date first."""
    record = scheduler.store.get(name)
    items, _ = scheduler.store.runs.list(record.id, name, limit=10_000)
    return sorted(items, key=lambda r: r.logical_date)


def states(runs: list[RunView]) -> list[str]:
    return [r.state.value for r in runs]


@pytest.fixture()
def database(database_url: str) -> str:
    """A database URL: a SQLite file, or a fresh schema on PostgreSQL (conftest's database_url)."""
    return database_url


@pytest.fixture()
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file, for tests whose subject is not the database."""
    return f"sqlite:///{tmp_path / 'pipelines.db'}"


SchedulerFactory = Callable[..., PipelineScheduler]


def _factory(url: str) -> Iterator[SchedulerFactory]:
    made: list[PipelineScheduler] = []

    def make(clock: FakeClock, jobs: FakeJobs, **options: Any) -> PipelineScheduler:
        made.append(make_scheduler(url, clock, jobs, **options))
        return made[-1]

    yield make
    for scheduler in made:
        scheduler.store.close()


@pytest.fixture()
def new_scheduler(database: str) -> Iterator[SchedulerFactory]:
    """Makes schedulers over the test's database (SQLite and PostgreSQL); closes them after."""
    yield from _factory(database)


@pytest.fixture()
def new_sqlite_scheduler(sqlite_url: str) -> Iterator[SchedulerFactory]:
    """Makes schedulers over one SQLite file; closes them after."""
    yield from _factory(sqlite_url)
