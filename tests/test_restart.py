"""Kill the service mid-job, start it again: the job is FAILED 'interrupted', nothing is committed, its staging is gone."""

from __future__ import annotations

import signal
from pathlib import Path

from distributed import Client

from spillway.jobs.sink import TMP_PREFIX
from spillway.jobs.status import JobStatus
from tests.conftest import start_service, wait_for, wait_terminal
from tests.fault_jobs import busy_workers, slow_spec


def test_restart_marks_running_job_interrupted(tmp_path: Path, big_data: dict[str, Path], engine: str) -> None:
    workdir = tmp_path / "svc"
    out = tmp_path / "out"
    queued_spec = {
        "name": "queued", "engine": engine, "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "limit", "n": 100}], "sink": {"path": str(tmp_path / "queued")},
    }
    first = start_service(workdir, extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "1"})
    with first.client() as client:
        running_id = client.submit(slow_spec(engine, big_data, out, name="killed")).id
        queued_id = client.submit(queued_spec).id
        wait_for(lambda: client.get(running_id).state == JobStatus.RUNNING, timeout=60, what="the job to start")
        with Client(client.cluster().scheduler_address, timeout=30) as dask_client:
            wait_for(lambda: busy_workers(dask_client), timeout=90, interval=0.05, what="the job's tasks to run")
    first.stop(signal.SIGKILL)

    second = start_service(workdir, extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "1"})
    try:
        with second.client() as client:
            job = client.get(running_id)
            assert job.state == JobStatus.FAILED
            assert job.error is not None and job.error.code == "interrupted"
            # A job that had not started is not lost: it runs after the restart.
            queued = wait_terminal(client, queued_id, timeout=180)
            assert queued.state == JobStatus.SUCCEEDED, queued.error
            assert not client.list(state=JobStatus.RUNNING).items
            # The old cluster's workers may still be finishing the killed job's tasks: the restart sweeps after them.
            wait_for(lambda: not any(p.name.startswith(TMP_PREFIX + running_id) for p in tmp_path.iterdir()), timeout=40, what="staging swept")
    finally:
        second.stop()
    assert not out.exists()
