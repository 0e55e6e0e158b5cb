"""Prometheus metrics: what an operator alerts on.

Two kinds of series. Counters and histograms of what this replica did (HTTP requests, jobs it
ran, their queue wait): sum them over replicas. Gauges read at scrape time from the shared
database and the cluster (jobs by state, pipeline runs, workers): every replica reports the
same truth, so take ``max``, not ``sum``, over replicas. README "Metrics" lists every series.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from spillway.jobs.status import JobStatus
from spillway.service.pipeline_metrics import PipelineCollector
from spillway.service.pipelines.tables import aware
from spillway.service.store import jobs_table, utc_now

if TYPE_CHECKING:
    from spillway.cluster.factory import ClusterHandle
    from spillway.cluster.info import ClusterInfo
    from spillway.service.pipelines import PipelineStore
    from spillway.service.schemas import JobView
    from spillway.service.store import JobStore

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: Seconds a scrape waits for the scheduler's view of the workers.
CLUSTER_TIMEOUT_S = 5.0
_JOB_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600, float("inf"))
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))


class _StoreCollector(Collector):
    """Reads job counts from the store at scrape time, so every replica reports the truth."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.store: JobStore | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.store is None:
            return
        counts = self.store.count_by_state()
        jobs = GaugeMetricFamily("spillway_jobs", "Jobs in each state.", labels=["state"])
        for state, count in counts.items():
            jobs.add_metric([state.value], count)
        yield jobs
        yield GaugeMetricFamily("spillway_queue_length", "Jobs waiting to run (PENDING).", value=counts[JobStatus.PENDING])
        with self.store.engine.connect() as conn:
            oldest = conn.execute(select(func.min(jobs_table.c.created_at)).where(jobs_table.c.state == JobStatus.PENDING.value)).scalar()
        # The queue wait histogram observes a job only once it starts: this shows a queue that is stuck.
        waited = 0.0 if oldest is None else max((self.clock() - aware(oldest)).total_seconds(), 0.0)  # type: ignore[operator]
        yield GaugeMetricFamily("spillway_queue_oldest_pending_seconds", "How long the oldest PENDING job has waited (0: none waits).", value=waited)
        # Replicas with a heartbeat row: one taken for dead loses its row, so a drop here is a replica gone.
        yield GaugeMetricFamily("spillway_replicas", "Service replicas with a heartbeat row in the database.", value=len(self.store.replicas.live()))


class _ClusterCollector(Collector):
    """The workers as the scheduler saw them at the start of this scrape (see :meth:`ServiceMetrics.render`)."""

    def __init__(self) -> None:
        self.info: ClusterInfo | None = None
        self.reached = False

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("spillway_cluster_up", "1 when the Dask scheduler answered this scrape.", value=1 if self.reached else 0)
        if self.info is None:
            return
        workers = self.info.workers
        yield GaugeMetricFamily("spillway_workers", "Dask workers connected to the scheduler.", value=len(workers))
        yield GaugeMetricFamily("spillway_worker_threads", "Threads over all workers.", value=self.info.total_threads)
        gauges = {
            "memory": GaugeMetricFamily("spillway_worker_memory_bytes", "Worker process memory, from its last heartbeat.", labels=["worker"]),
            "limit": GaugeMetricFamily("spillway_worker_memory_limit_bytes", "Worker host memory limit.", labels=["worker"]),
            "disk": GaugeMetricFamily("spillway_worker_spilled_to_disk_bytes", "Bytes the worker spilled host → disk.", labels=["worker"]),
            "tasks": GaugeMetricFamily("spillway_worker_tasks_executing", "Tasks the worker is running.", labels=["worker"]),
            "gpu_used": GaugeMetricFamily("spillway_worker_gpu_memory_used_bytes", "Device memory in use on the worker's GPU (NVML).", labels=["worker"]),
            "gpu_total": GaugeMetricFamily("spillway_worker_gpu_memory_total_bytes", "Device memory of the worker's GPU (NVML).", labels=["worker"]),
            "gpu_spilled": GaugeMetricFamily(
                "spillway_worker_gpu_spilled_to_host_bytes", "Bytes cuDF spilled device → host on the worker since it started.", labels=["worker"]
            ),
        }
        for worker in workers:
            name = [worker.name]
            gauges["memory"].add_metric(name, worker.memory_used)
            if worker.memory_limit is not None:
                gauges["limit"].add_metric(name, worker.memory_limit)
            gauges["disk"].add_metric(name, worker.spilled_to_disk_bytes)
            gauges["tasks"].add_metric(name, worker.tasks_processing)
            gpu = worker.gpu
            if gpu is None:  # a CPU worker, or one without NVML: no reading rather than a zero
                continue
            for key, value in (("gpu_used", gpu.memory_used), ("gpu_total", gpu.memory_total), ("gpu_spilled", gpu.spilled_to_host_bytes)):
                if value is not None:
                    gauges[key].add_metric(name, value)
        yield from gauges.values()


class ServiceMetrics:
    """The service's own registry (not the process-global one, so apps in tests stay apart).

    Built with the app, so that its HTTP middleware has somewhere to count; the store,
    pipelines and cluster it reads at scrape time are attached in the lifespan (:meth:`watch`).
    """

    def __init__(self, *, clock: Clock = utc_now) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        self._store = _StoreCollector(clock)
        self._cluster = _ClusterCollector()
        self._pipelines = PipelineCollector(clock)
        for collector in (self._store, self._cluster, self._pipelines):
            self.registry.register(collector)
        self._partitions = Counter(
            "spillway_partitions_processed", "Graph partitions (tasks) completed by jobs.", registry=self.registry
        )
        labels = ["engine", "device", "state"]
        self._durations = Histogram(
            "spillway_job_duration_seconds",
            "Wall time from RUNNING to a terminal state, by the engine chosen and the outcome.",
            labelnames=labels,
            buckets=_JOB_BUCKETS,
            registry=self.registry,
        )
        self._finished = Counter(
            "spillway_jobs_finished", "Jobs run to a terminal state, by the engine chosen ('none': failed before the choice) and outcome.",
            labelnames=labels, registry=self.registry,
        )
        self._queue_wait = Histogram(
            "spillway_job_queue_wait_seconds", "Time from submission (created) to RUNNING.", buckets=_JOB_BUCKETS, registry=self.registry
        )
        self._requests = Counter(
            "spillway_http_requests", "HTTP requests, by method, route template and status code.",
            labelnames=["method", "route", "status"], registry=self.registry,
        )
        self._latency = Histogram(
            "spillway_http_request_duration_seconds",
            "Time from a request's arrival to its response's first byte, by method and route template.",
            labelnames=["method", "route"],
            buckets=_HTTP_BUCKETS,
            registry=self.registry,
        )

    def watch(self, store: JobStore, pipelines: PipelineStore | None = None) -> None:
        """Read jobs (and pipeline runs) from these stores at scrape time."""
        self._store.store = store
        self._pipelines.store = pipelines

    async def render(self, cluster: ClusterHandle | None) -> bytes:
        """The Prometheus text of every series, with the cluster read now (a failed read: ``spillway_cluster_up 0``)."""
        info = None
        if cluster is not None:
            try:
                info = await asyncio.wait_for(cluster.info(), CLUSTER_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a lost scheduler is what cluster_up reports, not a failed scrape
                log.debug("metrics: the cluster did not answer: %s", exc)
        self._cluster.info, self._cluster.reached = info, info is not None
        return await asyncio.to_thread(generate_latest, self.registry)

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request (see :class:`service.http_metrics.HttpMetrics`)."""
        self._requests.labels(method=method, route=route, status=str(status)).inc()
        self._latency.labels(method=method, route=route).observe(seconds)

    def partitions_done(self, count: int) -> None:
        self._partitions.inc(count)

    def job_started(self, job: JobView) -> None:
        """A job moved to RUNNING now: observe how long it queued."""
        self._queue_wait.observe(max((self.clock() - job.created_at).total_seconds(), 0.0))

    def job_finished(self, job: JobView) -> None:
        """A job this replica ran reached a terminal state."""
        choice = job.progress.engine
        labels = {"engine": choice.engine if choice else "none", "device": choice.device if choice else "none", "state": job.state.value}
        self._finished.labels(**labels).inc()
        if job.started_at is not None and job.finished_at is not None:
            self._durations.labels(**labels).observe((job.finished_at - job.started_at).total_seconds())
