"""Faults of the Polars engine on the GPU (issue 19 item 6), on two workers sharing one GPU.

A worker killed mid-query has its task run again on the other worker, which gives the right
answer; a cancel mid-query returns within a bounded time, commits nothing, and the next job runs.
Marked ``gpu``: they need a GPU and cudf-polars (``allow_gpu_sharing`` puts both workers on GPU 0).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client

from spillway.jobs.status import JobStatus
from spillway.service.launcher import ServiceProcess, launch_service
from tests.conftest import wait_for, wait_terminal
from tests.fault_jobs import check_slow_output, polars_task_worker, shared_gpu_env, slow_spec, worker_addresses

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def shared_gpu_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    pytest.importorskip("cudf_polars")
    service = launch_service(tmp_path_factory.mktemp("shared_gpu"), shared_gpu_env(), timeout=300)
    yield service
    service.stop()


def test_two_workers_share_the_gpu(shared_gpu_service: ServiceProcess) -> None:
    with shared_gpu_service.client() as api:
        info = api.cluster()
    assert len(info.workers) == 2 and {w.gpu.index for w in info.workers if w.gpu} == {"0"}


def test_a_worker_killed_mid_query_has_the_query_run_again_on_the_other(
    shared_gpu_service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with shared_gpu_service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
        pids = dask_client.run(os.getpid)
        job_id = api.submit(slow_spec("polars", big_data, out)).id
        victim = wait_for(lambda: polars_task_worker(dask_client, job_id), timeout=120, interval=0.02, what="the job's task to run")
        os.kill(pids[victim], signal.SIGKILL)
        job = wait_terminal(api, job_id, timeout=300)
        assert job.state == JobStatus.SUCCEEDED, job.error
        assert job.progress.engine is not None and job.progress.engine.device == "gpu"
        wait_for(lambda: len(worker_addresses(dask_client)) == 2, timeout=120, what="the killed worker's replacement")
    check_slow_output("polars", big_data, out)


def test_a_cancel_mid_query_returns_in_bounded_time_and_the_next_job_runs(
    shared_gpu_service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "cancelled"
    with shared_gpu_service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
        job_id = api.submit(slow_spec("polars", big_data, out)).id
        wait_for(lambda: polars_task_worker(dask_client, job_id), timeout=120, interval=0.02, what="the job's task to run")
        start = time.monotonic()
        cancelled = api.cancel(job_id)
        seconds = time.monotonic() - start
        assert cancelled.state == JobStatus.CANCELLED and seconds < 60, (cancelled.state, seconds)
        after = wait_terminal(api, api.submit(slow_spec("polars", big_data, tmp_path / "after")).id, timeout=300)
        assert after.state == JobStatus.SUCCEEDED, after.error
    assert not out.exists()
    check_slow_output("polars", big_data, tmp_path / "after")
