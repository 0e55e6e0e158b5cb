"""Prometheus metrics: jobs by state, queue length, partitions processed, job durations."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs.status import JobStatus


class _StoreCollector(Collector):
    """Reads job counts from the store at scrape time, so every replica reports the truth."""

    def __init__(self, count_by_state: Callable[[], dict[JobStatus, int]]) -> None:
        self.count_by_state = count_by_state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self.count_by_state()
        jobs = GaugeMetricFamily("spillway_jobs", "Jobs in each state.", labels=["state"])
        for state, count in counts.items():
            jobs.add_metric([state.value], count)
        yield jobs
        yield GaugeMetricFamily("spillway_queue_length", "Jobs waiting to run (PENDING).", value=counts[JobStatus.PENDING])


class ServiceMetrics:
    """The service's own registry (not the process-global one, so apps in tests stay apart)."""

    def __init__(self, count_by_state: Callable[[], dict[JobStatus, int]]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(count_by_state))
        self._partitions = Counter(
            "spillway_partitions_processed", "Graph partitions (tasks) completed by jobs.", registry=self.registry
        )
        self._durations = Histogram(
            "spillway_job_duration_seconds",
            "Wall time from RUNNING to a terminal state.",
            labelnames=["state"],
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf")),
            registry=self.registry,
        )

    def partitions_done(self, count: int) -> None:
        self._partitions.inc(count)

    def job_finished(self, state: JobStatus, seconds: float) -> None:
        self._durations.labels(state=state.value).observe(seconds)
