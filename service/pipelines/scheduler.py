"""The pipeline scheduler: fires due runs, catches up, retries, and follows jobs to the end.

One :meth:`PipelineScheduler.tick` is one pass; :meth:`PipelineScheduler.start` runs a
tick every ``interval_s`` seconds in the service. Everything it decides is settled in
the database (see :mod:`service.pipelines.runs`), so any number of instances, old or
restarted, can tick over one database without making a second run or a second job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Protocol

from spillway.jobs.errors import JobNotFound, SpecError, SpillwayError
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ErrorDetail, JobStatus, ResultManifest
from spillway.service.pipelines.errors import RunExists
from spillway.service.pipelines.models import BackfillResult, RunState, RunTrigger, RunView
from spillway.service.pipelines.plans import localize, plan_due, plan_run
from spillway.service.pipelines.runs import Attempt
from spillway.service.pipelines.schedule import CronSchedule
from spillway.service.pipelines.store import PipelineRecord, PipelineStore
from spillway.service.pipelines.templating import ParamValue

log = logging.getLogger("spillway.pipelines")


class JobLike(Protocol):
    """What the scheduler reads of a job (a :class:`service.schemas.JobView` fits)."""

    state: JobStatus
    error: ErrorDetail | None
    result: ResultManifest | None


class SubmitJob(Protocol):
    """Validate, persist and enqueue a job; returns its id.

    ``key`` is an idempotency key: the same key must give back the same job id, so a
    resubmission after a crash makes no second job. ``owner`` is the pipeline's owner,
    passed only when it has one: the job is that owner's.
    """

    def __call__(self, spec: JobSpec, key: str, *, owner: str | None = None) -> Awaitable[str]: ...


#: One job by id; raises :class:`jobs.errors.JobNotFound`.
GetJob = Callable[[str], Awaitable[JobLike]]
Clock = Callable[[], datetime]


@dataclass
class TickReport:
    """What one tick did (for logs and tests)."""

    created: int = 0
    skipped: int = 0
    submitted: int = 0
    settled: int = 0
    errors: list[str] = field(default_factory=list)


class PipelineScheduler:
    """Runs pipelines on their schedules.

    Parameters
    ----------
    store
        The pipeline store.
    submit
        Turns a rendered JobSpec into a queued job (see :data:`SubmitJob`).
    get_job
        Reads a job's state (see :data:`GetJob`).
    interval_s
        Seconds between ticks in :meth:`start`.
    clock
        Returns the current aware time; by default the store's. Tests pass a fake one
        and call :meth:`tick`, so nothing sleeps.
    resubmit_after_s
        An attempt still without a job this long after its claim (its scheduler died
        while submitting) is submitted again, under the same idempotency key.
    leader
        Asked before each tick of :meth:`start`'s loop; the tick runs only when it says True.
        The service passes its replica's hold on the scheduler lease
        (:class:`service.replica_heartbeat.SchedulerLease`), so one replica ticks at a time
        and another takes over once a dead holder's lease lapses. Ticking from several is
        safe too (everything is settled in the database), only wasted work. None: always tick.
    """

    def __init__(
        self,
        store: PipelineStore,
        *,
        submit: SubmitJob,
        get_job: GetJob,
        clock: Clock | None = None,
        interval_s: float = 5.0,
        resubmit_after_s: float = 300.0,
        leader: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.store = store
        self.submit = submit
        self.get_job = get_job
        self.clock = clock or store.clock
        self.interval_s = interval_s
        self.resubmit_after = timedelta(seconds=resubmit_after_s)
        self.leader = leader
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> TickReport:
        """One pass: settle finished jobs, create due runs, start what may start."""
        async with self._lock:
            # One instant for the whole pass: what is due is decided against one "now".
            now, report = self.clock(), TickReport()
            records = {r.id: r for r in await asyncio.to_thread(self.store.list)}
            await self._settle(records, now, report)
            for record in records.values():
                if not record.paused:
                    await self._plan(record, now, report)
            for record in records.values():
                if not record.paused:
                    claims = await asyncio.to_thread(self.store.runs.claim, record.id, record.definition.max_active_runs, now=now)
                    for attempt in claims:
                        await self._submit(attempt, record, now, report)
            return report

    async def _plan(self, record: PipelineRecord, now: datetime, report: TickReport) -> None:
        try:
            runs, through = plan_due(record, now)
        except SpecError as exc:  # e.g. a time zone gone from tzdata: this pipeline only
            report.errors.append(f"{record.name}: {exc.message}")
            log.error("pipeline %s cannot be scheduled: %s", record.name, exc.message)
            return
        if not runs:
            return
        created = await asyncio.to_thread(self.store.runs.insert, record.id, runs, now=now, through=through)
        for run, won in zip(runs, created):
            if won:
                report.created += 1
                if run.state == RunState.SKIPPED:
                    report.skipped += 1

    async def _settle(self, records: Mapping[int, PipelineRecord], now: datetime, report: TickReport) -> None:
        for attempt in await asyncio.to_thread(self.store.runs.open_attempts):
            record = records.get(attempt.pipeline_id)
            if record is None:
                continue  # deleted while this attempt ran
            if attempt.job_id is None:
                if now - attempt.created_at >= self.resubmit_after:
                    await self._submit(attempt, record, now, report)
                continue
            try:
                job = await self.get_job(attempt.job_id)
            except JobNotFound:
                await self._close(attempt, record, JobStatus.FAILED, now, report, error=f"job {attempt.job_id} is gone from the job store")
                continue
            except Exception as exc:  # noqa: BLE001 - a store hiccup: try again next tick
                report.errors.append(f"{record.name}: reading job {attempt.job_id}: {exc}")
                log.warning("pipeline %s: cannot read job %s: %s", record.name, attempt.job_id, exc)
                continue
            if job.state == JobStatus.RUNNING and attempt.state != JobStatus.RUNNING.value:
                await asyncio.to_thread(self.store.runs.mark_running, attempt)
            elif job.state.is_terminal():
                error = f"{job.error.code}: {job.error.message}" if job.error else None
                location = job.result.location if job.result else None
                await self._close(attempt, record, job.state, now, report, error=error, location=location)

    async def _close(
        self,
        attempt: Attempt,
        record: PipelineRecord,
        outcome: JobStatus,
        now: datetime,
        report: TickReport,
        *,
        error: str | None = None,
        location: str | None = None,
    ) -> None:
        definition = record.definition
        state = await asyncio.to_thread(
            self.store.runs.settle,
            attempt,
            outcome,
            now=now,
            error=error,
            result_location=location,
            retries=definition.retries,
            backoff_s=definition.retry_backoff_s,
        )
        if state is not None:
            report.settled += 1
            log.info("pipeline %s run %s attempt %d: job %s → run %s", record.name, attempt.run_id, attempt.attempt, outcome.value, state.value)

    async def _submit(self, attempt: Attempt, record: PipelineRecord, now: datetime, report: TickReport) -> None:
        try:
            # No owner (auth off): the plain (spec, key) call, which a callable without owners takes too.
            owned = {} if record.owner is None else {"owner": record.owner}
            job_id = await self.submit(JobSpec.model_validate(attempt.spec), attempt.idempotency_key, **owned)
        except SpillwayError as exc:
            # The source not landed yet, the sink taken...: a failed attempt, retried per policy.
            await self._close(attempt, record, JobStatus.FAILED, now, report, error=f"{exc.code}: {exc.message}")
            return
        except Exception as exc:  # noqa: BLE001 - same, but unexpected: keep the traceback in the log
            log.exception("pipeline %s: submitting run %s failed", record.name, attempt.run_id)
            await self._close(attempt, record, JobStatus.FAILED, now, report, error=f"{type(exc).__name__}: {exc}")
            return
        await asyncio.to_thread(self.store.runs.attach_job, attempt, job_id)
        report.submitted += 1

    async def trigger(self, name: str, logical_date: datetime, params: Mapping[str, ParamValue], *, owner: str | None = None) -> RunView:
        """A manual run for the interval starting at ``logical_date`` (to the next firing instant)
        of pipeline ``name`` (``owner``'s, when given).

        Raises
        ------
        PipelineNotFound
            No such pipeline, or another owner's.
        RunExists
            The pipeline already has a run for this logical date.
        TemplateError
            The spec does not render with these parameters.
        """
        record = await asyncio.to_thread(self.store.get, name, owner=owner)
        schedule = CronSchedule(record.definition.schedule, record.definition.timezone)
        start = localize(logical_date, schedule)
        run = plan_run(record, start, schedule.next_after(start), RunTrigger.MANUAL, params)
        (created,) = await asyncio.to_thread(self.store.runs.insert, record.id, [run], now=self.clock())
        if not created:
            raise RunExists(f"pipeline '{name}' already has a run for {start.isoformat()}", field="logical_date")
        self._wake.set()
        view = await asyncio.to_thread(self.store.runs.get, record.id, name, start)
        assert view is not None  # just inserted; runs are only deleted with their pipeline
        return view

    async def backfill(
        self, name: str, start: datetime, end: datetime, params: Mapping[str, ParamValue], *, owner: str | None = None
    ) -> BackfillResult:
        """QUEUED runs for every interval whose start lies in ``[start, end]`` and that has ended.

        Existing runs are left alone; the new ones start as ``max_active_runs`` allows. With an
        ``owner``, another owner's pipeline is not found (:class:`PipelineNotFound`).
        """
        record = await asyncio.to_thread(self.store.get, name, owner=owner)
        schedule = CronSchedule(record.definition.schedule, record.definition.timezone)
        first, last = localize(start, schedule), localize(end, schedule)
        if first > last:
            raise SpecError("the backfill start is after its end", field="start")
        now = self.clock()
        intervals = schedule.intervals(first, last)
        ended = [(s, e) for s, e in intervals if e <= now]
        runs = [plan_run(record, s, e, RunTrigger.BACKFILL, params) for s, e in ended]
        created = await asyncio.to_thread(self.store.runs.insert, record.id, runs, now=now)
        self._wake.set()
        return BackfillResult(
            created=[r.logical_date for r, won in zip(runs, created) if won],
            existing=[r.logical_date for r, won in zip(runs, created) if not won],
            not_ended=[s for s, e in intervals if e > now],
        )

    def next_run_at(self, record: PipelineRecord) -> datetime | None:
        """When the pipeline's next scheduled run fires (in UTC, like every time the API shows); None while paused."""
        if record.paused:
            return None
        schedule = CronSchedule(record.definition.schedule, record.definition.timezone)
        return schedule.next_after(max(record.scheduled_through, self.clock())).astimezone(timezone.utc)

    async def start(self) -> None:
        """Tick every ``interval_s`` seconds (sooner after a trigger or backfill) until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="pipeline-scheduler")

    async def stop(self) -> None:
        """Stop ticking; a tick in progress is cancelled (its work is safe to redo)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                if self.leader is None or await self.leader():
                    report = await self.tick()
                    if report.created or report.submitted or report.settled:
                        log.info("pipeline tick: %s", report)
            except Exception:  # noqa: BLE001 - the loop must outlive a bad tick (e.g. the database restarting)
                log.exception("pipeline scheduler tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
