"""Two scheduler instances on one database (SQLite and PostgreSQL): one run per key, one job per attempt."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from spillway.jobs.status import JobStatus
from spillway.service.pipelines.errors import RunExists
from spillway.service.pipelines.models import ACTIVE_RUN_STATES, RunState
from spillway.service.pipelines.plans import plan_due
from spillway.service.pipelines.scheduler import PipelineScheduler
from spillway.service.pipelines.tables import pipelines_table, runs_table
from tests.test_pipelines_fakes import (
    T0,
    UTC,
    FakeClock,
    FakeJobs,
    SchedulerFactory,
    hour,
    pipeline,
    runs_of,
    tick,
)

pytest_plugins = ["tests.test_pipelines_fakes"]  # the database and scheduler fixtures


class CountingJobs(FakeJobs):
    """Counts submissions: a second submission of one attempt would show here."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def submit(self, spec: Any, key: str) -> str:
        with self.lock:
            self.calls += 1
        return await super().submit(spec, key)


def together(*actions: Callable[[], Any]) -> list[Any]:
    """Run the actions in threads released at the same moment; re-raise the first error."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = actions[i]()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def ticks(scheduler: PipelineScheduler, n: int) -> Callable[[], None]:
    async def go() -> None:
        for _ in range(n):
            await scheduler.tick()

    return lambda: asyncio.run(go())


def test_four_instances_in_threads_make_one_run_per_key_and_one_job_per_attempt(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), CountingJobs()
    a, b, c, d = (new_scheduler(clock, jobs) for _ in range(4))
    a.store.create(pipeline(catchup="all", max_active_runs=2, retries=1, retry_backoff_s=0))
    clock.set(hour(10.5))  # ten missed firings, all to run, two at a time, some failing once
    finished = 0
    for _ in range(40):
        errors = [e for e in together(ticks(a, 3), ticks(b, 3), ticks(c, 3), ticks(d, 3)) if e is not None]
        assert errors == []
        runs = runs_of(a)
        assert sum(r.state in ACTIVE_RUN_STATES for r in runs) <= 2
        for job_id in jobs.open_ids():
            job = jobs.jobs[job_id]
            fail = job.key.endswith(":1") and finished % 3 == 0  # every third first attempt fails
            jobs.finish(job_id, JobStatus.FAILED if fail else JobStatus.SUCCEEDED)
            finished += 1
        if runs and all(r.state.is_terminal() for r in runs):
            break
    runs = runs_of(a)
    assert [r.logical_date for r in runs] == [hour(h) for h in range(10)]
    assert {r.state for r in runs} == {RunState.SUCCEEDED}
    attempts = [att for r in runs for att in r.attempts]
    assert any(att.attempt == 2 for att in attempts), "no retry happened: the test lost its point"
    assert len(jobs.jobs) == jobs.calls == len(attempts)
    assert len({att.job_id for att in attempts}) == len(attempts)


def test_a_claim_waits_for_another_claimer_and_then_respects_max_active_runs(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    a, b = new_scheduler(clock, jobs), new_scheduler(clock, jobs)
    a.store.create(pipeline(catchup="all", max_active_runs=2))
    clock.set(hour(4.5))
    record = a.store.get("sales")
    planned, _ = plan_due(record, clock())
    a.store.runs.insert(record.id, planned, now=clock())
    claimed: list[Any] = []
    with a.store.engine.begin() as conn:
        # Instance a is mid-claim: it holds the pipeline row (as claim() does first) ...
        conn.execute(update(pipelines_table).where(pipelines_table.c.id == record.id).values(claim_seq=pipelines_table.c.claim_seq + 1))
        waiting = threading.Thread(target=lambda: claimed.extend(b.store.runs.claim(record.id, 2, now=clock())))
        waiting.start()
        waiting.join(timeout=0.5)
        assert waiting.is_alive(), "b claimed while a held the pipeline row"
        # ... and takes both slots before it commits.
        first_two = select(runs_table.c.id).order_by(runs_table.c.logical_date).limit(2).scalar_subquery()
        conn.execute(update(runs_table).where(runs_table.c.id.in_(first_two)).values(state=RunState.RUNNING.value))
    waiting.join(timeout=60)
    assert claimed == [] and states_count(runs_of(a)) == {"RUNNING": 2, "QUEUED": 2}


def states_count(runs: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.state.value] = counts.get(r.state.value, 0) + 1
    return counts


def test_interleaved_ticks_with_a_stale_view_lose_gracefully(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), CountingJobs()
    a, b = new_scheduler(clock, jobs), new_scheduler(clock, jobs)
    a.store.create(pipeline(catchup="all", max_active_runs=3))
    stale = b.store.get("sales")  # b read the pipeline before a scheduled anything
    clock.set(hour(3.5))
    tick(a)
    planned, through = plan_due(stale, clock())
    assert len(planned) == 3
    assert b.store.runs.insert(stale.id, planned, now=clock(), through=through) == [False, False, False]
    tick(b)
    tick(a)
    assert len(runs_of(a)) == 3 and jobs.calls == 3


def test_concurrent_inserts_of_one_key_have_one_winner(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    schedulers = [new_scheduler(clock, jobs) for _ in range(4)]
    schedulers[0].store.create(pipeline(catchup="all"))
    clock.set(hour(6.5))
    record = schedulers[0].store.get("sales")
    planned, _ = plan_due(record, clock())
    results = together(*[lambda s=s: s.store.runs.insert(record.id, planned, now=clock()) for s in schedulers])
    assert [sum(won) for won in zip(*results)] == [1] * len(planned)


def test_racing_manual_triggers_make_one_run(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    a, b = new_scheduler(clock, jobs), new_scheduler(clock, jobs)
    a.store.create(pipeline())
    when = datetime(2026, 4, 1, tzinfo=UTC)
    results = together(lambda: asyncio.run(a.trigger("sales", when, {})), lambda: asyncio.run(b.trigger("sales", when, {})))
    assert sorted(type(r).__name__ for r in results) == ["RunExists", "RunView"]
    assert any(isinstance(r, RunExists) for r in results)
    assert len(runs_of(a)) == 1
