"""Faults on both engines: a worker killed mid-job, the whole cluster dying, a cancel of a running query.

A killed worker: Dask runs what it lost again. On the Dask engine that is the lost partitions;
on the Polars engine, whose job is one task, the whole query, on another worker, from an empty
staging directory. Either way the output is right and complete. The whole cluster dying fails
the running job as ``cluster_lost`` with nothing committed, and the next job runs on a new cluster.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client

from spillway.jobs.sink import TMP_PREFIX, SinkWriter
from spillway.jobs.spec import SinkSpec
from spillway.jobs.status import JobStatus
from tests.conftest import start_service, wait_for, wait_terminal
from tests.fault_jobs import busy_workers, check_slow_output, polars_task_worker, slow_spec


def _running_on(dask_client: Client, engine: str, job_id: str) -> str | None:
    """The worker running the job's work now: the Polars task's worker, or one with Dask-engine tasks."""
    if engine == "polars":
        return polars_task_worker(dask_client, job_id)
    return next(iter(busy_workers(dask_client)), None)


def test_worker_sigkill_mid_job_is_recomputed(tmp_path: Path, big_data: dict[str, Path], engine: str) -> None:
    service = start_service(tmp_path / "svc")
    out = tmp_path / "out"
    try:
        with service.client() as api:
            job_id = api.submit(slow_spec(engine, big_data, out)).id
            with Client(api.cluster().scheduler_address, timeout=30) as dask_client:
                if engine == "dask":  # some partitions done, so that some are lost with the worker
                    wait_for(lambda: (j := api.get(job_id)).state == JobStatus.RUNNING and j.progress.done > 0, timeout=90, interval=0.05, what="tasks to finish")
                victim = wait_for(lambda: _running_on(dask_client, engine, job_id), timeout=90, interval=0.05, what="the job's work to run")
                pid = dask_client.run(os.getpid, workers=[victim])[victim]
                if engine == "polars":
                    # What a killed attempt may leave half-written in staging: the rerun must not commit it.
                    staging = SinkWriter(SinkSpec(path=str(out)), job_id).staging
                    staging.mkdir(parents=True, exist_ok=True)
                    pd.DataFrame({"customer_id": [-1], "pairs": [1], "right_total": [1.0]}).to_parquet(staging / "part.000007.parquet")
                os.kill(pid, signal.SIGKILL)
            job = wait_terminal(api, job_id, timeout=300)
    finally:
        service.stop()
    assert job.state == JobStatus.SUCCEEDED, f"expected Dask to run the lost work again: {job.error}"
    check_slow_output(engine, big_data, out)
    assert job.result is not None and job.result.total_rows == len(pd.read_parquet(out))
    assert sorted(f.path for f in job.result.files) == sorted(p.name for p in out.glob("part.*")), "the manifest lists exactly the files written"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_whole_cluster_dies_job_fails_with_reason_and_service_recovers(
    tmp_path: Path, big_data: dict[str, Path], sample_data: dict[str, Path], engine: str
) -> None:
    import psutil

    service = start_service(tmp_path / "svc")
    doomed = tmp_path / "doomed"
    try:
        with service.client() as api:
            old_address = api.cluster().scheduler_address
            job_id = api.submit(slow_spec(engine, big_data, doomed)).id
            with Client(old_address, timeout=30) as dask_client:
                wait_for(lambda: _running_on(dask_client, engine, job_id), timeout=90, interval=0.05, what="the job's work to run")
            cluster = next(p for p in psutil.Process(service.process.pid).children() if "spillway.cluster.local_process" in " ".join(p.cmdline()))
            os.killpg(os.getpgid(cluster.pid), signal.SIGKILL)  # scheduler, nannies and workers at once
            job = wait_terminal(api, job_id, timeout=120)
            assert job.state == JobStatus.FAILED and job.error is not None
            assert job.error.code == "cluster_lost", job.error
            assert "nothing was committed" in job.error.message
            assert not doomed.exists()
            wait_for(lambda: api.health().status == "ok" and api.cluster().scheduler_address != old_address, timeout=120, interval=0.5, what="a new cluster")
            after = {
                "name": "after", "engine": engine, "source": {"format": "parquet", "path": str(sample_data["sales"])},
                "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(tmp_path / "after")},
            }
            assert wait_terminal(api, api.submit(after).id).state == JobStatus.SUCCEEDED
            assert not api.list(state=JobStatus.RUNNING).items
    finally:
        service.stop()
    wait_for(lambda: not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)], timeout=40, what="staging swept")


@pytest.mark.engines("polars")
def test_cancel_of_a_polars_job_leaves_no_worker_running_its_query(tmp_path: Path, big_data: dict[str, Path], engine: str) -> None:
    """The worker running the query is restarted after the task is cancelled, so Dask does not start it again elsewhere."""
    service = start_service(tmp_path / "svc")
    out = tmp_path / "out"
    try:
        with service.client() as api:
            job_id = api.submit(slow_spec(engine, big_data, out)).id
            with Client(api.cluster().scheduler_address, timeout=30) as dask_client:
                wait_for(lambda: _running_on(dask_client, engine, job_id), timeout=90, interval=0.05, what="the query to run")
                assert api.cancel(job_id).state == JobStatus.CANCELLED

                def busy() -> dict[str, int]:
                    try:
                        return {a: n for a, n in dask_client.run(lambda dask_worker: len(dask_worker.active_threads)).items() if n}
                    except Exception as exc:  # noqa: BLE001 - a worker restarting counts as busy
                        return {"restarting": repr(exc)}  # type: ignore[dict-item]

                # Bounded by the restart (seconds); a query started again elsewhere would run for tens of seconds.
                wait_for(lambda: not busy(), timeout=20, interval=0.5, what="no worker running the cancelled query")
                assert wait_for(lambda: len(dask_client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.workers))) == 2, timeout=60)
    finally:
        service.stop()
    assert not out.exists()


def test_sink_disk_full_fails_clearly_and_commits_nothing(tmp_path: Path, big_data: dict[str, Path]) -> None:
    import subprocess

    full = tmp_path / "tiny"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill up (needs root): {mounted.stderr.strip()}")
    service = start_service(tmp_path / "svc")
    try:
        spec = {"name": "no_room", "source": {"format": "parquet", "path": str(big_data["sales"])}, "sink": {"path": str(full / "out")}}
        with service.client() as api:
            job = wait_terminal(api, api.submit(spec).id, timeout=120)
        assert job.state == JobStatus.FAILED and job.error is not None
        assert "No space left" in job.error.message or "ENOSPC" in job.error.message or "space" in job.error.message.lower()
        assert list(full.iterdir()) == [], "no output and no staging left behind"
    finally:
        service.stop()
        subprocess.run(["umount", str(full)], check=False)


def _panic_on_writes(engine: str) -> None:
    """On a worker: from now on the job's write raises what a panic in a Rust extension raises
    (pyo3's ``PanicException``, a ``BaseException``, not an ``Exception``)."""
    from polars.exceptions import PanicException

    def panic(*args: object, **kwargs: object) -> None:
        raise PanicException("a panic injected into the write")

    if engine == "polars":
        import spillway.jobs.polars_run

        spillway.jobs.polars_run.write_output = panic  # type: ignore[assignment]
    else:
        from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

        ArrowDatasetEngine.write_partition = classmethod(panic)  # type: ignore[assignment]


def test_a_task_raising_a_base_exception_fails_its_job_and_the_next_job_runs(
    tmp_path: Path, sample_data: dict[str, Path], engine: str
) -> None:
    """A panic in a task's Rust code (Polars', on either engine) reaches the service as a ``BaseException``.
    It fails the job with its message; before, it escaped the job's runner, which ended: the job stayed
    RUNNING and, with one runner, no job ran again."""
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "1"})

    def spec(name: str) -> dict[str, object]:
        return {"name": name, "engine": engine, "source": {"format": "parquet", "path": str(sample_data["sales"])},
                "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(tmp_path / name)}}

    try:
        with service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
            dask_client.run(_panic_on_writes, engine)
            job = wait_terminal(api, api.submit(spec("panics")).id, timeout=60)
            assert job.state == JobStatus.FAILED and job.error is not None, job
            assert "a panic injected into the write" in job.error.message, job.error
            assert not (tmp_path / "panics").exists()
            dask_client.restart()  # the workers without the injection
            assert wait_terminal(api, api.submit(spec("after")).id, timeout=60).state == JobStatus.SUCCEEDED
    finally:
        service.stop()
