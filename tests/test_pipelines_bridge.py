"""Pipeline runs as real jobs: the bridge callbacks over a real JobStore in the same database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from spillway.jobs.errors import SinkExists, SpecError
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ColumnSchema, ErrorDetail, JobStatus, ResultManifest
from spillway.jobs.validate import validate_submission as validate_job
from spillway.service.pipelines import PipelineScheduler, PipelineStore
from spillway.service.pipelines.bridge import job_callbacks
from spillway.service.pipelines.models import RunState
from spillway.service.store import JobStore
from tests.conftest import wait_for
from tests.test_pipelines_fakes import T0, UTC, FakeClock, pipeline, runs_of, tick

pytest_plugins = ["tests.test_pipelines_fakes"]  # the database fixture


@pytest.fixture()
def wired(database: str) -> Iterator[dict[str, Any]]:
    """The service's wiring, minus the cluster: one database, the job store, the pipeline store."""
    clock = FakeClock(T0)
    jobs = JobStore(database)
    pipelines = PipelineStore(database, clock=clock)
    enqueued: list[str] = []
    refuse: list[Exception] = []

    def validate(spec: JobSpec) -> None:
        if refuse:
            raise refuse.pop(0)

    submit, get_job = job_callbacks(jobs, enqueued.append, backend="pandas", validate=validate)
    scheduler = PipelineScheduler(pipelines, submit=submit, get_job=get_job)
    yield {"clock": clock, "jobs": jobs, "scheduler": scheduler, "enqueued": enqueued, "refuse": refuse, "submit": submit}
    pipelines.close()
    jobs.close()


def test_runs_become_jobs_and_job_outcomes_become_run_states(wired: dict[str, Any]) -> None:
    clock, jobs, scheduler, enqueued = wired["clock"], wired["jobs"], wired["scheduler"], wired["enqueued"]
    scheduler.store.create(pipeline(retries=1, retry_backoff_s=30))
    clock.set(datetime(2026, 5, 1, 1, tzinfo=UTC))
    tick(scheduler)
    (first,) = enqueued
    job = jobs.get(first)
    assert job.state == JobStatus.PENDING and job.spec.sink.path == "out/north/20260501"

    jobs.transition(first, JobStatus.RUNNING)
    tick(scheduler)
    assert runs_of(scheduler)[0].attempts[0].state == "RUNNING"
    jobs.finish(first, JobStatus.FAILED, error=ErrorDetail(code="worker_died", message="a worker died"))
    tick(scheduler)
    (run,) = runs_of(scheduler)
    assert run.state == RunState.UP_FOR_RETRY and run.reason == "worker_died: a worker died"

    clock.advance(seconds=30)
    tick(scheduler)
    assert len(enqueued) == 2 and enqueued[1] != first
    manifest = ResultManifest(location="out/north/20260501", files=[], total_rows=0, total_bytes=0, columns=[ColumnSchema(name="n", type="int64")])
    jobs.transition(enqueued[1], JobStatus.RUNNING)
    jobs.finish(enqueued[1], JobStatus.SUCCEEDED, result=manifest)
    tick(scheduler)
    (run,) = runs_of(scheduler)
    assert run.state == RunState.SUCCEEDED and run.result_location == "out/north/20260501"
    assert [a.job_id for a in run.attempts] == enqueued


def test_a_resubmission_finds_the_job_by_its_key(wired: dict[str, Any]) -> None:
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": "in"}, "sink": {"path": "out"}})
    submit, enqueued = wired["submit"], wired["enqueued"]
    first = asyncio.run(submit(spec, "pipeline-run:abc:1"))
    # Even with the sink now taken (the job finished and committed), the same key gives the same job.
    wired["refuse"].append(SinkExists("'out' already holds data", field="sink.path"))
    assert asyncio.run(submit(spec, "pipeline-run:abc:1")) == first
    assert enqueued == [first]
    with pytest.raises(SinkExists):
        asyncio.run(submit(spec, "pipeline-run:abc:2"))


def test_a_refused_job_is_a_failed_attempt(wired: dict[str, Any]) -> None:
    clock, scheduler = wired["clock"], wired["scheduler"]
    scheduler.store.create(pipeline())
    wired["refuse"].append(SinkExists("'out/north/20260501' already holds data", field="sink.path"))
    clock.set(datetime(2026, 5, 1, 1, tzinfo=UTC))
    tick(scheduler)
    (run,) = runs_of(scheduler)
    assert run.state == RunState.FAILED and run.attempts[0].error == "sink_exists: 'out/north/20260501' already holds data"
    assert wired["enqueued"] == []


def test_validate_job_checks_the_data_roots(tmp_path: Any) -> None:
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": "/elsewhere/in"}, "sink": {"path": str(tmp_path / "out")}})
    with pytest.raises(SpecError) as caught:
        validate_job(spec, [str(tmp_path)])
    assert caught.value.field == "source.path"


def test_start_ticks_until_stopped(wired: dict[str, Any]) -> None:
    clock, scheduler = wired["clock"], wired["scheduler"]
    scheduler.store.create(pipeline())
    scheduler.interval_s = 0.05

    async def main() -> None:
        await scheduler.start()
        clock.set(datetime(2026, 5, 1, 1, tzinfo=UTC) + timedelta(seconds=1))
        await asyncio.to_thread(wait_for, lambda: wired["enqueued"], timeout=20, interval=0.05, what="the loop to submit the run")
        await scheduler.stop()

    asyncio.run(main())
    assert states_of(scheduler) == ["RUNNING"]


def states_of(scheduler: PipelineScheduler) -> list[str]:
    return [r.state.value for r in runs_of(scheduler)]
