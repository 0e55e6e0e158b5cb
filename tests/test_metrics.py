"""Metrics (issue 18 item 6): scraped from a real service, the series move after a job.

HTTP requests are labelled by route template, never by raw path, so job ids add no series.
The GPU series are checked on the scrape's exposition of a worker reading; on a CPU cluster
they have no samples at all (a missing reading is not a zero).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spillway.cluster.info import ClusterInfo, GpuInfo, WorkerInfo
from spillway.service.client import SpillwayClient
from spillway.service.launcher import launch_service
from spillway.jobs.spec import JobSpec
from spillway.service.metrics import _ClusterCollector, _StoreCollector
from spillway.service.replicas import ReplicaIdentity
from spillway.service.store import JobStore
from spillway.service.pipeline_metrics import PipelineCollector
from spillway.service.pipelines import PipelineStore
from spillway.service.pipelines.models import RunState, RunTrigger
from spillway.service.pipelines.runs import NewRun
from spillway.service.pipelines.tables import runs_table
from tests.conftest import ServiceProcess, wait_for, wait_terminal
from tests.test_pipelines_fakes import pipeline, spec_template

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(service: ServiceProcess) -> Samples:
    response = httpx.get(f"{service.url}/metrics", timeout=30)
    assert response.status_code == 200
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def named(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def test_the_series_move_after_a_job(service: ServiceProcess, api: SpillwayClient, engine: str, sample_data: dict[str, Path], tmp_path: Path) -> None:
    before = scrape(service)
    spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": str(tmp_path / "out")}}
    job = wait_terminal(api, api.submit(spec).id)
    assert job.state.value == "SUCCEEDED", job.error
    for _ in range(3):
        api.get(job.id)
    with httpx.Client(base_url=service.url, timeout=30) as http:
        assert http.get("/jobs/0123456789abcdef").status_code == 404
        assert http.get(f"/no/such/{job.id}").status_code == 404
        assert http.request("PROPFIND", "/jobs").status_code == 405  # a method httptools parses (it answers 400 to one it does not know)
        assert http.get("/openapi.json").status_code == 200
    outcome = {"engine": engine, "device": "cpu", "state": "SUCCEEDED"}
    # The manager counts the job once its log is saved, a moment after the store says SUCCEEDED.
    def counted() -> Samples | None:
        samples = scrape(service)
        return samples if value(samples, "spillway_jobs_finished_total", **outcome) > value(before, "spillway_jobs_finished_total", **outcome) else None

    after = wait_for(counted, timeout=30, what="the job to be counted")

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    one_job = {"method": "GET", "route": "/jobs/{job_id}"}
    assert delta("spillway_http_requests_total", **one_job, status="200") >= 3
    assert delta("spillway_http_requests_total", **one_job, status="404") == 1
    assert delta("spillway_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert delta("spillway_http_requests_total", method="OTHER", route="/jobs", status="405") == 1
    assert delta("spillway_http_requests_total", method="GET", route="/openapi.json", status="200") == 1
    assert delta("spillway_http_request_duration_seconds_count", **one_job) >= 4
    assert delta("spillway_http_request_duration_seconds_bucket", **one_job, le="+Inf") >= 4
    http_labels = {v for name in ("spillway_http_requests_total", "spillway_http_request_duration_seconds_bucket") for labels in named(after, name) for _, v in labels}
    assert not any(job.id in label for label in http_labels), "a raw path leaked into a label"

    assert job.progress.engine is not None and job.progress.engine.engine == engine
    assert delta("spillway_jobs_finished_total", **outcome) == 1
    assert delta("spillway_job_duration_seconds_count", **outcome) == 1
    assert delta("spillway_job_queue_wait_seconds_count") == 1
    assert delta("spillway_jobs", state="SUCCEEDED") == 1
    assert value(after, "spillway_queue_oldest_pending_seconds") == 0  # nothing waits now

    assert value(after, "spillway_cluster_up") == 1
    assert value(after, "spillway_workers") == 2
    memory = named(after, "spillway_worker_memory_bytes")
    assert len(memory) == 2 and all(v > 0 for v in memory.values())
    assert len(named(after, "spillway_worker_memory_limit_bytes")) == 2
    assert not named(after, "spillway_worker_gpu_memory_used_bytes")  # CPU workers: no reading, not a zero


def test_pipeline_runs_by_state_and_lateness_from_the_database(service: ServiceProcess, tmp_path: Path) -> None:
    source = {"format": "parquet", "path": f"{tmp_path}/{{{{ ds }}}}/*.parquet"}
    body = pipeline("metered", paused=True, spec=spec_template(source=source, sink={"path": f"{tmp_path}/out/{{{{ ds_nodash }}}}"}))
    assert httpx.post(f"{service.url}/pipelines", json=body.model_dump(mode="json"), timeout=30).status_code == 201
    store = PipelineStore(service.env["SPILLWAY_DATABASE_URL"])
    try:
        due = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=10)
        hour = timedelta(hours=1)
        runs = [
            NewRun(due - 3 * hour, due - 2 * hour, RunState.FAILED, RunTrigger.SCHEDULED, 1, {}),
            NewRun(due - 2 * hour, due - hour, RunState.SUCCEEDED, RunTrigger.SCHEDULED, 1, {}),
            NewRun(due - hour, due, RunState.QUEUED, RunTrigger.SCHEDULED, 1, {}),  # due 10 minutes ago, not started
        ]
        store.runs.insert(store.get("metered").id, runs, now=due)
    finally:
        store.close()
    samples = scrape(service)
    for state, count in (("FAILED", 1), ("SUCCEEDED", 1), ("QUEUED", 1)):
        assert value(samples, "spillway_pipeline_runs", pipeline="metered", state=state) == count
    assert 600 <= value(samples, "spillway_pipeline_lateness_seconds", pipeline="metered") < 3600


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _collect(collector: Any) -> Samples:
    registry = CollectorRegistry()
    registry.register(collector)
    return parse(generate_latest(registry).decode())


def test_lateness_is_the_latest_scheduled_runs_start_after_its_interval(tmp_path: Path) -> None:
    now = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
    store = PipelineStore(f"sqlite:///{tmp_path / 'p.db'}", clock=_Clock(now))
    collector = PipelineCollector(_Clock(now))
    collector.store = store
    try:
        record = store.create(pipeline("hourly"))
        hour = timedelta(hours=1)
        store.runs.insert(
            record.id,
            [
                NewRun(now - 3 * hour, now - 2 * hour, RunState.QUEUED, RunTrigger.SCHEDULED, 1, {}),
                NewRun(now - 2 * hour, now - hour, RunState.SKIPPED, RunTrigger.SCHEDULED, 1, {}),  # never runs: not counted
                NewRun(now - hour, now, RunState.QUEUED, RunTrigger.MANUAL, 1, {}),  # a trigger is not late
            ],
            now=now,
        )
        assert value(_collect(collector), "spillway_pipeline_lateness_seconds", pipeline="hourly") == 7200  # still queued: 2 h so far
        with store.engine.begin() as conn:
            conn.execute(runs_table.update().where(runs_table.c.logical_date == now - 3 * hour).values(state="RUNNING", started_at=now - 2 * hour + timedelta(seconds=42)))
        samples = _collect(collector)
        assert value(samples, "spillway_pipeline_lateness_seconds", pipeline="hourly") == 42
        assert value(samples, "spillway_pipeline_runs", pipeline="hourly", state="SKIPPED") == 1
    finally:
        store.close()


def test_the_oldest_pending_jobs_wait_shows_a_stuck_queue(tmp_path: Path) -> None:
    created = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
    store = JobStore(f"sqlite:///{tmp_path / 'j.db'}", clock=_Clock(created))
    collector = _StoreCollector(_Clock(created + timedelta(seconds=90)))
    collector.store = store
    try:
        assert value(_collect(collector), "spillway_queue_oldest_pending_seconds") == 0
        spec = JobSpec.model_validate({"source": {"format": "parquet", "path": "/tmp/x.parquet"}, "sink": {"path": "/tmp/y"}})
        store.create(spec, "pandas")
        store.clock = _Clock(created + timedelta(seconds=60))
        store.create(spec, "pandas")
        samples = _collect(collector)
        assert value(samples, "spillway_queue_oldest_pending_seconds") == 90
        assert value(samples, "spillway_queue_length") == 2
        assert value(samples, "spillway_replicas") == 0
        store.replicas.register(ReplicaIdentity.of_this_process("metrics"))  # what a starting service does
        assert value(_collect(collector), "spillway_replicas") == 1
    finally:
        store.close()


def _worker(name: str, gpu: GpuInfo | None) -> WorkerInfo:
    return WorkerInfo(name=name, address=f"tcp://127.0.0.1:{name}", threads=1, memory_limit=None, memory_used=100, gpu=gpu)


def test_gpu_memory_and_spilled_bytes_per_worker_where_a_worker_reports_them() -> None:
    collector = _ClusterCollector()
    gpu = GpuInfo(name="H200", index="0", memory_total=140 << 30, memory_used=3 << 30, spilled_to_host_bytes=1234)
    no_nvml = GpuInfo(name=None, index="1", spilled_to_host_bytes=None)
    workers = [_worker("0", gpu), _worker("1", no_nvml), _worker("2", None)]
    collector.info = ClusterInfo(
        backend="cudf", kind="LocalCUDACluster", scheduler_address="tcp://x", protocol="tcp", dashboard_link=None,
        workers=workers, total_threads=3, total_memory_limit=None,
    )
    collector.reached = True
    samples = _collect(collector)

    def per_worker(name: str) -> dict[str, float]:
        return {dict(labels)["worker"]: v for labels, v in named(samples, name).items()}

    assert per_worker("spillway_worker_gpu_memory_used_bytes") == {"0": 3 << 30}
    assert per_worker("spillway_worker_gpu_memory_total_bytes") == {"0": 140 << 30}
    assert per_worker("spillway_worker_gpu_spilled_to_host_bytes") == {"0": 1234}
    assert per_worker("spillway_worker_memory_bytes") == {"0": 100, "1": 100, "2": 100}
    assert not named(samples, "spillway_worker_memory_limit_bytes")  # unlimited: no limit to report
    assert value(samples, "spillway_workers") == 3


def test_a_scheduler_that_does_not_answer_is_cluster_up_0() -> None:
    collector = _ClusterCollector()
    samples = _collect(collector)
    assert value(samples, "spillway_cluster_up") == 0
    assert ("spillway_workers", frozenset()) not in samples



@pytest.mark.gpu
def test_gpu_series_scraped_from_a_local_cuda_cluster(tmp_path: Path, sample_data: dict[str, Path]) -> None:
    """On a GPU machine: each GPU worker's device memory (NVML) is scraped, and the job is counted on the GPU."""
    env = {"SPILLWAY_CLUSTER__BACKEND": "cudf", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]'}
    service = launch_service(tmp_path / "svc", env, timeout=300)
    try:
        with service.client() as client:
            workers = {w.name for w in client.cluster().workers}
            spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": str(tmp_path / "out")}}
            job = wait_terminal(client, client.submit({**spec, "engine": "dask"}).id, timeout=300)
        assert job.state.value == "SUCCEEDED", job.error
        outcome = {"engine": "dask", "device": "gpu", "state": "SUCCEEDED"}
        samples = wait_for(lambda: (s := scrape(service)) and value(s, "spillway_jobs_finished_total", **outcome) == 1 and s, timeout=30, what="the job to be counted")
    finally:
        service.stop()
    used = {dict(labels)["worker"]: v for labels, v in named(samples, "spillway_worker_gpu_memory_used_bytes").items()}
    total = {dict(labels)["worker"]: v for labels, v in named(samples, "spillway_worker_gpu_memory_total_bytes").items()}
    assert set(used) == set(total) == workers and all(0 < used[w] <= total[w] for w in workers)
