"""Runs jobs on the cluster: a FIFO queue, a concurrency limit, progress, cancel, recovery.

No HTTP here. The manager owns the path PENDING → RUNNING → terminal; the store's
conditional updates guarantee nothing leaves a terminal state. The queue is the database:
replicas of the service on one database each claim the oldest PENDING job
(:meth:`service.store.JobStore.claim_next`), so each job runs on exactly one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import polars as pl
from distributed.client import FutureCancelledError, FuturesCancelledError

from spillway.cluster.factory import ClusterHandle
from spillway.cluster.gpu_sampler import GpuSampler
from spillway.cluster.gpu_gate import GpuGate
from spillway.cluster.hung_workers import restart_silent_workers, silent_workers, stopped_workers
from spillway.cluster.info import RunningJob
from spillway.cluster.job_logs import JobLog
from spillway.cluster import polars_job
from spillway.cluster.plan import plan_job
from spillway.cluster.planning import PlanningCancelled, PlanningTimedOut, run_planning, stop_planning
from spillway.cluster.progress import JobProgressPlugin, plugin_name
from spillway.cluster.rank_progress import RankFollower
from spillway.jobs.dask_read import check_partitions
from spillway.jobs.engine_choice import EngineName, choose_engine
from spillway.jobs.gpu_multi import MULTI_GPU_NOTE, MULTI_GPU_TRACE_NOTE, MultiGpuEngines, MultiGpuResult, run_across_gpus
from spillway.jobs.gpu_placement import GpuPlacement, across_gpus, device_limit_bytes, place_on_gpu
from spillway.jobs.gpu_support import settle_on_gpu, untrusted_on_gpu
from spillway.jobs import ir
from spillway.jobs.errors import (CsvScanMiscount, DatetimeOutOfRange, DivisionByZero, IntegerOverflow, InvalidTransition, SpillwayError,
                                  SqlFailed, TextNotParsed, TooManyPartitions)
from spillway.jobs.expr import shorten
from spillway.jobs.lower_pandas import INT64_MAX, INT64_MIN
from spillway.jobs.lower_polars import INT64_OVERFLOW, SENTINEL_TYPES, has_integer_arithmetic
from spillway.jobs.pandas_functions import DATETIME_OUT_OF_RANGE
from spillway.jobs.pandas_numbers import DIVISION_BY_ZERO
from spillway.jobs.time_functions import STRPTIME_MISMATCH
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.polars_io import csv_miscount
from spillway.jobs.read_progress import SourceRead, source_reads
from spillway.jobs.sandbox import check_paths, enforce_roots
from spillway.jobs.sink import SinkWriter
from spillway.jobs.sources import files_listed_once
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import PROGRESS_TOPIC, EngineChoice, ErrorDetail, JobProgress, JobStatus, ResultManifest, StageProgress
from spillway.jobs.validate import plan_spec

if TYPE_CHECKING:
    from spillway.jobs.polars_io import OutputTarget
    from spillway.service.schemas import JobView
    from spillway.service.store import JobStore

log = logging.getLogger(__name__)
T = TypeVar("T")

INTERRUPTED = "interrupted"
CLUSTER_LOST = "cluster_lost"
TIMED_OUT = "timed_out"
#: A multi-GPU job one of whose ranks was stopped (SIGSTOP) for ``hung_worker_s``.
WORKER_HUNG = "worker_hung"
#: A multi-GPU job whose ranks logged no trace event for ``multi_gpu_stall_s``.
QUERY_STALLED = "query_stalled"
SWEEP_DELAYS_S = (1.0, 4.0, 30.0)
#: How long a restart of the workers running a stopped job may take before it is logged and left to the nanny.
RESTART_TIMEOUT_S = 60.0


class JobMetrics(Protocol):
    """What the manager reports to the metrics layer."""

    def partitions_done(self, count: int) -> None: ...

    def job_started(self, job: JobView) -> None: ...

    def job_finished(self, job: JobView) -> None: ...


class _NoMetrics:
    def partitions_done(self, count: int) -> None:
        pass

    def job_started(self, job: JobView) -> None:
        pass

    def job_finished(self, job: JobView) -> None:
        pass


class _JobCancelled(Exception):
    pass


class _NoLongerOurs(SpillwayError):
    """At its commit, the job is no longer this replica's: another took this one for dead and settled it."""

    code = INTERRUPTED


class _JobTimedOut(Exception):
    pass


def key_text(key: Any) -> str:
    """A task key as text, the same whether it arrives as a tuple or, through msgpack, as a list."""
    return str(tuple(key)) if isinstance(key, (list, tuple)) else str(key)


@dataclass
class _ActiveJob:
    job_id: str
    writer: SinkWriter
    progress: JobProgress = field(default_factory=JobProgress)
    futures: list[Any] = field(default_factory=list)
    cancel_requested: bool = False
    #: Set with cancel_requested: a planning thread is interrupted when it is.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    #: The event loop's time by which the job's planning must be done.
    planning_deadline: float | None = None
    committing: bool = False
    committed: bool = False
    #: The job's run timeout, turned off once its commit starts.
    deadline: asyncio.Timeout | None = None
    gpu: GpuSampler | None = None
    engine: EngineChoice | None = None
    #: Bytes cudf-polars' streaming executor spilled device → host (a GPU job placed on it).
    streaming_spilled_bytes: int | None = None
    #: The job's task keys (as :func:`key_text` writes them), to find the workers running them.
    task_keys: frozenset[str] = frozenset()
    #: A job across every GPU worker (cudf-polars' DaskEngine): the workers its ranks run on.
    across_workers: list[str] = field(default_factory=list)
    #: Being failed by the service (a stopped rank, a stalled query) before its workers restart.
    failing: bool = False
    log: JobLog = field(default_factory=JobLog)
    plugin_ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: The job's tasks are done and its progress final: progress events arriving later are stale.
    progress_final: bool = False
    #: The workers restarted to stop the job's tasks: gone with their logs (and slow to answer while they restart).
    restarted: set[str] = field(default_factory=set)
    #: The job's terminal state is recorded: what a cancel waits for (not the worker logs collected after it).
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class _PolarsQuery:
    """A Polars job as planned: its query, where it writes, what it reads (for progress) and, on the GPU, where it runs."""

    frame: pl.LazyFrame
    target: OutputTarget
    reads: list[SourceRead]
    placement: GpuPlacement | None


class JobManager:
    """Queues jobs in submission order and runs up to ``max_concurrent`` at once.

    Parameters
    ----------
    store
        Where jobs live.
    cluster
        The cluster handle jobs run on.
    max_concurrent
        Jobs running at once; the rest wait in submission order.
    max_partitions
        Most tasks one job's graph may have; a bigger job fails before it runs. A Dask-engine
        job whose sources alone would be read as more partitions (estimated from the files'
        sizes and blocksize) fails before its graph is built.
    max_planning_s
        Seconds a job's planning (checking its spec against the sources, building its query
        or graph) may take; past it the job fails as ``planning_timed_out``. Planning runs in a
        thread of its own, which this limit, a cancel and a shutdown interrupt.
    max_running_per_owner
        Most jobs one token may have running; its others wait (keeping their place)
        while other tokens' jobs go ahead. None: no per-token limit.
    progress_interval
        Seconds between progress writes to the store while a job runs.
    metrics
        Receives partition counts and job durations.
    default_engine
        The engine for specs that name none: ``auto``, ``polars`` or ``dask``.
    default_timeout_s
        Seconds a job whose spec sets no ``timeout_s`` may run before it fails as timed out.
    hung_worker_s
        A worker that sends no heartbeat for this long while jobs run is taken to be hung and
        restarted (cluster/hung_workers.py); its tasks run again elsewhere. 0: never.
    multi_gpu_stall_s
        A job across the GPU workers whose ranks' trace events stop for this long fails as
        ``query_stalled`` and its workers restart (cluster/rank_progress.py). 0: never.
    allowed_roots
        The data roots. A job's paths are checked against them again when it starts, its
        sources' files as they are listed, and its sink's parent at the commit (a link may have
        been swapped in while it queued): one outside fails the job as ``path_not_allowed``.
        None: no check here.
    replica_id
        This replica's id, recorded on the jobs it claims (see :mod:`service.replicas`).
    poll_interval_s
        Seconds between looks at the database for jobs queued on other replicas and for cancels
        asked there of jobs running here. A job queued on this replica wakes a runner at once.
    """

    def __init__(
        self,
        store: JobStore,
        cluster: ClusterHandle,
        *,
        max_concurrent: int = 2,
        progress_interval: float = 0.5,
        max_partitions: int = 100_000,
        max_planning_s: float = 600.0,
        max_running_per_owner: int | None = None,
        metrics: JobMetrics | None = None,
        default_engine: EngineName = "auto",
        default_timeout_s: float = 86_400.0,
        hung_worker_s: float = 60.0,
        multi_gpu_stall_s: float = 1800.0,
        allowed_roots: list[str] | None = None,
        replica_id: str = "local",
        poll_interval_s: float = 1.0,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.max_concurrent = max_concurrent
        self.progress_interval = progress_interval
        self.max_partitions = max_partitions
        self.max_planning_s = max_planning_s
        self.max_running_per_owner = max_running_per_owner
        self.metrics = metrics or _NoMetrics()
        self.default_engine: EngineName = default_engine
        self.default_timeout_s = default_timeout_s
        self.hung_worker_s = hung_worker_s
        self._stopped_since: dict[str, float] = {}  # a multi-GPU rank seen stopped: since when (loop time)
        self.multi_gpu_stall_s = multi_gpu_stall_s
        self.allowed_roots = allowed_roots
        self.replica_id = replica_id
        self.poll_interval_s = poll_interval_s
        self._changed = asyncio.Condition()
        # Counts wake-ups, so that a runner that found nothing to claim misses none that came meanwhile.
        self._wakeups = 0
        self._active: dict[str, _ActiveJob] = {}
        self._device_limit_of: tuple[ClusterHandle, int | None] | None = None
        self._runners: list[asyncio.Task[None]] = []
        self._watch: asyncio.Task[None] | None = None
        self._poll: asyncio.Task[None] | None = None
        self._sweeps: set[asyncio.Task[None]] = set()
        self._gpu_gate = GpuGate()
        self._multi_gpu = MultiGpuEngines()

    @property
    def running_count(self) -> int:
        return len(self._active)

    async def start(self) -> None:
        """Settle the jobs dead replicas left RUNNING, then start the runners (PENDING jobs wait in the database)."""
        await self.recover_orphans()
        self.cluster.client.subscribe_topic(PROGRESS_TOPIC, self._on_progress)
        self._runners = [asyncio.create_task(self._runner(), name=f"spillway-runner-{i}") for i in range(self.max_concurrent)]
        self._poll = asyncio.create_task(self._poll_database(), name="spillway-queue-poll")
        if self.hung_worker_s > 0:
            self._watch = asyncio.create_task(self._watch_hung_workers(), name="spillway-hung-workers")

    async def recover_orphans(self) -> int:
        """Settle every RUNNING job that no live replica runs (see :meth:`_recover`); how many.

        Only jobs whose replica's heartbeat row is gone (or that predate replicas) are touched,
        never those another live replica is running. Several replicas may do this at once: each
        settle is a conditional update, which one of them wins.
        """
        orphans = await asyncio.to_thread(self.store.replicas.running_orphans)
        for job_id in orphans:
            if job_id not in self._active:
                await self._recover(await asyncio.to_thread(self.store.get, job_id))
        return len(orphans)

    async def abandon_running(self, reason: str) -> None:
        """Fail this replica's running jobs as interrupted and stop their tasks: the others took it for dead.

        Their jobs may already have been settled by another replica; a job must not then commit here.
        """
        for active in list(self._active.values()):
            if active.committing:
                continue
            active.log.add(f"{self._now()} {reason}")
            await self._fail(active.job_id, INTERRUPTED, reason, active.progress)
            # In the background: a worker restart can take longer than a heartbeat, which must go on.
            self._stop_in_background(active, reason)

    def _stop_in_background(self, active: _ActiveJob, reason: str) -> None:
        """Mark ``active`` cancelled and stop its tasks in the background.

        A job across the GPU workers holds the multi-GPU engine first, here and not in the task: the job ends as
        soon as it sees the cancel, and the next job must not get that engine while its workers restart.
        """
        restart = active.engine is not None and active.engine.engine == "polars"
        held = restart and bool(active.across_workers)
        if held:
            self._multi_gpu.hold()
        active.cancel_requested = True
        active.cancelled.set()
        self._spawn(self._stop_quietly(active, reason, restart=restart, held=held))

    async def _stop_quietly(self, active: _ActiveJob, reason: str, *, restart: bool, held: bool) -> None:
        try:
            await self._stop_tasks(active, reason, restart=restart, held=held)
        except Exception as exc:  # noqa: BLE001 - the job is failed whatever the cluster says
            log.warning("job %s: could not stop its tasks: %s: %s", active.job_id, type(exc).__name__, exc)

    async def _recover(self, job: JobView) -> None:
        """Settle a job a dead replica (or this one's previous run) left RUNNING: SUCCEEDED if its
        commit had landed, else FAILED interrupted.

        A service killed after the sink's commit and before recording it leaves a sink whose
        manifest lists this job's files: that commit is the job's result, not a ghost.
        """
        writer = SinkWriter(job.spec.sink, job.id)
        try:
            manifest = await asyncio.to_thread(writer.recover)
        except Exception as exc:  # noqa: BLE001 - an unreachable sink: the job cannot be shown to have committed
            log.warning("job %s: could not inspect its sink at restart (%s: %s)", job.id, type(exc).__name__, exc)
            manifest = None
        if manifest is not None:
            if not await asyncio.to_thread(self.store.finish, job.id, JobStatus.SUCCEEDED, progress=job.progress, result=manifest):
                return  # another replica settled it first
            line = (f"the service stopped after this job committed (sink version {manifest.version}, {manifest.total_rows} rows) "
                    "and before it recorded that: recognised at restart from the sink's manifest; SUCCEEDED")
            await asyncio.to_thread(self.store.save_logs, job.id, [f"{self._now()} {line}"])
            log.warning("job %s: %s", job.id, line)
            return
        where = f" (replica {job.replica})" if job.replica else ""
        error = ErrorDetail(code=INTERRUPTED, message=f"the service{where} stopped while this job ran; nothing was committed")
        if not await asyncio.to_thread(self.store.finish, job.id, JobStatus.FAILED, progress=job.progress, error=error):
            return
        log.warning("job %s was running when its service%s stopped: marked FAILED (interrupted)", job.id, where)
        # Its tasks may still be finishing on a cluster that outlived the service.
        self._sweeps.add(asyncio.create_task(self._sweep_staging(writer)))

    def replace_cluster(self, cluster: ClusterHandle) -> None:
        """Run new jobs on ``cluster`` (after the old one died)."""
        self.cluster = cluster
        cluster.client.subscribe_topic(PROGRESS_TOPIC, self._on_progress)

    async def stop(self) -> None:
        """Stop the runners; jobs still running are failed as interrupted."""
        watch = [task for task in (self._watch, self._poll) if task is not None]
        for task in [*self._runners, *self._sweeps, *watch]:
            task.cancel()
        await asyncio.gather(*self._runners, *self._sweeps, *watch, return_exceptions=True)
        self._runners, self._watch, self._poll = [], None, None
        await self._discard_multi_gpu_engine()
        # The runners gave up on their jobs' planning; those threads must end before the interpreter does.
        if still := await asyncio.to_thread(stop_planning, 10.0):
            log.warning("%d planning thread(s) still running at stop", still)

    async def _watch_hung_workers(self) -> None:
        """While jobs run, restart workers silent for ``hung_worker_s`` and say so in every running job's log."""
        while True:
            await asyncio.sleep(min(5.0, self.hung_worker_s / 2))
            if not self._active:
                continue
            try:
                # A job across the GPU workers keeps their event loops busy in client.run: silent, not hung.
                spare = frozenset(worker for active in self._active.values() for worker in active.across_workers)
                restarted = await restart_silent_workers(self.cluster.client, self.hung_worker_s, spare=spare)
            except Exception as exc:  # noqa: BLE001 - a cluster being replaced: the supervisor's business, try again next round
                log.debug("hung-worker check failed: %s: %s", type(exc).__name__, exc)
                continue
            try:
                await self._fail_jobs_of_stopped_ranks(sorted(spare))
            except Exception as exc:  # noqa: BLE001 - as above; the silent workers' restarts are still reported below
                log.debug("stopped-rank check failed: %s: %s", type(exc).__name__, exc)
            if restarted:
                message = (f"worker(s) {', '.join(restarted)} sent no heartbeat for {self.hung_worker_s:g} s "
                           "(SPILLWAY_HUNG_WORKER_S): restarted; their tasks run again on the other workers")
                log.warning(message)
                for active in list(self._active.values()):
                    active.log.add(f"{self._now()} {message}")
                await self._discard_multi_gpu_engine()  # it may have had a rank on one of them

    async def _fail_jobs_of_stopped_ranks(self, ranks: list[str]) -> None:
        """Fail a multi-GPU job one of whose ranks has been stopped (SIGSTOP) for ``hung_worker_s``, and restart its workers.

        Its other ranks would wait for the stopped one for as long as the job may run (a day by
        default): the query cannot go on without it, so the job ends as ``worker_hung`` and its
        workers restart, as at a cancel.
        """
        now = asyncio.get_running_loop().time()
        stopped = await stopped_workers(self.cluster.client, ranks) if ranks else []
        self._stopped_since = {worker: self._stopped_since.get(worker, now) for worker in stopped}
        hung = sorted(worker for worker, since in self._stopped_since.items() if now - since >= self.hung_worker_s)
        if not hung:
            return
        for active in list(self._active.values()):
            if not set(hung) & set(active.across_workers):
                continue
            message = (f"GPU worker(s) {', '.join(hung)} of this job's ranks stopped running (their process is stopped, as by "
                       f"SIGSTOP) for {self.hung_worker_s:g} s (SPILLWAY_HUNG_WORKER_S): the query cannot go on without them; "
                       "its workers are restarted and nothing was committed")
            await self._fail_stopped_job(active, WORKER_HUNG, message)
        for worker in hung:
            self._stopped_since.pop(worker, None)

    async def _fail_stopped_job(self, active: _ActiveJob, code: str, message: str) -> None:
        """Fail a multi-GPU job that cannot go on (``code``, ``message``), then restart its workers in the background.

        Failed first: the stop marks the job cancelled, and its runner would record CANCELLED. Not
        stopped where it ended first (committed, cancelled), nor twice; tried again next time where
        the failure could not be recorded."""
        if active.committing or active.cancel_requested or active.failing:
            return
        active.failing = True
        try:
            failed = await self._fail(active.job_id, code, message, active.progress)
        except Exception:
            active.failing = False  # the database did not answer: the next check tries again
            raise
        if not failed or active.cancel_requested:
            return
        active.log.add(f"{self._now()} {message}")
        log.warning("job %s: %s", active.job_id, message)
        self._stop_in_background(active, message)

    async def _fail_stalled_quietly(self, active: _ActiveJob, message: str) -> None:
        """:meth:`_fail_stopped_job` as ``query_stalled``, in the background: a failure to record it is logged, and the
        follower asks again after as long once more."""
        try:
            await self._fail_stopped_job(active, QUERY_STALLED, message)
        except Exception as exc:  # noqa: BLE001 - the database did not answer: tried again at the next stall
            log.warning("job %s: could not fail it as stalled: %s: %s", active.job_id, type(exc).__name__, exc)

    def enqueue(self, job_id: str, owner: str | None = None) -> None:
        """Wake the runners for a PENDING job just stored here (it waits behind older ones, on any replica).

        The job is claimed from the database like any other; the wake-up only spares it the
        poll interval. ``owner`` is accepted for the callers' sake: the claim reads it from the row.
        """
        self._wakeups += 1
        asyncio.get_running_loop().create_task(self._notify(1))

    async def _notify(self, runners: int | None = None) -> None:
        """Wake ``runners`` idle runners (None: all) to claim; one per job spares the others an empty claim."""
        async with self._changed:
            self._wakeups += 1
            if runners is None:
                self._changed.notify_all()
            else:
                self._changed.notify(runners)

    async def _poll_database(self) -> None:
        """Wake the runners for jobs queued on other replicas; pass on cancels asked there of jobs running here."""
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                if self._active:
                    for job_id in await asyncio.to_thread(self.store.replicas.cancel_requests, self.replica_id):
                        active = self._active.get(job_id)
                        if active is not None and not active.cancel_requested:
                            log.info("job %s: cancel asked on another replica", job_id)
                            self._spawn(self._cancel_quietly(job_id))
                if len(self._active) < self.max_concurrent and await asyncio.to_thread(self.store.has_pending):
                    await self._notify()
            except Exception as exc:  # noqa: BLE001 - the database restarting: look again next round
                log.warning("queue poll failed: %s: %s", type(exc).__name__, exc)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._sweeps.add(task)  # stopped with the sweeps at stop()
        task.add_done_callback(self._sweeps.discard)

    async def _cancel_quietly(self, job_id: str) -> None:
        try:
            await self.cancel(job_id)
        except InvalidTransition:  # it finished first
            pass

    async def cancel(self, job_id: str, *, timeout: float = 30.0) -> JobView:
        """Cancel a pending or running job; returns it once it is terminal (or after ``timeout``).

        Raises
        ------
        JobNotFound
            No such job.
        InvalidTransition
            The job already finished.
        """
        job = await asyncio.to_thread(self.store.get, job_id)
        if job.state.is_terminal():
            raise InvalidTransition(f"job {job_id} is already {job.state.value}; only PENDING or RUNNING jobs can be cancelled")
        if job.state == JobStatus.PENDING and await asyncio.to_thread(self.store.transition, job_id, JobStatus.CANCELLED):
            return await asyncio.to_thread(self.store.get, job_id)
        active = self._active.get(job_id)
        if active is None:
            if await asyncio.to_thread(self.store.replicas.request_cancel, job_id, asked_on=self.replica_id):
                # Another live replica runs it: the request is in the job's row, which that replica polls.
                return await self._wait_cancelled(job_id, timeout)
            # RUNNING in the store but on no live replica, nor here: its runner is gone, so cancel outright.
            await asyncio.to_thread(self.store.finish, job_id, JobStatus.CANCELLED)
        else:
            if not active.committing:
                # A running Polars query cannot be interrupted: its worker is restarted. Dask-engine tasks finish in their threads.
                # In the background: the job ends once its tasks are cancelled, and a restart on a busy machine can outlast
                # this request (a client's cancel timed out after 120 s).
                self._stop_in_background(active, "cancelled by user")
                await self._gpu_gate.wake()  # a job waiting for the GPU workers stops waiting
            try:
                await asyncio.wait_for(active.stopped.wait(), timeout)
            except TimeoutError:
                log.warning("job %s did not stop within %.0f s of cancel", job_id, timeout)
        job = await asyncio.to_thread(self.store.get, job_id)
        if job.state.is_terminal() and job.state != JobStatus.CANCELLED:
            raise InvalidTransition(f"job {job_id} finished as {job.state.value} before it could be cancelled")
        return job

    async def _wait_cancelled(self, job_id: str, timeout: float) -> JobView:
        """The job once another replica ended it (or after ``timeout``), as :meth:`cancel` returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        job = await asyncio.to_thread(self.store.get, job_id)
        while not job.state.is_terminal() and loop.time() < deadline:
            await asyncio.sleep(min(0.2, self.poll_interval_s))
            job = await asyncio.to_thread(self.store.get, job_id)
        if not job.state.is_terminal():
            log.warning("job %s did not stop within %.0f s of cancel (it runs on replica %s)", job_id, timeout, job.replica)
        elif job.state != JobStatus.CANCELLED:
            raise InvalidTransition(f"job {job_id} finished as {job.state.value} before it could be cancelled")
        return job

    async def _stop_tasks(self, active: _ActiveJob, reason: str, *, restart: bool, silent_s: float | None = None, held: bool = False) -> None:
        """Cancel the job's tasks; with ``restart``, also restart the workers running them.

        A running task cannot be interrupted (a Polars query, a task on a hung worker): only
        restarting its worker stops it. With ``silent_s``, workers without a heartbeat for that
        long are restarted too. The workers are found before the cancel, which forgets the
        tasks, and restarted after it, so that the scheduler does not start them again elsewhere.
        ``held``: the caller has already held the multi-GPU engine for this stop (released here).
        """
        across = restart and bool(active.across_workers)
        if across and not held:  # before any await: the next job must not get the engine of workers about to restart
            self._multi_gpu.hold()
        try:
            await self._restart_for(active, reason, restart=restart, silent_s=silent_s)
        finally:
            try:
                if across:
                    await self._discard_multi_gpu_engine()
            finally:
                if across or held:
                    self._multi_gpu.release()

    async def _restart_for(self, active: _ActiveJob, reason: str, *, restart: bool, silent_s: float | None) -> None:
        client = self.cluster.client
        keys = [future.key for future in active.futures]
        workers: list[str] = []
        if restart and (keys or silent_s is not None):
            workers = await client.run_on_scheduler(_workers_to_restart, keys=keys, silent_s=silent_s)
        if restart and active.across_workers:  # its ranks run in client.run: restarting them is the only stop
            workers = sorted({*workers, *active.across_workers})
        if active.futures:
            await client.cancel(active.futures, force=True, reason=reason)
        if workers:
            active.restarted.update(workers)
            log.info("job %s: restarting worker(s) %s to stop its running tasks (%s)", active.job_id, ", ".join(workers), reason)
            active.log.add(f"{self._now()} {reason}: restarting worker(s) {', '.join(workers)}")
            restarted = await client.restart_workers(workers, timeout=RESTART_TIMEOUT_S, raise_for_error=False)
            late = sorted(worker for worker, status in (restarted or {}).items() if status != "OK")
            if late:
                log.warning("job %s: worker(s) %s did not restart within %.0f s (%s)", active.job_id, ", ".join(late), RESTART_TIMEOUT_S, reason)

    async def _discard_multi_gpu_engine(self) -> None:
        """Drop the kept DaskEngine (its workers restarted, or the service stopping); bounded, as its workers may be gone."""
        try:
            await asyncio.wait_for(asyncio.to_thread(self._multi_gpu.discard), 30.0)
        except TimeoutError:
            log.warning("the multi-GPU engine did not shut down within 30 s; a new one starts with the next such job")

    async def _runner(self) -> None:
        while True:
            seen = self._wakeups
            try:
                job = await asyncio.to_thread(self.store.claim_next, self.replica_id, max_running_per_owner=self.max_running_per_owner)
            except Exception as exc:  # noqa: BLE001 - the database unreachable: the poll wakes us when it answers
                log.warning("claiming a job failed: %s: %s", type(exc).__name__, exc)
                job = None
            if job is None:
                async with self._changed:
                    await self._changed.wait_for(lambda: self._wakeups != seen)
                continue
            try:
                await self._run(job)
            except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                raise
            except BaseException:  # noqa: BLE001 - a bug here, or a stray BaseException, must not end the runner
                log.exception("job %s: unexpected error in the runner", job.id)
            finally:
                await self._notify(1)  # a slot is free, and an owner may be under its limit again

    async def _run(self, job: JobView) -> None:
        """Run a job this replica claimed (it is RUNNING here) to a terminal state."""
        job_id = job.id
        self.metrics.job_started(job)
        log.info("job %s (%s): running on %s", job_id, job.name, self.cluster.backend)
        active = _ActiveJob(job_id, SinkWriter(job.spec.sink, job_id, allowed_roots=self.allowed_roots))
        self._active[job_id] = active
        active.log.add(f"{self._now()} RUNNING on {self.cluster.kind} ({self.cluster.backend})")
        flusher = asyncio.create_task(self._flush_progress(active))
        if self.cluster.backend == "cudf":
            active.gpu = GpuSampler(self.cluster.gpu_stats, self.progress_interval)
            active.gpu.start()
        timeout_s = job.spec.timeout_s or self.default_timeout_s
        try:
            await self._execute_within(job, active, timeout_s)
        except asyncio.CancelledError:
            if active.committed:  # the stop waited for the commit to land and be recorded
                raise
            active.writer.abort()
            await asyncio.shield(self._fail(job_id, INTERRUPTED, "the service stopped while this job ran; nothing was committed", active.progress))
            raise
        except _JobTimedOut:
            whose = "its spec's timeout_s" if job.spec.timeout_s else "the service's default, SPILLWAY_DEFAULT_JOB_TIMEOUT_S"
            try:
                await self._stop_tasks(active, "timed out", restart=True, silent_s=SILENT_WORKER_S)
            except Exception as exc:  # noqa: BLE001 - the job fails as timed out whatever the cluster says
                log.warning("job %s: could not stop its tasks after its timeout: %s: %s", job_id, type(exc).__name__, exc)
            active.writer.abort()
            message = (f"the job ran for more than {timeout_s:g} s ({whose}); its tasks were cancelled and the workers "
                       "running them restarted; nothing was committed")
            active.log.add(f"{self._now()} {message}")
            log.warning("job %s: %s", job_id, message)
            await self._fail(job_id, TIMED_OUT, message, active.progress, field="timeout_s")
            self._sweeps.add(asyncio.create_task(self._sweep_staging(active.writer)))
        except (_JobCancelled, PlanningCancelled, FutureCancelledError, FuturesCancelledError) as exc:
            active.writer.abort()
            if not active.cancel_requested:  # nobody asked: the cluster went away under the job
                await self._fail(job_id, CLUSTER_LOST, f"the cluster was lost while this job ran ({exc}); nothing was committed", active.progress)
                return
            await asyncio.to_thread(self.store.finish, job_id, JobStatus.CANCELLED, progress=active.progress)
            log.info("job %s: cancelled; nothing was committed", job_id)
            self._sweeps.add(asyncio.create_task(self._sweep_staging(active.writer)))
        except SpillwayError as exc:
            active.writer.abort()
            await self._fail(job_id, exc.code, exc.message, active.progress, field=exc.field)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - a task's panic in Rust (pyo3's PanicException) is a BaseException
            # Not caught, it ended this runner: the job stayed RUNNING and the runner's slot was lost.
            active.writer.abort()
            active.log.add_exception(exc)
            log.info("job %s failed: %s: %s", job_id, type(exc).__name__, exc)
            await self._fail(job_id, "job_failed", f"{type(exc).__name__}: {exc}", active.progress)
        finally:
            flusher.cancel()
            try:
                await self._record_resources(active, job_id)
                await self._cleanup(active)
                finished = await asyncio.to_thread(self.store.get, job_id)
                active.log.add(f"{self._now()} {finished.state.value}" + (f": {finished.error.message}" if finished.error else ""))
                active.stopped.set()  # a cancel answers now; the workers' lines follow in the log
                await self._save_log(active, finished)
                self.metrics.job_finished(finished)
            finally:
                active.stopped.set()
                active.finished.set()
                self._active.pop(job_id, None)

    async def _execute_within(self, job: JobView, active: _ActiveJob, seconds: float) -> None:
        """:meth:`_execute` under the job's run timeout, which :meth:`_commit` turns off once it starts.

        Raises
        ------
        _JobTimedOut
            The timeout passed before the commit started.
        """
        try:
            async with asyncio.timeout(seconds) as deadline:
                active.deadline = deadline
                await self._execute(job, active)
        except TimeoutError:
            if not deadline.expired():  # a timeout of something inside the job, not the job's own
                raise
            raise _JobTimedOut() from None

    async def _execute(self, job: JobView, active: _ActiveJob) -> None:
        # Sources' files are resolved and checked as they are listed, by either engine's planning.
        with enforce_roots(self.allowed_roots):
            await self._plan_and_run(job, active)

    async def _planning(self, active: _ActiveJob, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a planning thread, within the job's planning deadline; a cancel interrupts it.

        Raises
        ------
        _JobCancelled
            The job was cancelled meanwhile.
        PlanningTimedOut
            Past the deadline (``max_planning_s`` from the start of planning).
        """
        try:
            return await run_planning(fn, *args, name=f"spillway-plan-{active.job_id}", deadline=active.planning_deadline,
                                      cancelled=active.cancelled)
        except PlanningCancelled:
            active.log.add(f"{self._now()} planning interrupted: cancelled by user")
            raise _JobCancelled() from None
        except PlanningTimedOut:
            active.log.add(f"{self._now()} planning interrupted: past {self.max_planning_s:g} s")
            raise PlanningTimedOut(
                f"the job's planning (checking its spec against the sources, building its query or graph) took more than "
                f"{self.max_planning_s:g} s, the service's limit (SPILLWAY_MAX_PLANNING_S); it was stopped and nothing ran: "
                "use fewer steps or sources, or a larger blocksize"
            ) from None

    async def _plan_and_run(self, job: JobView, active: _ActiveJob) -> None:
        phase = time.perf_counter()
        active.planning_deadline = asyncio.get_running_loop().time() + self.max_planning_s
        # Read before planning, so that all of a Polars job's planning is one thread hop (GPU clusters only).
        device_limit = await self._gpu_device_limit() if self.cluster.backend == "cudf" else None
        logical, choice, query = await self._planning(active, self._plan_query, job, active, device_limit)
        active.engine = choice
        active.log.add(f"{self._now()} engine: {choice.engine} on {choice.device} ({choice.reason})")
        log.info("job %s: %s", job.id, choice.reason)
        if query is not None and choice.engine == "polars":
            await self._execute_polars(job, active, query, logical, phase)
        else:
            await self._execute_dask(job, active, logical, phase)

    def _plan_query(
        self, job: JobView, active: _ActiveJob, device_limit: int | None,
    ) -> tuple[LogicalPlan, EngineChoice, _PolarsQuery | None]:
        """In the job's planning thread (one thread for all of it): the spec checked again against its paths and
        sources as they are now (they may have changed while it queued), its engine, and on Polars its query
        with its output target, its reads and (on the GPU) its placement."""
        with files_listed_once():
            return self._plan_query_listed(job, active, device_limit)

    def _plan_query_listed(
        self, job: JobView, active: _ActiveJob, device_limit: int | None,
    ) -> tuple[LogicalPlan, EngineChoice, _PolarsQuery | None]:
        spec = job.spec
        if self.allowed_roots is not None:  # a link may have been swapped in while the job queued
            check_paths(spec, self.allowed_roots)
        logical = plan_spec(spec)
        choice = choose_engine(spec, self.default_engine, self.cluster.backend)
        if choice.engine == "polars" and choice.device == "gpu":  # what cudf-polars would take but answer wrongly
            choice = settle_on_gpu(choice, spec.engine or self.default_engine, untrusted_on_gpu(logical))
        if choice.engine != "polars":
            return logical, choice, None
        # On the GPU, cudf-polars translates the plan on the worker before it runs anything, and
        # refuses there what it cannot run (raise_on_fail): under auto the job then goes to
        # dask-cudf (_gpu_fallback), under engine: polars it was a 422 at submit already. The
        # service does not translate it a second time (5-80 ms a job: it re-reads parquet footers).
        # Filters before the read casts on the CPU only: cudf-polars was measured with the plan as it was.
        # NaN terms in a SQL source's comparisons only where they may run on cudf-polars' IEEE comparisons.
        on_cpu = choice.device == "cpu"
        # A SQL source's query is planned by Polars here, over the sources' real types: its failure is named as the
        # worker's would be (sql_failed, naming the source), not a bare Polars error.
        with _naming_checked_errors(logical):
            frame = build_lazyframe(logical, filters_before_casts=on_cpu, ieee_comparisons=not on_cpu)
            target = active.writer.polars_target(polars_job.output_columns(frame))
            reads = source_reads(spec, frame)
        placement = place_on_gpu(spec, reads, device_limit) if choice.device == "gpu" else None
        if placement is not None:
            choice = choice.model_copy(update={"reason": f"{choice.reason}; {placement.reason}"})
        active.progress = polars_job.empty_progress(spec, reads, choice.device).model_copy(update={"engine": choice})
        return logical, choice, _PolarsQuery(frame, target, reads, placement)

    async def _execute_polars(self, job: JobView, active: _ActiveJob, query: _PolarsQuery, logical: LogicalPlan, phase: float) -> None:
        assert active.engine is not None
        device = active.engine.device
        frame, target, reads, placement = query.frame, query.target, query.reads, query.placement
        if placement is not None:
            placement = await self._maybe_across_gpus(job, active, placement)
        planned_s = time.perf_counter() - phase
        if active.cancel_requested:
            raise _JobCancelled()
        if placement is not None:
            active.log.add(f"{self._now()} placement: {placement.reason}")
        if placement is not None and placement.executor == "multi-gpu":
            await asyncio.to_thread(self.store.save_progress, job.id, active.progress)
            await self._execute_across_gpus(job, active, frame, logical, target, placement, planned_s, {read.stage for read in reads})
            return
        active.log.add(f"{self._now()} Polars query built in {planned_s:.3f} s; running as one task")
        phase = time.perf_counter()
        async with self._holding_gpus(active):
            submitted_at = time.time()
            active.task_keys = frozenset({key_text(polars_job.task_key(job.id))})
            future = polars_job.submit(self.cluster.client, job.id, frame, target, active.progress, reads, device, placement)
            active.futures = [future]
            # The stages are stored while the task runs, not before it is sent: a write less on the way to the worker.
            await asyncio.to_thread(self.store.save_progress, job.id, active.progress)
            try:
                with _naming_checked_errors(logical):
                    result: polars_job.PolarsRunResult = await future
            except CsvScanMiscount as miscount:
                if (only := job.spec.polars_only()) is not None:  # a SQL source or exact decimals: no Dask engine to move to
                    raise csv_miscount(miscount.path, miscount.counts, miscount.field, polars_only=only[1]) from None
                if device != "cpu" or (job.spec.engine or self.default_engine) != "auto" or active.cancel_requested:
                    raise
                miscounted = miscount
            else:
                miscounted = None
        if miscounted is not None:  # nothing was written: the query failed while reading
            reason = (f"engine: auto — Polars' CSV scan miscounts the rows of '{miscounted.path}' (a quote inside a field or left open); "
                      "the Dask engine reads CSV in blocks")
            await self._fallback_to_dask(job, active, logical, EngineChoice(engine="dask", device="cpu", reason=reason))
            return
        computed_s = time.perf_counter() - phase
        received_at = time.time()
        if active.cancel_requested:
            raise _JobCancelled()
        if result.unsupported is not None:
            await self._gpu_fallback(job, active, logical, result.unsupported)
            return
        if result.stages is not None:
            active.progress = _ended_progress(active.progress, result)
            active.progress_final = True
        active.streaming_spilled_bytes = result.spilled_bytes
        executor = f", {result.executor} executor" if result.executor else ""
        spilled = f", spilled {result.spilled_bytes} bytes device → host" if result.spilled_bytes is not None else ""
        active.log.add(f"{self._now()} Polars ran on {result.worker} ({result.threads} threads, {result.engine}{executor}): "
                       f"{result.rows} rows in {result.seconds:.3f} s{spilled}; {polars_job.round_trip(result, submitted_at, received_at)}")
        await self._commit(job, active, f"plan {planned_s:.3f} s, compute {computed_s:.3f} s")

    async def _maybe_across_gpus(self, job: JobView, active: _ActiveJob, placement: GpuPlacement) -> GpuPlacement:
        """``placement``, or across every GPU worker where ``cluster.gpu_multi_worker`` and the job allow it."""
        mode = self.cluster.extra.get("gpu_multi_worker", "auto")
        if mode == "off" or (mode == "auto" and placement.executor != "streaming"):
            return placement  # no scheduler round trip for the common case
        workers = sorted(await self.cluster.client.processing())
        placed = across_gpus(placement, job.spec, mode, len(workers))
        if placed.executor == "multi-gpu":
            active.across_workers = workers
        if placed is not placement and active.engine is not None:
            active.engine = active.engine.model_copy(update={"reason": f"{active.engine.reason.removesuffix('; ' + placement.reason)}; {placed.reason}"})
            active.progress = active.progress.model_copy(update={"engine": active.engine})
        if placed.executor == "multi-gpu":
            active.progress = active.progress.model_copy(update={"note": MULTI_GPU_NOTE})
        return placed

    async def _execute_across_gpus(
        self, job: JobView, active: _ActiveJob, frame: pl.LazyFrame, logical: LogicalPlan, target: OutputTarget, placement: GpuPlacement,
        planned_s: float, read_stages: set[str],
    ) -> None:
        """Run the job on every GPU worker at once (jobs/gpu_multi.py), holding them alone, then commit.

        While it runs, its stages come from the ranks' trace counts (cluster/rank_progress.py)."""
        if self._gpu_gate.sharing:
            active.log.add(f"{self._now()} waiting for the {self._gpu_gate.sharing} job(s) on the GPU workers to finish: "
                           "a job across all of them has them to itself")
        async with self._holding_gpus(active, alone=True):
            if not await self._multi_gpu.settled(active.cancelled):  # a stop still restarting the workers, and then a cancel
                raise _JobCancelled()
            active.across_workers = sorted(await self.cluster.client.processing())  # as they are now: the wait may have been long
            active.log.add(f"{self._now()} Polars query built in {planned_s:.3f} s; running across {len(active.across_workers)} GPU "
                           "worker(s) with cudf-polars' DaskEngine (no task the scheduler sees; a cancel restarts them)")
            phase = time.perf_counter()

            def update(stages: list[StageProgress], elapsed_s: float) -> None:
                active.progress = active.progress.model_copy(update={"stages": stages, "note": MULTI_GPU_TRACE_NOTE, "elapsed_s": elapsed_s})

            def stalled(silent_s: float) -> None:
                message = (f"the ranks logged no cudf-polars trace event for {silent_s:.0f} s (SPILLWAY_MULTI_GPU_STALL_S): the query is "
                           "taken to be stuck (a rank waiting for another forever); its workers are restarted and nothing was committed")
                self._spawn(self._fail_stalled_quietly(active, message))

            if active.gpu is not None:  # the ranks' event loops are the query's now: their GPUs are read through their nannies
                ranks = list(active.across_workers)
                active.gpu.read = lambda: self.cluster.rank_gpu_stats(ranks)
            follower = RankFollower(self.cluster.client, active.across_workers, frame, active.progress.stages, read_stages,
                                    self.progress_interval, update, stall_s=self.multi_gpu_stall_s, stalled=stalled)
            following = asyncio.create_task(follower.run(job.id), name=f"spillway-ranks-{job.id}")
            try:
                result: MultiGpuResult = await asyncio.to_thread(
                    run_across_gpus, self._multi_gpu, self.cluster.client.scheduler.address, active.across_workers, frame, target,
                    placement.spill_device_limit, bool(self.cluster.extra.get("allow_gpu_sharing")), job.id,
                )
            except Exception as exc:
                if active.cancel_requested:
                    raise _JobCancelled() from exc
                if (named := _named_runtime_error(exc, logical)) is not None:
                    raise named from exc
                raise
            finally:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
                active.log.add(f"{self._now()} {follower.summary()}")
        computed_s = time.perf_counter() - phase
        if active.cancel_requested:
            raise _JobCancelled()
        if result.unsupported is not None:
            active.across_workers = []
            await self._gpu_fallback(job, active, logical, result.unsupported)
            return
        active.streaming_spilled_bytes = result.spilled_bytes
        active.progress = _all_done(active.progress)
        spilled = f", spilled {result.spilled_bytes} bytes device → host" if result.spilled_bytes is not None else ""
        active.log.add(f"{self._now()} cudf-polars' DaskEngine ran on {result.ranks} rank(s) ({', '.join(active.across_workers)}): "
                       f"{result.rows} rows in {result.files} file(s) in {result.seconds:.3f} s ({result.steps_text()}), of which "
                       f"engine start {result.bootstrap_s:.3f} s{spilled}")
        await self._commit(job, active, f"plan {planned_s:.3f} s, compute {computed_s:.3f} s")

    @contextlib.asynccontextmanager
    async def _holding_gpus(self, active: _ActiveJob, *, alone: bool = False) -> AsyncIterator[None]:
        """Hold the GPU workers while the job runs: shared with other jobs, or ``alone`` (cluster/gpu_gate.py). CPU: no-op."""
        if self.cluster.backend != "cudf":
            yield
            return
        gate = self._gpu_gate
        if not await (gate.acquire_exclusive if alone else gate.acquire_shared)(active.cancelled):
            raise _JobCancelled()
        try:
            yield
        finally:
            await (gate.release_exclusive if alone else gate.release_shared)()

    def live_log(self, job_id: str) -> list[str] | None:
        """The log lines so far of a job this manager is running (None: it runs none such)."""
        active = self._active.get(job_id)
        return active.log.to_list() if active is not None else None

    async def running(self) -> list[RunningJob]:
        """Every running job, with the workers the scheduler has its tasks processing on now (not one whose end is
        recorded and whose log is being collected)."""
        actives = [(job_id, active) for job_id, active in list(self._active.items()) if not active.stopped.is_set()]
        if not actives:
            return []
        processing = await self.cluster.client.processing()
        jobs = []
        for job_id, active in actives:
            workers = {worker: count for worker, keys in processing.items() if (count := sum(key_text(k) in active.task_keys for k in keys))}
            workers.update({worker: 1 for worker in active.across_workers})  # its ranks: no task the scheduler sees
            engine = active.engine
            jobs.append(RunningJob(
                id=job_id, engine=engine.engine if engine else None, device=engine.device if engine else None,
                reason=engine.reason if engine else None, workers=workers,
            ))
        return jobs

    async def _gpu_device_limit(self) -> int | None:
        """One GPU worker's device limit in bytes (the smallest, if they differ), read once per cluster."""
        cached = self._device_limit_of
        if cached is None or cached[0] is not self.cluster:
            readings = await self.cluster.gpu_stats()
            totals = [int(r["memory_total"]) for r in readings.values() if r.get("memory_total")]
            limit = device_limit_bytes(self.cluster.extra.get("device_memory_limit"), min(totals) if totals else None)
            cached = self._device_limit_of = (self.cluster, limit)
        return cached[1]

    async def _gpu_fallback(self, job: JobView, active: _ActiveJob, logical: LogicalPlan, why: str) -> None:
        """cudf-polars refused the query while running it (its translation had passed): under ``auto``, run it on dask-cudf."""
        assert active.engine is not None
        await self._fallback_to_dask(job, active, logical, settle_on_gpu(active.engine, job.spec.engine or self.default_engine, why))

    async def _fallback_to_dask(self, job: JobView, active: _ActiveJob, logical: LogicalPlan, choice: EngineChoice) -> None:
        """The Polars engine could not run the job, before it wrote anything: run it on the Dask engine, ``choice`` saying why."""
        active.engine = choice
        active.planning_deadline = asyncio.get_running_loop().time() + self.max_planning_s  # planning again, for the other engine
        active.log.add(f"{self._now()} engine: dask on {choice.device} ({choice.reason})")
        log.info("job %s: %s", job.id, choice.reason)
        await self._execute_dask(job, active, logical, time.perf_counter())

    async def _execute_dask(self, job: JobView, active: _ActiveJob, logical: LogicalPlan, phase: float) -> None:
        client = self.cluster.client
        # Bounded before anything is built: a tiny blocksize made millions of partitions (GBs of graph) before the count below.
        await self._planning(active, check_partitions, job.spec, self.max_partitions)
        plan = await self._planning(active, plan_job, job.spec, self.cluster.backend, active.writer, self.cluster.planner, logical)
        planned_s = time.perf_counter() - phase
        if len(plan.graph) > self.max_partitions:
            raise TooManyPartitions(
                f"the job's graph has {len(plan.graph)} partitions (tasks), over the limit of {self.max_partitions}; "
                "use fewer, larger files or a larger source blocksize"
            )
        active.progress = plan.empty_progress().model_copy(update={"engine": active.engine})
        await asyncio.to_thread(self.store.save_progress, job.id, active.progress)
        await client.register_plugin(JobProgressPlugin(job.id, plan.stage_of_key, plan.result_keys, plan.stages))
        if active.cancel_requested:
            raise _JobCancelled()
        active.log.add(f"{self._now()} graph: {len(plan.graph)} tasks in {len(plan.stage_totals)} stages, planned in {planned_s:.3f} s")
        phase = time.perf_counter()
        active.task_keys = frozenset(key_text(key) for key in plan.stage_of_key)
        async with self._holding_gpus(active):
            active.futures = client.get(plan.graph, plan.result_keys, sync=False)
            with _naming_checked_errors(logical):
                await client.gather(active.futures)
        computed_s = time.perf_counter() - phase
        if active.cancel_requested:
            raise _JobCancelled()
        try:  # the plugin's last event carries the final counts
            await asyncio.wait_for(active.plugin_ended.wait(), 5.0)
        except TimeoutError:
            log.warning("job %s: no final progress event within 5 s; keeping the last counts seen", job.id)
        await self._commit(job, active, f"plan {planned_s:.3f} s, compute {computed_s:.3f} s")

    async def _commit(self, job: JobView, active: _ActiveJob, timings: str) -> None:
        """Commit the output and record SUCCEEDED, as one step that neither a timeout nor a stop cuts in two."""
        active.committing = True
        if active.deadline is not None and not active.deadline.expired():
            active.deadline.reschedule(None)
        landing = asyncio.create_task(self._commit_and_record(job, active, timings))
        try:
            await asyncio.shield(landing)
        except asyncio.CancelledError:
            # The service is stopping: the commit runs on in its thread, so let it land and be
            # recorded (else its output would be committed under a job marked interrupted), then stop.
            await asyncio.wait({landing})
            raise

    async def _commit_and_record(self, job: JobView, active: _ActiveJob, timings: str) -> None:
        phase = time.perf_counter()
        if active.gpu is None:  # nothing to sample: the commit and SUCCEEDED in one thread hop
            manifest, committed_s = await asyncio.to_thread(self._commit_and_finish, job.id, active, phase)
        else:
            # The GPU's last reading is taken while the output is committed, and recorded before
            # SUCCEEDED: whoever sees the job succeed sees its resources too.
            sampled = asyncio.create_task(self._record_resources(active, job.id))
            try:
                manifest = await asyncio.to_thread(self._fenced_commit, job.id, active)
            finally:
                await sampled
            committed_s = time.perf_counter() - phase
            await asyncio.to_thread(self.store.finish, job.id, JobStatus.SUCCEEDED, progress=active.progress, result=manifest)
        active.committed = True
        timings = f"{timings}, commit {committed_s:.3f} s"
        active.log.add(f"{self._now()} {timings}")
        log.info("job %s: succeeded, %d rows in %d files at %s (%s)", job.id, manifest.total_rows, len(manifest.files), manifest.location, timings)

    def _commit_and_finish(self, job_id: str, active: _ActiveJob, phase: float) -> tuple[ResultManifest, float]:
        """:meth:`_fenced_commit`, then SUCCEEDED recorded (in the committing thread); the manifest and the commit's seconds."""
        manifest = self._fenced_commit(job_id, active)
        committed_s = time.perf_counter() - phase
        self.store.finish(job_id, JobStatus.SUCCEEDED, progress=active.progress, result=manifest)
        return manifest, committed_s

    def _fenced_commit(self, job_id: str, active: _ActiveJob) -> ResultManifest:
        """Commit the output, unless the job is no longer this replica's to commit (in the committing thread).

        A replica silent past the timeout (stalled, not dead) is taken for dead by another, which
        settles its jobs; if this one then reaches its commit, it must not land output under a job
        already FAILED. The row is read again right before the rename (a window of one read remains).
        """
        now = self.store.get(job_id)
        if now.state != JobStatus.RUNNING or (now.replica is not None and now.replica != self.replica_id):
            elsewhere = f" on {now.replica}" if now.replica and now.replica != self.replica_id else ""
            message = (f"this replica ({self.replica_id}) was taken for dead while the job ran and the job is now "
                       f"{now.state.value}{elsewhere}; its output was not committed")
            active.log.add(f"{self._now()} {message}")
            log.warning("job %s: %s", job_id, message)
            raise _NoLongerOurs(message)
        return active.writer.commit()

    async def _record_resources(self, active: _ActiveJob, job_id: str) -> None:
        """Stop the job's GPU sampler (if it has one still running) and record what it measured.

        Never raises: a failed reading must not fail (or, during the commit, split) the job.
        """
        sampler, active.gpu = active.gpu, None
        if sampler is None:
            return
        try:
            resources = await sampler.stop()
            if active.streaming_spilled_bytes is not None:
                resources = resources.model_copy(update={"streaming_spilled_bytes": active.streaming_spilled_bytes})
            await asyncio.to_thread(self.store.save_resources, job_id, resources)
        except Exception as exc:  # noqa: BLE001 - measurements are best effort; the job's outcome is not
            log.warning("job %s: its GPU resources could not be recorded: %s: %s", job_id, type(exc).__name__, exc)

    @staticmethod
    def _now() -> str:
        return datetime.now(timezone.utc).isoformat(timespec="milliseconds")

    async def _save_log(self, active: _ActiveJob, job: JobView) -> None:
        """Store the job's log (its terminal state already in it), with the workers' lines from while it ran."""
        if job.started_at is not None:
            try:
                workers = await asyncio.wait_for(self._log_workers(active, job), 10)
                if workers == []:
                    active.log.add("(worker logs unavailable: every worker was restarted to stop this job)")
                else:
                    worker_logs = await asyncio.wait_for(self.cluster.client.get_worker_logs(workers=workers), 10)
                    active.log.add_worker_lines(worker_logs, job.started_at, job.finished_at or datetime.now(timezone.utc))
            except Exception as exc:  # noqa: BLE001 - best effort: the cluster may be gone
                active.log.add(f"(worker logs unavailable: {type(exc).__name__}: {exc})")
        await asyncio.to_thread(self.store.save_logs, active.job_id, active.log.to_list())

    async def _log_workers(self, active: _ActiveJob, job: JobView) -> list[str] | None:
        """The workers whose log lines a finished job takes (None: every worker).

        A job that succeeded takes those that ran its tasks; any other, every worker's (the one that died,
        or whose error it was, may not have reported a task), but those restarted to stop it: their logs
        went with them, and one still restarting held the log request (and the runner) for its 10 s.
        """
        if job.state == JobStatus.SUCCEEDED and active.progress.tasks_per_worker:
            return sorted(active.progress.tasks_per_worker)
        if not active.restarted:
            return None
        return [w for w in await self.cluster.client.run_on_scheduler(_worker_addresses) if w not in active.restarted]

    async def _sweep_staging(self, writer: SinkWriter) -> None:
        # Cancelled tasks that were already executing finish in their worker threads
        # and may still write a part file into staging; sweep it again after them.
        for delay in SWEEP_DELAYS_S:
            await asyncio.sleep(delay)
            await asyncio.to_thread(writer.abort)
        self._sweeps.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _fail(self, job_id: str, code: str, message: str, progress: JobProgress, *, field: str | None = None) -> bool:
        """Record the job FAILED; False where it had ended already."""
        error = ErrorDetail(code=code, message=message, field=field)
        return await asyncio.to_thread(self.store.finish, job_id, JobStatus.FAILED, progress=progress, error=error)

    async def _cleanup(self, active: _ActiveJob) -> None:
        client = self.cluster.client
        for future in active.futures:
            future.release()
        if active.engine is not None and active.engine.engine == "polars":
            return  # no progress plugin: it is registered for Dask-engine graphs only
        # The plugin removes itself when the job ends; this is the backstop for a
        # job that failed before its graph reached the scheduler.
        try:
            await asyncio.wait_for(client.run_on_scheduler(_drop_plugin, name=plugin_name(active.job_id)), 10)
        except (OSError, TimeoutError) as exc:  # the scheduler is gone: so is the plugin
            log.debug("job %s: could not reach the scheduler to drop its plugin: %s", active.job_id, exc)

    def _on_progress(self, event: tuple[float, dict[str, Any]]) -> None:
        _, message = event
        active = self._active.get(message.get("job_id", ""))
        if active is None or active.progress_final:
            return
        before = active.progress.done
        active.progress = JobProgress(
            # (name, done, total) from the Dask engine's plugin; (name, done, total, unit) from a Polars task
            stages=[StageProgress(name=row[0], done=row[1], total=row[2], unit=row[3] if len(row) > 3 else None) for row in message["stages"]],
            tasks_per_worker=message.get("workers", {}),
            engine=active.engine,
            note=message.get("note") or active.progress.note,  # a Polars GPU task says what its counts mean
            elapsed_s=message.get("elapsed_s"),
            tasks_done=message["tasks"][0] if "tasks" in message else None,  # the Dask engine's distinct tasks
            tasks_total=message["tasks"][1] if "tasks" in message else None,
        )
        if active.progress.done > before and message.get("engine") != "polars":  # a Polars job has no partitions
            self.metrics.partitions_done(active.progress.done - before)
        if message.get("ended"):
            active.plugin_ended.set()

    async def _flush_progress(self, active: _ActiveJob) -> None:
        while True:
            await asyncio.sleep(self.progress_interval)
            await asyncio.to_thread(self.store.save_progress, active.job_id, active.progress)


def _ended_progress(progress: JobProgress, result: polars_job.PolarsRunResult) -> JobProgress:
    """A Polars task's last progress, from its result: every stage as it ended, on the worker that ran it."""
    stages = [StageProgress(name=name, done=done, total=total, unit=unit) for name, done, total, unit in result.stages or []]
    return progress.model_copy(update={"stages": stages, "tasks_per_worker": {result.worker: 1}, "elapsed_s": round(result.seconds, 3),
                                       "note": result.note or progress.note})


def _all_done(progress: JobProgress) -> JobProgress:
    """Every stage complete: a job across the GPU workers reports no counts while it runs (its ranks block their workers' event loops)."""
    stages = [stage.model_copy(update={"done": stage.total}) for stage in progress.stages]
    return progress.model_copy(update={"stages": stages})


@contextlib.contextmanager
def _naming_checked_errors(logical: LogicalPlan) -> Iterator[None]:
    """Raise a worker's error from a checked expression as :func:`_named_runtime_error` names it; others as they are."""
    try:
        yield
    except Exception as exc:
        if (named := _named_runtime_error(exc, logical)) is not None:
            raise named from exc
        raise


def _named_runtime_error(exc: BaseException, logical: LogicalPlan) -> SpillwayError | None:
    """A worker's error from a checked expression, named after the expressions it can come from; else None.

    The checks signal through their error's text, which survives any engine and worker: a
    checked integer result outside int64 (jobs.lower_polars, the Polars engine's; the Dask
    engine names its own), ``divide`` by zero (a sentinel, both engines), and a text
    ``strptime`` cannot read (chrono's error through Polars, both engines).
    """
    text = str(exc)
    if _signalled(text, INT64_OVERFLOW):
        named, field = _naming(logical, has_integer_arithmetic)
        return IntegerOverflow(f"integer overflow in {named}: a result is outside int64 ({INT64_MIN} to {INT64_MAX}); compute in "
                               "float64 instead, e.g. cast(x, 'float64')", field=field)
    if _signalled(text, DIVISION_BY_ZERO):
        named, field = _naming(logical, lambda node: _calls(node, "divide"))
        return DivisionByZero(f"division by zero in {named}: a divisor is zero in some row; safe_divide(x, y) gives null there "
                              "instead, and / an infinity", field=field)
    if _signalled(text, DATETIME_OUT_OF_RANGE):
        named, field = _naming(logical, lambda node: _casts_to(node, "datetime64[ns]"))
        return DatetimeOutOfRange(f"a date-time outside nanoseconds' range (1677-09-21 to 2262-04-11) in {named}; a date such "
                                  "as the sentinel 9999-12-31 fits datetime64[ns] nowhere: filter it out or replace it first, "
                                  "or leave the column in its own unit", field=field)
    if STRPTIME_MISMATCH in text and any(_calls(e.node, "strptime") for e in logical.expressions.values()):
        named, field = _naming(logical, lambda node: _calls(node, "strptime"))
        detail = text.strip().splitlines()[0][:300]
        return TextNotParsed(f"a text does not match the format in {named} ({detail}); filter such rows out first, e.g. "
                             "with regexp_like(s, '…')", field=field)
    sql = list(logical.spec.sql_sources()) if logical.spec is not None else []
    if sql and isinstance(exc, pl.exceptions.PolarsError) and not isinstance(exc, SpillwayError):
        # Polars' own words for a SQL query's failure name its internal expressions, not the user's source.
        where = f"source '{sql[0]}'" if len(sql) == 1 else f"one of the SQL sources ({', '.join(sql)})"
        reason = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
        reason = _INTERNAL_COLUMN.sub("", reason)  # a column of Polars' own making means nothing to the query's author
        if _FLOAT_TO_INTEGER.search(reason):
            reason += ("; a float cast to an integer met NaN, an infinity or a value outside the integer's range, where "
                       "PostgreSQL fails too: filter such rows out first, or cast to DOUBLE")
        return SqlFailed(f"the SQL of {where} failed while running: {reason}", field=f"sources.{sql[0]}.sql" if len(sql) == 1 else None)
    return None


#: Polars' words for a failed cast of floats to integers, and the name of a column of its own making in them.
_FLOAT_TO_INTEGER = re.compile(r"conversion from `f(32|64)` to `[iu](8|16|32|64)` failed")
_INTERNAL_COLUMN = re.compile(r" in column '__POLARS_[A-Z]+_0x[0-9a-f]+'")


def _signalled(text: str, sentinel: str) -> bool:
    """Whether an error's ``text`` carries ``sentinel`` as a failing value (Polars: ``values: ["…"``), as the
    Dask engine's message (``"…: divide(x, y) met a zero divisor"``) or as cudf-polars' failed cast to the
    sentinel's own type (``to <type_id.UINT16: 6> failed``); Polars' dump of the expression names every
    sentinel of the expression, failing or not, in none of these forms."""
    gpu_form = f"to <type_id.{SENTINEL_TYPES[sentinel].__name__.upper()}:"
    return f'["{sentinel}"' in text or f"{sentinel}:" in text or ("Conversion from" in text and gpu_form in text)


def _calls(node: ir.Node, name: str) -> bool:
    return any(isinstance(n, ir.Call) and n.name == name for n in ir.walk(node))


def _casts_to(node: ir.Node, dtype: str) -> bool:
    return any(isinstance(n, ir.Call) and n.name == "cast" and isinstance(n.args[1], ir.Lit) and n.args[1].value == dtype for n in ir.walk(node))


def _naming(logical: LogicalPlan, test: Callable[[ir.Node], bool]) -> tuple[str, str | None]:
    """The job's expressions that ``test`` holds for, as a message names them, and their field when there is one."""
    fields = [(at, expression) for at, expression in logical.expressions.items() if test(expression.node)]
    named = "; ".join(f"{at} '{shorten(expression.text)}'" for at, expression in fields) or "an expression"
    return named, fields[0][0] if len(fields) == 1 else None


def _worker_addresses(dask_scheduler: Any) -> list[str]:
    return sorted(dask_scheduler.workers)


def _drop_plugin(dask_scheduler: Any, name: str) -> None:
    dask_scheduler.plugins.pop(name, None)


#: At a job's timeout, a worker that has sent no heartbeat for this long is taken to be hung and is
#: restarted too (heartbeats come every 0.5-5 s; Dask's own worker-ttl waits minutes). A job still
#: planning has no tasks of its own yet, but may be waiting on such a worker.
SILENT_WORKER_S = 10.0


def _workers_to_restart(dask_scheduler: Any, keys: list[Any], silent_s: float | None) -> list[str]:
    """The workers running a task that ``keys`` need (not yet in memory), and any worker silent for ``silent_s``."""
    workers: set[str] = set()
    seen: set[Any] = set()
    stack = list(keys)
    while stack:
        key = stack.pop()
        task = dask_scheduler.tasks.get(key)
        if key in seen or task is None or task.state == "memory":
            continue  # a task in memory needs nothing more run
        seen.add(key)
        if task.processing_on is not None:
            workers.add(task.processing_on.address)
        stack.extend(dependency.key for dependency in task.dependencies)
    if silent_s is not None:
        workers.update(silent_workers(dask_scheduler, silent_s))
    return sorted(workers)
