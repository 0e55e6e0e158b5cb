"""Catch-up after an outage (issue 16 item 15): a per-minute pipeline, a scheduler down for 7 minutes.

A firing the scheduler first sees more than the pipeline's ``catchup_grace_s`` after its time
was missed, and only the catch-up policy decides whether it runs; a younger one runs as on time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from spillway.jobs.status import JobStatus
from spillway.service.pipelines.models import PipelineCreate, RunState
from tests.test_pipelines_fakes import UTC, FakeClock, FakeJobs, SchedulerFactory, pipeline, runs_of, states, tick

pytest_plugins = ["tests.test_pipelines_fakes"]

NOON = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
DOWN_AT = NOON + timedelta(seconds=10)  # the last tick before the outage
BACK_AT = DOWN_AT + timedelta(minutes=7, seconds=40)  # 12:07:50: the firings at 12:01 ... 12:07 were all missed


def minute(m: int) -> datetime:
    return NOON + timedelta(minutes=m)


def per_minute(**fields: object) -> PipelineCreate:
    return pipeline(schedule="* * * * *", max_active_runs=10, **fields)


def outage(new_scheduler: SchedulerFactory, body: PipelineCreate) -> tuple[list[str], FakeJobs]:
    """Tick at DOWN_AT, then once at BACK_AT; the runs' states, oldest logical date first, and the jobs."""
    clock, jobs = FakeClock(DOWN_AT), FakeJobs()
    scheduler = new_scheduler(clock, jobs)
    scheduler.store.create(body)
    tick(scheduler)
    assert runs_of(scheduler, body.name) == [], "nothing was due before the outage"
    clock.set(BACK_AT)
    tick(scheduler)
    runs = runs_of(scheduler, body.name)
    # Firing at 12:01 ... 12:07 ends the intervals that start at 12:00 ... 12:06.
    assert [r.logical_date for r in runs] == [minute(m) for m in range(7)]
    return states(runs), jobs


def test_skip_runs_none_of_the_missed_firings(new_scheduler: SchedulerFactory) -> None:
    seen, jobs = outage(new_scheduler, per_minute(catchup="skip"))
    assert seen == ["SKIPPED"] * 7
    assert jobs.jobs == {}


def test_latest_runs_only_the_most_recent_missed_firing(new_scheduler: SchedulerFactory) -> None:
    seen, jobs = outage(new_scheduler, per_minute(catchup="latest"))
    assert seen == ["SKIPPED"] * 6 + ["RUNNING"]
    (job,) = jobs.jobs.values()
    assert job.spec.sink.path.endswith("20260501")


def test_all_runs_every_missed_firing(new_scheduler: SchedulerFactory) -> None:
    seen, jobs = outage(new_scheduler, per_minute(catchup="all"))
    assert seen == ["RUNNING"] * 7 and len(jobs.jobs) == 7


def test_the_grace_is_a_pipeline_setting(new_scheduler: SchedulerFactory) -> None:
    # A grace longer than the outage: every firing counts as on time, whatever the policy.
    seen, _ = outage(new_scheduler, per_minute(catchup="skip", catchup_grace_s=600))
    assert seen == ["RUNNING"] * 7
    # 60 s: the 12:07 firing, seen 50 s late, is on time; the older six were missed.
    seen, _ = outage(new_scheduler, per_minute(name="late", catchup="skip", catchup_grace_s=60))
    assert seen[:6] == ["SKIPPED"] * 6 and seen[6] == "RUNNING"


def test_skip_then_back_on_time_runs_the_next_firing(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(DOWN_AT), FakeJobs()
    scheduler = new_scheduler(clock, jobs)
    scheduler.store.create(per_minute(catchup="skip"))
    tick(scheduler)
    clock.set(BACK_AT)
    tick(scheduler)
    clock.set(minute(8) + timedelta(seconds=3))  # ticking again: the 12:08 firing is seen 3 s late
    tick(scheduler)
    runs = runs_of(scheduler)
    assert states(runs) == ["SKIPPED"] * 7 + ["RUNNING"]
    assert [j.state for j in jobs.jobs.values()] == [JobStatus.PENDING]
    assert all(r.reason and "catchup=skip" in r.reason for r in runs if r.state == RunState.SKIPPED)


@pytest.mark.parametrize("grace", [-1, 86_401])
def test_the_grace_is_bounded(grace: float) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="catchup_grace_s"):
        per_minute(catchup_grace_s=grace)
