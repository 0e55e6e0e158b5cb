"""Faults: a worker killed mid-job; the job still succeeds with the right output."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pandas as pd
from distributed import Client

from jobs.status import JobStatus
from tests.conftest import start_service, wait_for, wait_terminal


def test_worker_sigkill_mid_job_is_recomputed(tmp_path: Path, big_data: dict[str, Path]) -> None:
    service = start_service(tmp_path / "svc")
    out = tmp_path / "out"
    spec = {
        "name": "survives",
        "engine": "dask",  # Dask's recompute of lost partitions; a Polars job is one task, re-run whole
        "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "sort", "by": ["amount"]}, {"op": "drop_duplicates", "subset": ["customer_id", "product_id"]}],
        "sink": {"path": str(out)},
    }
    try:
        with service.client() as api:
            address = api.cluster().scheduler_address
            job_id = api.submit(spec).id
            wait_for(lambda: (j := api.get(job_id)).state == JobStatus.RUNNING and j.progress.done > 0, timeout=90, interval=0.05, what="tasks to finish")
            with Client(address, timeout=30) as dask_client:
                pids = dask_client.run(os.getpid)
            victim = sorted(pids.values())[0]
            os.kill(victim, signal.SIGKILL)
            job = wait_terminal(api, job_id, timeout=240)
    finally:
        service.stop()
    if job.state == JobStatus.SUCCEEDED:
        keys = ["customer_id", "product_id"]
        expected = pd.read_parquet(big_data["sales"], columns=keys).drop_duplicates()
        result = pd.read_parquet(out, columns=keys)
        # Which duplicate survives is Dask's choice; the set of distinct keys is not.
        assert len(result) == len(expected) and not result.duplicated().any()
        assert result.sort_values(keys).reset_index(drop=True).equals(expected.sort_values(keys).reset_index(drop=True))
        assert job.result is not None and job.result.total_rows == len(expected)
    else:  # the job may also fail, but then clearly and with nothing committed
        assert job.state == JobStatus.FAILED and job.error is not None and job.error.message
        assert not out.exists()
    assert job.state == JobStatus.SUCCEEDED, f"expected Dask to recompute the lost partitions: {job.error}"


def test_whole_cluster_dies_job_fails_with_reason_and_service_recovers(tmp_path: Path, big_data: dict[str, Path], sample_data: dict[str, Path]) -> None:
    import psutil

    service = start_service(tmp_path / "svc")
    spec = {
        "name": "doomed",
        "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "sort", "by": ["amount"]}, {"op": "sort", "by": ["customer_id"]}],
        "sink": {"path": str(tmp_path / "doomed")},
    }
    try:
        with service.client() as api:
            old_address = api.cluster().scheduler_address
            job_id = api.submit(spec).id
            wait_for(lambda: api.get(job_id).state == JobStatus.RUNNING, timeout=90, interval=0.05, what="the job to run")
            cluster = next(p for p in psutil.Process(service.process.pid).children() if "cluster.local_process" in " ".join(p.cmdline()))
            os.killpg(os.getpgid(cluster.pid), signal.SIGKILL)  # scheduler, nannies and workers at once
            job = wait_terminal(api, job_id, timeout=120)
            assert job.state == JobStatus.FAILED and job.error is not None
            assert job.error.code in ("cluster_lost", "job_failed") and job.error.message
            assert not (tmp_path / "doomed").exists()
            wait_for(lambda: api.health().status == "ok" and api.cluster().scheduler_address != old_address, timeout=120, interval=0.5, what="a new cluster")
            after = {"name": "after", "source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(tmp_path / "after")}}
            assert wait_terminal(api, api.submit(after).id).state == JobStatus.SUCCEEDED
            assert not api.list(state=JobStatus.RUNNING).items
    finally:
        service.stop()


def test_sink_disk_full_fails_clearly_and_commits_nothing(tmp_path: Path, big_data: dict[str, Path]) -> None:
    import subprocess

    import pytest

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
