"""Run timeouts: a job that runs too long, a worker hung by SIGSTOP; the job fails as timed_out and the cluster recovers."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from distributed import Client

from spillway.jobs.sink import TMP_PREFIX
from spillway.jobs.status import JobStatus
from spillway.service.client import SpillwayClient
from tests.conftest import ServiceProcess, start_service, wait_for, wait_terminal
from tests.fault_jobs import busy_workers, check_slow_output, slow_spec, worker_addresses

DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def timeout_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """A service whose jobs time out after 30 s unless their spec says otherwise (at most 600 s)."""
    service = start_service(
        tmp_path_factory.mktemp("timeouts"),
        extra_env={"SPILLWAY_DEFAULT_JOB_TIMEOUT_S": str(DEFAULT_TIMEOUT_S), "SPILLWAY_MAX_JOB_TIMEOUT_S": str(MAX_TIMEOUT_S)},
    )
    yield service
    service.stop()


def _quick(engine: str, data: dict[str, Path], out: Path) -> dict[str, object]:
    return {"name": "after", "engine": engine, "source": {"format": "parquet", "path": str(data["sales"])},
            "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(out)}}


@pytest.mark.parametrize("timeout_s", [MAX_TIMEOUT_S + 1, 0, -5])
def test_a_timeout_over_the_maximum_or_not_positive_is_a_422_naming_the_field(
    timeout_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, timeout_s: float
) -> None:
    spec = {**_quick("polars", sample_data, tmp_path / "out"), "timeout_s": timeout_s}
    response = httpx.post(f"{timeout_service.url}/jobs", json=spec, timeout=30)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "timeout_s", error
    if timeout_s > 0:
        assert f"maximum of {MAX_TIMEOUT_S} s" in error["message"]
    assert httpx.post(f"{timeout_service.url}/jobs", json={**spec, "timeout_s": MAX_TIMEOUT_S}, timeout=30).status_code == 202


def test_a_job_past_its_own_timeout_fails_as_timed_out_and_commits_nothing(
    timeout_service: ServiceProcess, big_data: dict[str, Path], sample_data: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "slow"
    with timeout_service.client() as api:
        job_id = api.submit(slow_spec("polars", big_data, out, timeout_s=3)).id  # tens of seconds of work
        job = wait_terminal(api, job_id, timeout=120)
        assert job.state == JobStatus.FAILED and job.error is not None
        assert job.error.code == "timed_out" and job.error.field == "timeout_s"
        assert "more than 3 s (its spec's timeout_s)" in job.error.message and "nothing was committed" in job.error.message
        assert any("restarting worker" in line for line in api.logs(job_id))
        assert wait_terminal(api, api.submit(_quick("polars", sample_data, tmp_path / "after")).id).state == JobStatus.SUCCEEDED
    assert not out.exists()
    wait_for(lambda: not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)], timeout=40, what="staging swept")


@dataclass
class HungWorker:
    """A job running on a live service, and the worker under it stopped with SIGSTOP: alive, connected, silent."""

    api: SpillwayClient
    dask_client: Client
    job_id: str
    address: str
    pid: int

    def gone(self) -> bool:
        """Whether its process was killed (by its nanny, on a restart)."""
        return not psutil.pid_exists(self.pid) or psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE


@contextmanager
def hung_worker(service: ServiceProcess, spec: dict[str, object]) -> Iterator[HungWorker]:
    """Submit ``spec``, stop a worker running its tasks, and kill that worker at the end if it is still there."""
    stopped: int | None = None
    try:
        with service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
            pids = dask_client.run(os.getpid)  # before any worker stops answering
            job_id = api.submit(spec).id
            victim = wait_for(lambda: next(iter(busy_workers(dask_client)), None), timeout=90, interval=0.05, what="the job's tasks to run")
            stopped = pids[victim]
            os.kill(stopped, signal.SIGSTOP)
            yield HungWorker(api, dask_client, job_id, victim, stopped)
    finally:
        if stopped is not None and psutil.pid_exists(stopped):
            os.kill(stopped, signal.SIGKILL)


def test_a_hung_worker_times_the_job_out_and_the_cluster_recovers(
    timeout_service: ServiceProcess, big_data: dict[str, Path], sample_data: dict[str, Path], tmp_path: Path, engine: str
) -> None:
    out = tmp_path / "hung"
    with hung_worker(timeout_service, slow_spec(engine, big_data, out)) as hung:  # no timeout_s: the service's default
        job = wait_terminal(hung.api, hung.job_id, timeout=DEFAULT_TIMEOUT_S + 120)
        assert job.state == JobStatus.FAILED and job.error is not None and job.error.code == "timed_out", job.error
        assert f"more than {DEFAULT_TIMEOUT_S} s" in job.error.message and "SPILLWAY_DEFAULT_JOB_TIMEOUT_S" in job.error.message
        # The hung worker was restarted (its process killed by its nanny) and the cluster has two workers again.
        wait_for(hung.gone, timeout=60, what="the hung worker to go")
        wait_for(lambda: len(worker_addresses(hung.dask_client)) == 2 and hung.address not in hung.dask_client.run(os.getpid), timeout=60, what="two workers")
        after = wait_terminal(hung.api, hung.api.submit(_quick(engine, sample_data, tmp_path / "after")).id)
        assert after.state == JobStatus.SUCCEEDED, after.error
    assert not out.exists()
    wait_for(lambda: not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)], timeout=40, what="staging swept")


@pytest.fixture(scope="module")
def watched_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """A service that restarts a worker silent for 5 s (SPILLWAY_HUNG_WORKER_S), long before any job's timeout."""
    service = start_service(tmp_path_factory.mktemp("hung_watch"), extra_env={"SPILLWAY_HUNG_WORKER_S": "5"})
    yield service
    service.stop()


def test_a_hung_worker_is_restarted_and_the_job_runs_on_to_the_right_answer(
    watched_service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path, engine: str
) -> None:
    out = tmp_path / "rescued"
    with hung_worker(watched_service, slow_spec(engine, big_data, out)) as hung:
        job = wait_terminal(hung.api, hung.job_id, timeout=240)
        assert job.state == JobStatus.SUCCEEDED, job.error  # not its one-day timeout: the watch restarted the worker
        lines = hung.api.logs(hung.job_id)
        assert any(hung.address in line and "sent no heartbeat for 5 s" in line for line in lines), lines
        wait_for(hung.gone, timeout=60, what="the hung worker to go")
        wait_for(lambda: len(worker_addresses(hung.dask_client)) == 2, timeout=60, what="two workers")
    check_slow_output(engine, big_data, out)
