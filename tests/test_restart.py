"""Kill the service mid-job, start it again: the job is FAILED 'interrupted' and nothing is committed."""

from __future__ import annotations

import signal
from pathlib import Path

from jobs.sink import TMP_PREFIX
from jobs.status import JobStatus
from tests.conftest import start_service, wait_for, wait_terminal


def test_restart_marks_running_job_interrupted(tmp_path: Path, big_data: dict[str, Path]) -> None:
    workdir = tmp_path / "svc"
    out = tmp_path / "out"
    spec = {
        "name": "killed",
        "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "sort", "by": ["amount"]}, {"op": "drop_duplicates", "subset": ["customer_id", "product_id"]}],
        "sink": {"path": str(out)},
    }
    first = start_service(workdir, extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "1"})
    with first.client() as client:
        running_id = client.submit(spec).id
        queued_id = client.submit({**spec, "name": "queued", "sink": {"path": str(tmp_path / "queued")}}).id
        wait_for(lambda: client.get(running_id).state == JobStatus.RUNNING, timeout=60, what="the job to start")
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
    finally:
        second.stop()
    assert not out.exists()
    assert not any(p.name.startswith(TMP_PREFIX + running_id) for p in tmp_path.iterdir())
