"""The scheduler with a fake clock and fake jobs: catch-up, restarts, retries, backfill, triggers."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from spillway.jobs.errors import SourceNotFound
from spillway.jobs.status import JobStatus
from spillway.service.pipelines.errors import RunExists, TemplateError
from spillway.service.pipelines.models import RunState, RunTrigger
from spillway.service.pipelines.runs import Attempt
from tests.test_pipelines_fakes import (
    T0,
    UTC,
    FakeClock,
    FakeJobs,
    SchedulerFactory,
    arun,
    hour,
    pipeline,
    runs_of,
    states,
    tick,
)

pytest_plugins = ["tests.test_pipelines_fakes"]  # the database and scheduler fixtures


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Down from 00:05 to 05:30: the firings at 01:00 ... 05:00 were missed.
        ("skip", ["SKIPPED"] * 5),
        ("latest", ["SKIPPED"] * 4 + ["RUNNING"]),
        ("all", ["RUNNING", "RUNNING", "QUEUED", "QUEUED", "QUEUED"]),
    ],
)

def test_catchup_after_an_outage(new_scheduler: SchedulerFactory, policy: str, expected: list[str]) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_scheduler(clock, jobs)
    scheduler.store.create(pipeline(catchup=policy, max_active_runs=2))
    tick(scheduler)
    clock.set(hour(5.5))
    report = tick(scheduler)
    runs = runs_of(scheduler)
    assert [r.logical_date for r in runs] == [hour(h) for h in range(5)]
    assert states(runs) == expected
    assert report.skipped == expected.count("SKIPPED")
    assert all(r.reason and f"catchup={policy}" in r.reason for r in runs if r.state == RunState.SKIPPED)
    assert len(jobs.jobs) == expected.count("RUNNING")
    # Back on time: the 06:00 firing runs whatever the policy (a slot permitting).
    for job_id in jobs.open_ids():
        jobs.finish(job_id, JobStatus.SUCCEEDED)
    clock.set(hour(6) + timedelta(seconds=3))
    tick(scheduler)
    newest = runs_of(scheduler)[-1]
    assert newest.logical_date == hour(5) and newest.state in (RunState.RUNNING, RunState.QUEUED)
    assert newest.state == RunState.RUNNING or policy == "all"


def test_a_short_delay_is_not_an_outage(new_sqlite_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    scheduler.store.create(pipeline(catchup="skip", catchup_grace_s=300))
    clock.set(hour(1) + timedelta(minutes=4))  # a restart that took four minutes
    tick(scheduler)
    assert states(runs_of(scheduler)) == ["RUNNING"]


def test_restart_mid_run_makes_no_second_run_or_job(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    first = new_scheduler(clock, jobs)
    first.store.create(pipeline())
    clock.set(hour(1) + timedelta(seconds=2))
    tick(first)
    (job_id,) = jobs.jobs
    jobs.jobs[job_id].state = JobStatus.RUNNING
    first.store.close()  # the process dies; the job keeps running on the cluster

    second = new_scheduler(clock, jobs)
    for _ in range(3):
        clock.advance(seconds=5)
        tick(second)
    (run,) = runs_of(second)
    assert run.state == RunState.RUNNING and [a.job_id for a in run.attempts] == [job_id]
    assert run.attempts[0].state == "RUNNING"
    jobs.finish(job_id, JobStatus.SUCCEEDED)
    tick(second)
    (run,) = runs_of(second)
    assert run.state == RunState.SUCCEEDED and run.result_location == "out/north/20260501"
    assert len(jobs.jobs) == 1


class Crash(BaseException):
    """The process dying between creating a job and recording it."""


def test_crash_while_submitting_resubmits_under_the_same_key(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    first = new_scheduler(clock, jobs)
    first.store.create(pipeline())

    async def submit_then_die(spec: object, key: str) -> str:
        await jobs.submit(spec, key)  # type: ignore[arg-type]
        raise Crash

    first.submit = submit_then_die
    clock.set(hour(1) + timedelta(seconds=2))
    with pytest.raises(Crash):
        tick(first)
    (run,) = runs_of(first)
    assert run.state == RunState.RUNNING and run.attempts[0].state == "SUBMITTING" and run.attempts[0].job_id is None

    second = new_scheduler(clock, jobs, resubmit_after_s=60)
    tick(second)  # claimed a moment ago: its owner may still be submitting
    assert runs_of(second)[0].attempts[0].job_id is None
    clock.advance(seconds=61)
    tick(second)
    (run,) = runs_of(second)
    assert len(jobs.jobs) == 1 and run.attempts[0].job_id == "job1" and run.attempts[0].state == "PENDING"


def test_retries_with_exponential_backoff(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_scheduler(clock, jobs)
    scheduler.store.create(pipeline(retries=2, retry_backoff_s=60))
    clock.set(hour(1))
    tick(scheduler)
    waits = []
    for outcome in (JobStatus.FAILED, JobStatus.FAILED):
        (job_id,) = jobs.open_ids()
        jobs.finish(job_id, outcome)
        failed_at = clock()
        tick(scheduler)
        (run,) = runs_of(scheduler)
        assert run.state == RunState.UP_FOR_RETRY and run.next_attempt_at is not None
        waits.append((run.next_attempt_at - failed_at).total_seconds())
        clock.set(run.next_attempt_at - timedelta(seconds=1))
        tick(scheduler)
        assert jobs.open_ids() == []  # not before the backoff is over
        clock.set(run.next_attempt_at)
        tick(scheduler)
        assert len(jobs.open_ids()) == 1
    assert waits == [60, 120]  # base * 2**(n-1) for retry n
    (job_id,) = jobs.open_ids()
    jobs.finish(job_id, JobStatus.SUCCEEDED)
    clock.advance(seconds=30)
    tick(scheduler)
    (run,) = runs_of(scheduler)
    assert run.state == RunState.SUCCEEDED
    assert [(a.attempt, a.job_id, a.state) for a in run.attempts] == [(1, "job1", "FAILED"), (2, "job2", "FAILED"), (3, "job3", "SUCCEEDED")]
    assert run.attempts[0].error == "job_failed: job1 failed"
    assert run.duration_s == (run.finished_at - run.started_at).total_seconds() == 60 + 120 + 30  # type: ignore[operator]


def test_retries_run_out_and_submit_errors_count_as_attempts(new_sqlite_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    scheduler.store.create(pipeline(retries=1, retry_backoff_s=0))
    jobs.submit_errors.append(SourceNotFound("data/sales/2026-05-01 matches no file", field="source.path"))
    clock.set(hour(1))
    tick(scheduler)  # attempt 1 cannot be submitted: the run is UP_FOR_RETRY with no backoff
    assert states(runs_of(scheduler)) == ["UP_FOR_RETRY"]
    tick(scheduler)
    (job_id,) = jobs.open_ids()
    jobs.finish(job_id, JobStatus.FAILED)
    tick(scheduler)
    (run,) = runs_of(scheduler)
    assert run.state == RunState.FAILED and run.reason == "job_failed: job1 failed"
    assert [(a.attempt, a.job_id, a.state) for a in run.attempts] == [(1, None, "FAILED"), (2, "job1", "FAILED")]
    assert run.attempts[0].error is not None and run.attempts[0].error.startswith("source_not_found")


def test_a_cancelled_job_cancels_the_run_without_retry(new_sqlite_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    scheduler.store.create(pipeline(retries=3, retry_backoff_s=0))
    clock.set(hour(1))
    tick(scheduler)
    jobs.finish("job1", JobStatus.CANCELLED)
    tick(scheduler)
    assert states(runs_of(scheduler)) == ["CANCELLED"] and len(jobs.jobs) == 1


def test_backfill_respects_max_active_runs(new_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(datetime(2026, 5, 20, 12, tzinfo=UTC)), FakeJobs()
    scheduler = new_scheduler(clock, jobs)
    scheduler.store.create(pipeline(schedule="@daily", max_active_runs=3))
    result = arun(scheduler.backfill("sales", datetime(2026, 5, 1), datetime(2026, 5, 20), {"region": "south"}))
    # The interval starting on the 20th ends tomorrow: left to the schedule.
    assert len(result.created) == 19 and result.existing == [] and result.not_ended == [datetime(2026, 5, 20, tzinfo=UTC)]
    seen = []
    while any(not r.state.is_terminal() for r in runs_of(scheduler)):
        tick(scheduler)
        active = [r for r in runs_of(scheduler) if r.state == RunState.RUNNING]
        assert len(active) <= 3
        seen += [r.logical_date.day for r in active if r.logical_date.day not in seen]
        for job_id in jobs.open_ids():
            jobs.finish(job_id, JobStatus.SUCCEEDED)
    assert seen == list(range(1, 20))  # oldest first
    runs = runs_of(scheduler)
    assert {r.trigger for r in runs} == {RunTrigger.BACKFILL} and states(runs) == ["SUCCEEDED"] * 19
    assert runs[0].params == {"region": "south"} and runs[0].result_location == "out/south/20260501"
    again = arun(scheduler.backfill("sales", datetime(2026, 5, 18), datetime(2026, 5, 19), {}))
    assert again.created == [] and len(again.existing) == 2


def test_manual_trigger_once_per_logical_date(new_sqlite_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    scheduler.store.create(pipeline(schedule="30 2 * * *", timezone="Europe/Berlin"))
    run = arun(scheduler.trigger("sales", datetime(2026, 4, 1, 2, 30), {"region": "east"}))
    assert run.logical_date == datetime(2026, 4, 1, 0, 30, tzinfo=UTC)  # 02:30 CEST: naive dates are local
    assert run.data_interval_end == datetime(2026, 4, 2, 0, 30, tzinfo=UTC)
    assert run.state == RunState.QUEUED and run.trigger == RunTrigger.MANUAL and run.version == 1
    with pytest.raises(RunExists):
        arun(scheduler.trigger("sales", datetime(2026, 4, 1, 0, 30, tzinfo=UTC), {}))
    with pytest.raises(TemplateError):
        arun(scheduler.trigger("sales", datetime(2026, 4, 2), {"ds": "x"}))
    tick(scheduler)
    assert jobs.jobs["job1"].spec.sink.path == "out/east/20260401"


def test_updates_version_runs_and_pause_stops_firing(new_sqlite_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    store = scheduler.store
    store.create(pipeline(max_active_runs=5))
    clock.set(hour(1))
    tick(scheduler)
    body = pipeline(max_active_runs=5, params={"region": "west"})
    assert store.update("sales", body).version == 2
    clock.set(hour(2))
    tick(scheduler)
    assert [(r.version, r.params["region"]) for r in runs_of(scheduler)] == [(1, "north"), (2, "west")]
    store.set_paused("sales", True)
    clock.set(hour(5))
    tick(scheduler)
    assert len(runs_of(scheduler)) == 2
    store.set_paused("sales", False)  # resumes from now: the paused hours are not caught up
    clock.set(hour(6))
    tick(scheduler)
    assert [r.logical_date for r in runs_of(scheduler)] == [hour(0), hour(1), hour(5)]


def test_a_template_that_fails_for_one_date_is_a_failed_run_not_a_crash(new_sqlite_scheduler: SchedulerFactory) -> None:
    clock, jobs = FakeClock(T0), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    # Valid when saved; at 01:00 the rendered path is empty (Jinja's own logic, evaluated per date).
    broken = {"format": "parquet", "path": "{{ '' if data_interval_end.startswith('2026-05-01T01') else 'in/' ~ ds }}"}
    scheduler.store.create(pipeline(spec={"source": broken, "sink": {"path": "out/{{ ds }}"}}))
    clock.set(hour(1))
    tick(scheduler)
    (run,) = runs_of(scheduler)
    assert run.state == RunState.FAILED and run.reason is not None and "spec.source.path" in run.reason and jobs.jobs == {}


def test_idempotency_key_names_run_and_attempt() -> None:
    attempt = Attempt(id=1, run_id=2, run_uid="abc", attempt=3, job_id=None, state="SUBMITTING", created_at=T0, spec={}, pipeline_id=1)
    assert attempt.idempotency_key == "pipeline-run:abc:3"
