"""The service's end of a job across the GPU workers that cannot go on, run on CPU workers.

The query itself needs GPUs (tests/test_gpu_multi.py); what the service does around it does not:
its check of the ranks' processes through their nannies, the failure it records first, and the
restart of the ranks. Here the "ranks" are the two workers of a real LocalCluster with nannies,
the store a real SQLite database, and one worker is stopped with SIGSTOP.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from distributed import Client, LocalCluster

from spillway.cluster.manager import QUERY_STALLED, WORKER_HUNG, JobManager, _ActiveJob
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import EngineChoice, JobStatus
from spillway.service.store import JobStore

SPEC = JobSpec.model_validate({"name": "across", "source": {"format": "parquet", "path": "/tmp/in.parquet"}, "sink": {"path": "/tmp/out"}})
ACROSS = EngineChoice(engine="polars", device="gpu", reason="across 2 GPU worker(s) with cudf-polars' DaskEngine")


def _running(store: JobStore) -> str:
    job, _ = store.create(SPEC, "cudf")
    assert store.transition(job.id, JobStatus.RUNNING)
    return job.id


def test_a_stopped_rank_fails_its_job_as_worker_hung_and_the_ranks_are_restarted(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'spillway.db'}")
    job_id = _running(store)

    async def scenario() -> tuple[dict[str, int], dict[str, int], _ActiveJob]:
        async with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, asynchronous=True) as cluster, \
                Client(cluster, asynchronous=True) as client:
            manager = JobManager(store, cluster=SimpleNamespace(client=client), hung_worker_s=0.5)  # type: ignore[arg-type]
            before = await client.run(os.getpid)
            ranks = sorted(before)
            active = _ActiveJob(job_id, writer=None, engine=ACROSS, across_workers=ranks)  # type: ignore[arg-type]
            manager._active[job_id] = active
            await manager._fail_jobs_of_stopped_ranks(ranks)
            assert store.get(job_id).state == JobStatus.RUNNING  # nothing stopped: nothing done
            os.kill(before[ranks[0]], signal.SIGSTOP)
            try:
                await manager._fail_jobs_of_stopped_ranks(ranks)  # seen stopped (once /proc says so): the clock starts
                assert store.get(job_id).state == JobStatus.RUNNING
                for _ in range(50):  # stopped for hung_worker_s: failed, then restarted (a busy machine may show the
                    await asyncio.sleep(0.6)  # stop to /proc a check late: the clock then starts a check later)
                    await manager._fail_jobs_of_stopped_ranks(ranks)
                    if store.get(job_id).state != JobStatus.RUNNING:
                        break
                now: dict[str, int] = {}
                for _ in range(300):
                    await asyncio.sleep(0.1)
                    try:  # bounded: a worker still stopped never answers
                        now = await asyncio.wait_for(client.run(os.getpid, on_error="ignore"), 5)
                    except (OSError, TimeoutError):  # a worker restarting as it is asked
                        continue
                    if len(now) == 2 and set(now.values()).isdisjoint(before.values()):
                        break
            finally:
                try:
                    os.kill(before[ranks[0]], signal.SIGCONT)
                except ProcessLookupError:
                    pass
            await asyncio.gather(*manager._sweeps, return_exceptions=True)
            return before, now, active

    before, after, active = asyncio.run(scenario())
    job = store.get(job_id)
    assert job.state == JobStatus.FAILED and job.error is not None and job.error.code == WORKER_HUNG, job.error
    assert sorted(before)[0] in job.error.message and "SPILLWAY_HUNG_WORKER_S" in job.error.message
    assert active.cancel_requested  # its runner ends now; the FAILED recorded first stays
    assert len(after) == 2 and set(after.values()).isdisjoint(before.values())  # both ranks restarted
    assert any("restarting worker(s)" in line for line in active.log.to_list())


def test_a_job_that_ended_first_is_neither_failed_nor_stopped(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'spillway.db'}")
    job_id = _running(store)
    assert store.finish(job_id, JobStatus.SUCCEEDED)
    manager = JobManager(store, cluster=None)  # type: ignore[arg-type]
    active = _ActiveJob(job_id, writer=None, engine=ACROSS, across_workers=["tcp://127.0.0.1:1"])  # type: ignore[arg-type]
    asyncio.run(manager._fail_stopped_job(active, QUERY_STALLED, "stalled"))
    assert store.get(job_id).state == JobStatus.SUCCEEDED and not active.cancel_requested


def _store_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[JobManager, _ActiveJob]:
    """A manager with one running job across GPU workers, whose database refuses to record its end."""
    store = JobStore(f"sqlite:///{tmp_path / 'spillway.db'}")
    job_id = _running(store)

    def down(*_: object, **__: object) -> bool:
        raise OSError("database is locked")

    monkeypatch.setattr(store, "finish", down)
    manager = JobManager(store, cluster=None)  # type: ignore[arg-type]
    return manager, _ActiveJob(job_id, writer=None, engine=ACROSS, across_workers=["tcp://127.0.0.1:1"])  # type: ignore[arg-type]


def test_a_failure_the_database_did_not_take_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, active = _store_down(tmp_path, monkeypatch)
    with pytest.raises(OSError):
        asyncio.run(manager._fail_stopped_job(active, QUERY_STALLED, "stalled"))
    assert not active.failing and not active.cancel_requested  # the next check tries again


def test_a_stall_whose_failure_the_database_did_not_take_is_logged_and_left_to_the_next_stall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    manager, active = _store_down(tmp_path, monkeypatch)
    asyncio.run(manager._fail_stalled_quietly(active, "stalled"))  # raises nothing: it runs as a background task
    assert "could not fail it as stalled" in caplog.text and not active.failing
