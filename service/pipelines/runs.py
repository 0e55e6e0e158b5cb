"""Runs and their job attempts in the database.

Races between scheduler instances are settled by the database, not by memory:

- a run is an INSERT that loses quietly on the unique (pipeline, logical date) key;
- a claim (QUEUED or due retry → RUNNING, with a new attempt row) first bumps the
  pipeline row, whose lock serializes claimers, so ``max_active_runs`` holds across
  instances; an attempt row is unique per (run, attempt number);
- every state change is a conditional UPDATE, so only one instance acts on an outcome.

Each transaction starts with a write: on SQLite a write first takes the lock (waiting
on busy_timeout) before it reads, so no transaction works from a stale snapshot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection, Engine

from spillway.jobs.status import JobStatus
from spillway.service.pipelines.models import ACTIVE_RUN_STATES, AttemptView, RunState, RunTrigger, RunView
from spillway.service.pipelines.tables import attempts_table, aware, insert_unless_exists, pipelines_table, runs_table, utc

SUBMITTING = "SUBMITTING"
_OPEN_ATTEMPT_STATES = (SUBMITTING, JobStatus.PENDING.value, JobStatus.RUNNING.value)
_ACTIVE = [s.value for s in ACTIVE_RUN_STATES]


@dataclass(frozen=True)
class NewRun:
    """A run to create: its key, its state and, unless SKIPPED, the rendered spec."""

    logical_date: datetime
    data_interval_end: datetime
    state: RunState
    trigger: RunTrigger
    version: int
    params: dict[str, Any]
    spec: dict[str, Any] | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Attempt:
    """A job attempt that is not finished, with what is needed to submit or settle it."""

    id: int
    run_id: int
    run_uid: str
    attempt: int
    job_id: str | None
    state: str
    created_at: datetime
    spec: dict[str, Any]
    pipeline_id: int

    @property
    def idempotency_key(self) -> str:
        """The same key for every submission of this attempt: a resubmission after a crash finds the job."""
        return f"pipeline-run:{self.run_uid}:{self.attempt}"


class RunStore:
    """Reads and writes runs and attempts; made by :class:`~service.pipelines.store.PipelineStore`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _values(self, pipeline_id: int, run: NewRun, now: datetime) -> dict[str, Any]:
        terminal = run.state.is_terminal()
        return {
            "uid": uuid.uuid4().hex,
            "pipeline_id": pipeline_id,
            "logical_date": utc(run.logical_date),
            "data_interval_end": utc(run.data_interval_end),
            "state": run.state.value,
            "trigger": run.trigger.value,
            "version": run.version,
            "params": run.params,
            "spec": run.spec,
            "reason": run.reason,
            "created_at": now,
            "finished_at": now if terminal else None,
        }

    def insert(self, pipeline_id: int, runs: list[NewRun], *, now: datetime, through: datetime | None = None) -> list[bool]:
        """Create runs, skipping keys that exist; with ``through``, also advance the
        pipeline's schedule watermark, in the same transaction. Returns which were created."""
        now = utc(now)
        with self.engine.begin() as conn:
            created = [
                insert_unless_exists(conn, runs_table, self._values(pipeline_id, run, now), ["pipeline_id", "logical_date"])
                for run in runs
            ]
            if through is not None:
                conn.execute(
                    update(pipelines_table)
                    .where(pipelines_table.c.id == pipeline_id, pipelines_table.c.scheduled_through < utc(through))
                    .values(scheduled_through=utc(through))
                )
        return created

    def claim(self, pipeline_id: int, max_active: int, *, now: datetime, limit: int = 100) -> list[Attempt]:
        """Start retries due at ``now`` and, while slots are free, the oldest QUEUED runs:
        each gets a new SUBMITTING attempt. The caller submits their jobs."""
        now = utc(now)
        runs = runs_table.c
        claimed: list[int] = []
        with self.engine.begin() as conn:
            conn.execute(
                update(pipelines_table)
                .where(pipelines_table.c.id == pipeline_id)
                .values(claim_seq=pipelines_table.c.claim_seq + 1)
            )
            retries = conn.execute(
                select(runs.id)
                .where(runs.pipeline_id == pipeline_id, runs.state == RunState.UP_FOR_RETRY.value, runs.next_attempt_at <= now)
                .order_by(runs.logical_date)
                .limit(limit)
            ).scalars().all()
            claimed += [run_id for run_id in retries if self._claim_one(conn, run_id, RunState.UP_FOR_RETRY, now)]
            active = conn.execute(
                select(func.count()).select_from(runs_table).where(runs.pipeline_id == pipeline_id, runs.state.in_(_ACTIVE))
            ).scalar_one()
            free = min(max_active - int(active), limit)
            if free > 0:
                queued = conn.execute(
                    select(runs.id)
                    .where(runs.pipeline_id == pipeline_id, runs.state == RunState.QUEUED.value)
                    .order_by(runs.logical_date)
                    .limit(free)
                ).scalars().all()
                claimed += [run_id for run_id in queued if self._claim_one(conn, run_id, RunState.QUEUED, now)]
            return _attempts(conn, attempts_table.c.run_id.in_(claimed), attempts_table.c.state == SUBMITTING)

    def _claim_one(self, conn: Connection, run_id: int, from_state: RunState, now: datetime) -> bool:
        moved = conn.execute(
            update(runs_table)
            .where(runs_table.c.id == run_id, runs_table.c.state == from_state.value)
            .values(state=RunState.RUNNING.value, next_attempt_at=None, started_at=func.coalesce(runs_table.c.started_at, now))
        )
        if moved.rowcount != 1:
            return False
        previous = conn.execute(select(func.max(attempts_table.c.attempt)).where(attempts_table.c.run_id == run_id)).scalar()
        # A plain INSERT: should (run, attempt) ever exist, the whole claim rolls back
        # rather than leave a RUNNING run without an attempt.
        conn.execute(attempts_table.insert().values(run_id=run_id, attempt=int(previous or 0) + 1, state=SUBMITTING, created_at=now))
        return True

    def open_attempts(self) -> list[Attempt]:
        """Attempts being submitted or whose job has not finished, oldest first."""
        with self.engine.connect() as conn:
            return _attempts(conn, attempts_table.c.state.in_(_OPEN_ATTEMPT_STATES))

    def attach_job(self, attempt: Attempt, job_id: str) -> None:
        """Record the job an attempt submitted (SUBMITTING → PENDING)."""
        with self.engine.begin() as conn:
            conn.execute(
                update(attempts_table)
                .where(attempts_table.c.id == attempt.id, attempts_table.c.state == SUBMITTING)
                .values(job_id=job_id, state=JobStatus.PENDING.value)
            )

    def mark_running(self, attempt: Attempt) -> None:
        """The attempt's job started."""
        with self.engine.begin() as conn:
            conn.execute(
                update(attempts_table)
                .where(attempts_table.c.id == attempt.id, attempts_table.c.state.in_(_OPEN_ATTEMPT_STATES))
                .values(state=JobStatus.RUNNING.value)
            )

    def settle(
        self,
        attempt: Attempt,
        outcome: JobStatus,
        *,
        now: datetime,
        error: str | None = None,
        result_location: str | None = None,
        retries: int = 0,
        backoff_s: float = 0.0,
    ) -> RunState | None:
        """Close an attempt with its job's terminal state and move the run accordingly.

        A FAILED attempt with retries left puts the run UP_FOR_RETRY after
        ``backoff_s * 2**(attempt-1)`` seconds. Returns the run's new state, or None
        when another scheduler settled this attempt first.
        """
        now = utc(now)
        with self.engine.begin() as conn:
            closed = conn.execute(
                update(attempts_table)
                .where(attempts_table.c.id == attempt.id, attempts_table.c.state.in_(_OPEN_ATTEMPT_STATES))
                .values(state=outcome.value, error=error, finished_at=now)
            )
            if closed.rowcount != 1:
                return None
            values: dict[str, Any] = {"reason": error}
            if outcome == JobStatus.FAILED and attempt.attempt <= retries:
                values |= {"state": RunState.UP_FOR_RETRY.value, "next_attempt_at": now + timedelta(seconds=backoff_s * 2 ** (attempt.attempt - 1))}
            else:
                to = {JobStatus.SUCCEEDED: RunState.SUCCEEDED, JobStatus.CANCELLED: RunState.CANCELLED}.get(outcome, RunState.FAILED)
                values |= {"state": to.value, "finished_at": now, "result_location": result_location}
            conn.execute(
                update(runs_table).where(runs_table.c.id == attempt.run_id, runs_table.c.state == RunState.RUNNING.value).values(**values)
            )
        return RunState(values["state"])

    def list(self, pipeline_id: int, pipeline: str, *, state: RunState | None = None, limit: int = 50, offset: int = 0) -> tuple[list[RunView], int]:
        """A page of a pipeline's runs, newest logical date first, and the total matching."""
        where = [runs_table.c.pipeline_id == pipeline_id]
        if state is not None:
            where.append(runs_table.c.state == state.value)
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(runs_table).where(*where)).scalar_one()
            query = select(runs_table).where(*where).order_by(runs_table.c.logical_date.desc()).limit(limit).offset(offset)
            return _views(conn, query, pipeline), int(total)

    def get(self, pipeline_id: int, pipeline: str, logical_date: datetime) -> RunView | None:
        """The run of one key, if any."""
        query = select(runs_table).where(runs_table.c.pipeline_id == pipeline_id, runs_table.c.logical_date == utc(logical_date))
        with self.engine.connect() as conn:
            views = _views(conn, query, pipeline)
        return views[0] if views else None


def _attempts(conn: Connection, *where: Any) -> list[Attempt]:
    query = (
        select(attempts_table, runs_table.c.uid, runs_table.c.spec, runs_table.c.pipeline_id)
        .join(runs_table, runs_table.c.id == attempts_table.c.run_id)
        .where(*where)
        .order_by(attempts_table.c.id)
    )
    return [
        Attempt(
            id=r["id"],
            run_id=r["run_id"],
            run_uid=r["uid"],
            attempt=r["attempt"],
            job_id=r["job_id"],
            state=r["state"],
            created_at=aware(r["created_at"]),  # type: ignore[arg-type]
            spec=r["spec"],
            pipeline_id=r["pipeline_id"],
        )
        for r in conn.execute(query).mappings().all()
    ]


def _views(conn: Connection, query: Any, pipeline: str) -> list[RunView]:
    rows = conn.execute(query).mappings().all()
    attempts = conn.execute(
        select(attempts_table).where(attempts_table.c.run_id.in_([r["id"] for r in rows])).order_by(attempts_table.c.attempt)
    ).mappings().all()
    by_run: dict[int, list[AttemptView]] = {}
    for a in attempts:
        by_run.setdefault(a["run_id"], []).append(
            AttemptView(
                attempt=a["attempt"],
                job_id=a["job_id"],
                state=a["state"],
                created_at=aware(a["created_at"]),  # type: ignore[arg-type]
                finished_at=aware(a["finished_at"]),
                error=a["error"],
            )
        )
    return [_view(r, pipeline, by_run.get(r["id"], [])) for r in rows]


def _view(row: Any, pipeline: str, attempts: list[AttemptView]) -> RunView:
    start = aware(row["logical_date"])
    return RunView(
        id=row["id"],
        pipeline=pipeline,
        logical_date=start,  # type: ignore[arg-type]
        data_interval_start=start,  # type: ignore[arg-type]
        data_interval_end=aware(row["data_interval_end"]),  # type: ignore[arg-type]
        state=RunState(row["state"]),
        trigger=RunTrigger(row["trigger"]),
        version=row["version"],
        params=row["params"] or {},
        reason=row["reason"],
        created_at=aware(row["created_at"]),  # type: ignore[arg-type]
        started_at=aware(row["started_at"]),
        finished_at=aware(row["finished_at"]),
        next_attempt_at=aware(row["next_attempt_at"]),
        result_location=row["result_location"],
        attempts=attempts,
    )
