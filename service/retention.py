"""Retention: deleting a finished job, pruning old jobs, and bounding pipelines' run history.

Deletes are single conditional statements over the store's tables (``... WHERE state IN
(terminal)``), so a job that is still PENDING or RUNNING is never deleted, whichever
replica asks. Pruning removes records and logs, never outputs: data is deleted only when
someone asks for it, job by job (``DELETE /jobs/{id}?output=true``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select

from spillway.jobs.errors import InvalidTransition
from spillway.jobs.status import JobStatus
from spillway.service.pipelines.models import RunState
from spillway.service.pipelines.store import PipelineStore
from spillway.service.pipelines.tables import attempts_table, runs_table, utc
from spillway.service.schemas import JobView
from spillway.service.store import JobStore, jobs_table, utc_now

log = logging.getLogger("spillway.retention")

Clock = Callable[[], datetime]
_TERMINAL_JOBS = [s.value for s in JobStatus if s.is_terminal()]
_TERMINAL_RUNS = [s.value for s in RunState if s.is_terminal()]
#: Rows deleted per statement while pruning, so one pass never holds the write lock for long.
BATCH = 500


class JobActive(InvalidTransition):
    """A PENDING or RUNNING job cannot be deleted: cancel it first."""

    code = "job_active"


def delete_job(store: JobStore, job_id: str, *, owner: str | None = None) -> JobView:
    """Delete a terminal job's record and logs; returns the job as it was.

    Raises
    ------
    JobNotFound
        No such job, or another owner's.
    JobActive
        The job is PENDING or RUNNING.
    """
    job = store.get(job_id, owner=owner)
    with store.engine.begin() as conn:
        gone = conn.execute(delete(jobs_table).where(jobs_table.c.id == job_id, jobs_table.c.state.in_(_TERMINAL_JOBS))).rowcount
    if gone != 1:
        state = store.get(job_id).state  # JobNotFound if a concurrent delete won
        raise JobActive(f"job {job_id} is {state.value}: cancel it first (POST /jobs/{job_id}/cancel), then delete it", field="id")
    return job


def prune_jobs(store: JobStore, finished_before: datetime) -> int:
    """Delete terminal jobs that finished before ``finished_before``; how many."""
    total = 0
    while True:
        with store.engine.begin() as conn:
            ids = select(jobs_table.c.seq).where(
                jobs_table.c.state.in_(_TERMINAL_JOBS), jobs_table.c.finished_at < finished_before
            ).limit(BATCH)
            gone = conn.execute(delete(jobs_table).where(jobs_table.c.seq.in_(ids.scalar_subquery()))).rowcount
        total += gone
        if gone < BATCH:
            return total


def prune_runs(pipelines: PipelineStore, keep: int) -> int:
    """Keep each pipeline's ``keep`` newest finished runs (by logical date); delete older
    finished runs and their attempts. Runs still active are never deleted. How many went.

    A deleted run's interval may be run again by a backfill or trigger, as after Airflow's
    ``db clean``; the schedule itself never goes back before its watermark.
    """
    total = 0
    with pipelines.engine.connect() as conn:
        pipeline_ids = conn.execute(
            select(runs_table.c.pipeline_id)
            .where(runs_table.c.state.in_(_TERMINAL_RUNS))
            .group_by(runs_table.c.pipeline_id)
            .having(func.count() > keep)
        ).scalars().all()
    for pipeline_id in pipeline_ids:
        with pipelines.engine.connect() as conn:
            cutoff = conn.execute(
                select(runs_table.c.logical_date)
                .where(runs_table.c.pipeline_id == pipeline_id, runs_table.c.state.in_(_TERMINAL_RUNS))
                .order_by(runs_table.c.logical_date.desc())
                .offset(keep - 1)
                .limit(1)
            ).scalar()
        if cutoff is None:
            continue
        while True:
            with pipelines.engine.begin() as conn:
                old = conn.execute(
                    select(runs_table.c.id)
                    .where(
                        runs_table.c.pipeline_id == pipeline_id,
                        runs_table.c.state.in_(_TERMINAL_RUNS),
                        runs_table.c.logical_date < cutoff,
                    )
                    .limit(BATCH)
                ).scalars().all()
                if old:
                    conn.execute(delete(attempts_table).where(attempts_table.c.run_id.in_(old)))
                    conn.execute(delete(runs_table).where(runs_table.c.id.in_(old), runs_table.c.state.in_(_TERMINAL_RUNS)))
            total += len(old)
            if len(old) < BATCH:
                break
    return total


@dataclass
class RetentionReport:
    """What one pass deleted."""

    jobs: int = 0
    runs: int = 0


class RetentionTask:
    """Runs :meth:`run_once` every ``interval_s`` seconds in the service.

    Parameters
    ----------
    store
        The job store.
    pipelines
        The pipeline store, whose run history is bounded.
    retention_days
        Terminal jobs that finished longer ago are deleted; None keeps every job.
    runs_kept
        Finished runs kept per pipeline; None keeps all.
    interval_s
        Seconds between passes. Every replica may run them: each statement is idempotent.
    clock
        Returns the current aware time.
    """

    def __init__(
        self,
        store: JobStore,
        pipelines: PipelineStore,
        *,
        retention_days: float | None,
        runs_kept: int | None,
        interval_s: float,
        clock: Clock = utc_now,
    ) -> None:
        self.store = store
        self.pipelines = pipelines
        self.retention_days = retention_days
        self.runs_kept = runs_kept
        self.interval_s = interval_s
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.retention_days is not None or self.runs_kept is not None

    def run_once(self) -> RetentionReport:
        """One pass (blocking: call from a thread)."""
        report = RetentionReport()
        if self.retention_days is not None:
            report.jobs = prune_jobs(self.store, utc(self.clock()) - timedelta(days=self.retention_days))
        if self.runs_kept is not None:
            report.runs = prune_runs(self.pipelines, self.runs_kept)
        return report

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._loop(), name="spillway-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                report = await asyncio.to_thread(self.run_once)
                if report.jobs or report.runs:
                    log.info("retention: deleted %d job(s) and %d pipeline run(s)", report.jobs, report.runs)
            except Exception:  # noqa: BLE001 - the loop must outlive a bad pass (e.g. the database restarting)
                log.exception("retention pass failed")
            await asyncio.sleep(self.interval_s)

