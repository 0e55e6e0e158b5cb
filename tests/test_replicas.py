"""Two real `spillway serve` replicas on one PostgreSQL database, each with its own local Dask cluster.

A job queued on a busy replica is run by the other; a cancel sent to one stops a job running on the
other; a replica killed (SIGKILL) mid-job leaves that job FAILED 'interrupted' within the heartbeat
timeout, settled by the survivor, which also takes over the pipeline scheduler's lease and runs the
next pipeline run (one run per logical date still). The job is held mid-run by stopping its worker
with SIGSTOP, so it is still running when its replica dies, however slow the machine.
Skipped without SPILLWAY_TEST_POSTGRES_URL (SQLite is the one-replica case: tests/test_restart.py).
The last test, on SQLite, is one replica that finds itself taken for dead.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from distributed import Client

from spillway.jobs.status import ErrorDetail, JobStatus
from spillway.service.client import SpillwayClient
from spillway.service.replica_heartbeat import SCHEDULER_LEASE
from spillway.service.store import JobStore
from tests.conftest import ServiceProcess, fresh_postgres_schema, start_service, wait_for, wait_terminal
from tests.fault_jobs import polars_task_worker, slow_spec

pytestmark = pytest.mark.slow

TIMEOUT_S = 4.0
REPLICA_ENV = {
    "SPILLWAY_DATABASE_MIGRATE": "on",
    "SPILLWAY_REPLICA_HEARTBEAT_S": "0.5",
    "SPILLWAY_REPLICA_TIMEOUT_S": str(TIMEOUT_S),
    "SPILLWAY_QUEUE_POLL_S": "0.2",
    "SPILLWAY_SCHEDULER_INTERVAL_S": "0.5",
    "SPILLWAY_SCHEDULER_LEASE_S": "3",
    "SPILLWAY_HUNG_WORKER_S": "0",  # the stopped worker must stay stopped
    "SPILLWAY_MAX_CONCURRENT_JOBS": "2",
}


@pytest.fixture()
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL schema of its own (dropped after)."""
    with fresh_postgres_schema() as url:
        yield url


def replica(tmp_path: Path, url: str, name: str) -> ServiceProcess:
    return start_service(tmp_path / name, extra_env={**REPLICA_ENV, "SPILLWAY_DATABASE_URL": url, "SPILLWAY_REPLICA_NAME": name})


def quick(data: dict[str, Path], out: Path) -> dict[str, Any]:
    return {"name": "quick", "engine": "polars", "source": {"format": "parquet", "path": str(data["sales"])},
            "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(out)}}


def running_on(api: Any, job_id: str, name: str) -> bool:
    job = api.get(job_id)
    return job.state == JobStatus.RUNNING and (job.replica or "").startswith(f"{name}-")


def test_two_replicas_share_the_queue_cancel_each_others_jobs_and_survive_a_kill(
    tmp_path: Path, postgres_url: str, big_data: dict[str, Path], sample_data: dict[str, Path]
) -> None:
    store = JobStore(postgres_url, migrate=True)
    stopped: list[int] = []
    a = replica(tmp_path, postgres_url, "a")
    b: ServiceProcess | None = None
    try:
        # Alone, a takes the scheduler lease.
        wait_for(lambda: (held := store.replicas.lease_holder(SCHEDULER_LEASE)) and held[0].startswith("a-"), timeout=30, what="a to hold the lease")
        pipeline = {
            "name": "handover", "schedule": "0 0 1 1 *", "timezone": "UTC",  # fires once a year: runs come from triggers
            "spec": {**quick(sample_data, tmp_path / "runs" / "{{ ds }}"), "name": "handover_{{ ds }}"},
        }
        assert httpx.post(f"{a.url}/pipelines", json=pipeline, timeout=30).status_code == 201

        with a.client() as api_a, Client(api_a.cluster().scheduler_address, timeout=30) as dask_a:
            pids = dask_a.run(os.getpid)
            hung = api_a.submit(slow_spec("polars", big_data, tmp_path / "hung")).id
            worker = wait_for(lambda: polars_task_worker(dask_a, hung), timeout=90, interval=0.05, what="the hung job's task to run")
            os.kill(pids[worker], signal.SIGSTOP)
            stopped.append(pids[worker])
            doomed = api_a.submit(slow_spec("polars", big_data, tmp_path / "cancelled", name="cancelled")).id
            wait_for(lambda: running_on(api_a, doomed, "a"), timeout=60, what="the second job to run on a")
            waiting = api_a.submit(quick(sample_data, tmp_path / "waiting")).id  # a runs two jobs: this one waits
            assert api_a.get(waiting).state == JobStatus.PENDING

        b = replica(tmp_path, postgres_url, "b")
        with b.client() as api_b, Client(api_b.cluster().scheduler_address, timeout=30) as dask_b:
            # b finds the job queued on a through the database and runs it.
            done = wait_terminal(api_b, waiting, timeout=120)
            assert done.state == JobStatus.SUCCEEDED and (done.replica or "").startswith("b-"), (done.state, done.replica, done.error)
            # A cancel sent to b stops the job running on a.
            cancelled = api_b.cancel(doomed)
            assert cancelled.state == JobStatus.CANCELLED and (cancelled.replica or "").startswith("a-")
            wait_for(lambda: any(line.endswith(" CANCELLED") for line in api_b.logs(doomed)), timeout=30, what="the cancelled job's log")
            assert running_on(api_b, hung, "a")
            # b runs a job of its own, held mid-run too: a's death must not touch it.
            pids_b = dask_b.run(os.getpid)
            own = api_b.submit(slow_spec("polars", big_data, tmp_path / "own", name="own")).id
            worker_b = wait_for(lambda: polars_task_worker(dask_b, own), timeout=90, interval=0.05, what="b's job's task to run")
            os.kill(pids_b[worker_b], signal.SIGSTOP)
            stopped.append(pids_b[worker_b])

            a.stop(signal.SIGKILL)
            # b takes a for dead within the heartbeat timeout and settles its job: never RUNNING forever.
            failed = wait_terminal(api_b, hung, timeout=TIMEOUT_S + 60)
            assert failed.state == JobStatus.FAILED and failed.error is not None and failed.error.code == "interrupted"
            assert f"replica {failed.replica}" in failed.error.message and failed.replica.startswith("a-")
            assert [r for r, _ in store.replicas.live()] == [store.get(done.id).replica], "a's row is gone, b's is there"
            assert running_on(api_b, own, "b"), "the live replica's running job is left alone"

            # b takes the scheduler over: a triggered run gets its job, run by b.
            wait_for(lambda: store.replicas.lease_holder(SCHEDULER_LEASE)[0].startswith("b-"), timeout=30, what="b to take the lease")
            run = httpx.post(f"{b.url}/pipelines/handover/runs", json={"logical_date": "2026-11-30"}, timeout=30)
            assert run.status_code == 201, run.text
            again = httpx.post(f"{b.url}/pipelines/handover/runs", json={"logical_date": "2026-11-30"}, timeout=30)
            assert again.status_code == 409, "one run per logical date"

            def run_state() -> str | None:
                (item,) = httpx.get(f"{b.url}/pipelines/handover/runs", timeout=30).json()["items"]
                return item["state"] if item["state"] in ("SUCCEEDED", "FAILED") else None

            assert wait_for(run_state, timeout=120, what="the pipeline run to finish") == "SUCCEEDED"
            (item,) = httpx.get(f"{b.url}/pipelines/handover/runs", timeout=30).json()["items"]
            assert api_b.get(item["attempts"][-1]["job_id"]).replica.startswith("b-")
        assert not (tmp_path / "hung").exists() and not (tmp_path / "cancelled").exists()
    finally:
        a.stop(signal.SIGKILL)
        for pid in stopped:
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
        if b is not None:
            b.stop()
        store.close()


@dataclass
class HeldJob:
    """A job of a one-replica service (SQLite) whose Polars task runs on a worker held with SIGSTOP."""

    api: SpillwayClient
    store: JobStore
    job_id: str
    worker_pid: int | None

    def release(self) -> None:
        """Let the held worker run on."""
        if self.worker_pid is not None:
            os.kill(self.worker_pid, signal.SIGCONT)
            self.worker_pid = None


@contextmanager
def held_job(tmp_path: Path, big_data: dict[str, Path], name: str, sink: Path) -> Iterator[HeldJob]:
    """Start a replica named ``name``, submit a slow Polars job writing ``sink`` and hold its worker; kill it after if still held."""
    workdir = tmp_path / "svc"
    service = start_service(workdir, extra_env={**REPLICA_ENV, "SPILLWAY_REPLICA_NAME": name})
    store = JobStore(f"sqlite:///{workdir / 'spillway.db'}", migrate=False)
    held: HeldJob | None = None
    try:
        with service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
            pids = dask_client.run(os.getpid)
            job_id = api.submit(slow_spec("polars", big_data, sink)).id
            worker = wait_for(lambda: polars_task_worker(dask_client, job_id), timeout=90, interval=0.05, what="the job's task to run")
            os.kill(pids[worker], signal.SIGSTOP)
            held = HeldJob(api, store, job_id, pids[worker])
            yield held
    finally:
        if held is not None and held.worker_pid is not None and psutil.pid_exists(held.worker_pid):
            os.kill(held.worker_pid, signal.SIGKILL)
        service.stop()
        store.close()


def test_a_replica_taken_for_dead_stops_its_job_and_runs_on(tmp_path: Path, big_data: dict[str, Path], sample_data: dict[str, Path]) -> None:
    """One replica (SQLite) whose heartbeat row another replica deleted, as after a stall past the timeout:
    it fails its running job as interrupted, saying why, registers again and runs the next job."""
    with held_job(tmp_path, big_data, "stalled", tmp_path / "held") as held:
        api, store = held.api, held.store
        me = api.get(held.job_id).replica
        assert me is not None and me.startswith("stalled-")
        store.replicas.remove(me)  # what another replica does to one silent past the timeout
        failed = wait_terminal(api, held.job_id, timeout=60)
        assert failed.state == JobStatus.FAILED and failed.error is not None and failed.error.code == "interrupted"
        assert "taken for dead" in failed.error.message and "SPILLWAY_REPLICA_TIMEOUT_S" in failed.error.message
        wait_for(lambda: me in [r for r, _ in store.replicas.live()], timeout=30, what="the replica to register again")
        after = wait_terminal(api, api.submit(quick(sample_data, tmp_path / "after")).id, timeout=120)
        assert after.state == JobStatus.SUCCEEDED and after.replica == me
    assert not (tmp_path / "held").exists()


def test_a_replica_that_reaches_its_commit_after_another_settled_its_job_commits_nothing(tmp_path: Path, big_data: dict[str, Path]) -> None:
    """A replica stalled past the timeout (here: its job's worker held with SIGSTOP) while another
    replica settles its job FAILED: when the query then finishes, the commit is refused — the job
    stays as the other replica left it and no output lands (cluster/manager.py ``_fenced_commit``)."""
    with held_job(tmp_path, big_data, "late", tmp_path / "late_out") as held:
        # What another replica does to a job whose replica it took for dead.
        assert held.store.finish(held.job_id, JobStatus.FAILED, error=ErrorDetail(code="interrupted", message="settled by another replica"))
        held.release()
        wait_for(lambda: any("was not committed" in line for line in held.api.logs(held.job_id)), timeout=120, what="the refused commit")
        job = held.api.get(held.job_id)
        assert job.state == JobStatus.FAILED and job.error is not None and job.error.message == "settled by another replica"
        assert job.result is None
    assert not (tmp_path / "late_out").exists()
