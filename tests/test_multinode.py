"""The service joined to a separate Dask cluster, the multi-node recipe of deploy/README.md on one machine.

A ``dask scheduler`` and two ``dask worker`` processes are started with the ``dask`` CLI, as on
real nodes, and the service joins them through ``SPILLWAY_CLUSTER__SCHEDULER_ADDRESS``. Then a
worker is killed while a job runs: the job must end (succeed with the right output, or fail
with a clear error), never hang and never stay RUNNING.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from spillway.jobs.sink import TMP_PREFIX
from spillway.jobs.status import JobStatus
from spillway.service.launcher import launch_service
from tests.conftest import ROOT, ServiceProcess, wait_for, wait_terminal

pytestmark = pytest.mark.slow

DASK = Path(sys.executable).with_name("dask")


@dataclass
class DaskCluster:
    """A scheduler and its workers, each a ``dask`` CLI process in its own process group."""

    address: str
    dashboard_port: int
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker's whole process group (nanny and worker): a node that vanishes."""
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait(30)


def _spawn(args: list[str], log: Path, pythonpath: list[str] | None = None) -> subprocess.Popen[bytes]:
    # The scheduler unpickles the progress plugin (cluster.progress): Spillway must be importable
    # there, exactly as on a real scheduler node.
    path = [*(pythonpath or [str(ROOT)]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    with open(log, "wb") as out:
        return subprocess.Popen([str(DASK), *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process group we started: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_scheduler_file(path: Path, scheduler: subprocess.Popen[bytes]) -> dict[str, Any] | None:
    """The scheduler file's contents once written; fails at once if the scheduler exited."""
    if scheduler.poll() is not None:
        raise AssertionError(f"dask scheduler exited with code {scheduler.returncode}")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not written yet, or half written


# A scheduler's sitecustomize that hides Spillway, as on a node where it was never installed
# (this virtualenv has Spillway installed in editable mode, so PYTHONPATH alone cannot).
_HIDE_SPILLWAY = """
import sys

class _NoSpillway:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "spillway":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoSpillway())
"""


@pytest.fixture()
def dask_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DaskCluster]:
    """``dask scheduler`` on a free loopback port and two CPU ``dask worker`` processes.

    Indirect parametrization with ``"no-spillway-on-scheduler"`` starts the scheduler without Spillway.
    """
    sched_file = tmp_path / "sched.json"
    pythonpath = None
    if getattr(request, "param", None) == "no-spillway-on-scheduler":
        (tmp_path / "hide").mkdir()
        (tmp_path / "hide" / "sitecustomize.py").write_text(_HIDE_SPILLWAY)
        pythonpath = [str(tmp_path / "hide")]
    scheduler = _spawn(
        ["scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(sched_file), "--dashboard-address", "127.0.0.1:0",
         "--dashboard-prefix", "/dashboard"],  # as deploy/README.md says, for the service's dashboard proxy
        tmp_path / "scheduler.log",
        pythonpath,
    )
    cluster: DaskCluster | None = None
    try:
        info = wait_for(lambda: _read_scheduler_file(sched_file, scheduler), timeout=60, what="the scheduler file")
        cluster = DaskCluster(info["address"], int(info["services"]["dashboard"]), scheduler)
        for i in range(2):
            name = f"worker-{i}"
            cluster.workers[name] = _spawn(
                [
                    "worker", cluster.address, "--name", name, "--host", "127.0.0.1", "--nthreads", "1", "--memory-limit", "2GB",
                    "--no-dashboard", "--local-directory", str(tmp_path / name),
                ],
                tmp_path / f"{name}.log",
            )
        yield cluster
    finally:
        for process in [*(cluster.workers.values() if cluster else []), scheduler]:
            _stop(process)
        # Shown by pytest only when the test failed: what the scheduler and workers said.
        print("\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(tmp_path.glob("*.log"))))


def _workers_seen(http: httpx.Client) -> int:
    """How many workers GET /cluster reports."""
    return len(http.get("/cluster").json()["workers"])


@pytest.fixture()
def joined_service(dask_cluster: DaskCluster, big_data: dict[str, Path], sample_data: dict[str, Path], tmp_path: Path) -> Iterator[ServiceProcess]:
    """The service joined to ``dask_cluster`` by address; it starts no cluster of its own."""
    roots = [str(big_data["sales"].parent), str(sample_data["sales"].parent), str(tmp_path)]
    env = {
        "SPILLWAY_CLUSTER__SCHEDULER_ADDRESS": dask_cluster.address,
        "SPILLWAY_CLUSTER__BACKEND": "pandas",
        "SPILLWAY_ALLOWED_ROOTS": json.dumps(roots),
    }
    service = launch_service(tmp_path / "svc", env)
    try:
        yield service
    finally:
        service.stop()


def test_service_joins_the_external_cluster(dask_cluster: DaskCluster, joined_service: ServiceProcess) -> None:
    with httpx.Client(base_url=joined_service.url, timeout=30) as http:
        wait_for(lambda: _workers_seen(http) == 2, timeout=60, what="both workers to join")
        cluster = http.get("/cluster").json()
        assert cluster["kind"] == "external" and cluster["backend"] == "pandas"
        assert cluster["scheduler_address"] == dask_cluster.address and cluster["protocol"] == "tcp"
        assert sorted(w["name"] for w in cluster["workers"]) == ["worker-0", "worker-1"]
        assert cluster["total_threads"] == 2 and all(w["memory_limit"] == 2_000_000_000 for w in cluster["workers"])
        # The link is the service's proxy of the scheduler's own dashboard, not one the service started.
        assert cluster["dashboard_link"] == f"{joined_service.url}/dashboard/status"
        assert http.get(f"http://127.0.0.1:{dask_cluster.dashboard_port}/dashboard/status").status_code == 200
        page = http.get("/dashboard/status", timeout=90)
        assert page.status_code == 200 and "render_items" in page.text, "the proxy reaches the joined scheduler's dashboard"
        health = http.get("/healthz")
        assert health.status_code == 200 and health.json()["workers"] == 2
    # The service started nothing: stopping it leaves the cluster running.
    joined_service.stop()
    assert dask_cluster.scheduler.poll() is None and all(p.poll() is None for p in dask_cluster.workers.values())


def test_worker_killed_mid_job_never_hangs(
    dask_cluster: DaskCluster, joined_service: ServiceProcess, big_data: dict[str, Path], sample_data: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "sorted"
    # A sort shuffles every partition across both workers: work and data live on each of them.
    spec = {
        "name": "sorted_under_worker_loss",
        "engine": "dask",  # a shuffle across both workers; a Polars job is one task on one worker
        "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "sort", "by": ["amount", "order_id"]}],
        "sink": {"path": str(out)},
    }
    expected_rows = len(pd.read_parquet(big_data["sales"], columns=["order_id"]))
    with joined_service.client() as api, httpx.Client(base_url=joined_service.url, timeout=30) as http:
        wait_for(lambda: _workers_seen(http) == 2, timeout=60, what="both workers to join")
        names = {w["address"]: w["name"] for w in http.get("/cluster").json()["workers"]}
        job_id = api.submit(spec).id

        def midway() -> Any:
            job = api.get(job_id)
            if job.state.is_terminal():
                raise AssertionError(f"the job ended before a worker could be killed: {job.state} {job.error}")
            return job.state == JobStatus.RUNNING and job.progress.total // 3 <= job.progress.done < job.progress.total and job

        # A third of the way: both workers hold shuffle pieces that the rest of the job needs.
        running = wait_for(midway, timeout=120, interval=0.05, what="the job to be a third of the way through")
        # Kill the worker that has done the most of this job's tasks: it holds the most results.
        busiest = max(running.progress.tasks_per_worker.items(), key=lambda kv: kv[1], default=(None, 0))[0]
        victim = names.get(busiest, "worker-1")
        dask_cluster.kill_worker(victim)
        assert api.get(job_id).state == JobStatus.RUNNING, "the worker died while the job ran"

        final = wait_terminal(api, job_id, timeout=240)  # bounded: a hang fails here
        assert final.state in (JobStatus.SUCCEEDED, JobStatus.FAILED), final
        if final.state == JobStatus.SUCCEEDED:
            # Lost tasks were recomputed on the survivor: every row is there, in order.
            result = pd.read_parquet(out, columns=["amount"])
            assert len(result) == expected_rows
            assert final.result is not None and final.result.total_rows == expected_rows
            assert result.amount.is_monotonic_increasing
            # Progress took back the keys lost with the worker and counted them again.
            assert final.progress.total > 0 and final.progress.done == final.progress.total
        else:
            assert final.error is not None and final.error.code and final.error.message, final
            assert not out.exists(), "a failed job commits nothing"
        assert final.finished_at is not None
        assert api.list(state=JobStatus.RUNNING).total == 0, "no job is left RUNNING"
        wait_for(lambda: not any(p.name.startswith(TMP_PREFIX) for p in tmp_path.iterdir()), timeout=30, what="staging swept")

        # The service saw the loss and keeps serving on the survivor.
        wait_for(lambda: _workers_seen(http) == 1, timeout=60, what="the scheduler to drop the dead worker")
        assert http.get("/healthz").status_code == 200
        after = {
            "name": "after_loss",
            "source": {"format": "parquet", "path": str(sample_data["sales"])},
            "steps": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}}}],
            "sink": {"path": str(tmp_path / "after")},
        }
        again = wait_terminal(api, api.submit(after).id, timeout=120)
        assert again.state == JobStatus.SUCCEEDED, again.error
        assert pd.read_parquet(tmp_path / "after").n.sum() == len(pd.read_parquet(sample_data["sales"], columns=["order_id"]))


@pytest.mark.parametrize("dask_cluster", ["no-spillway-on-scheduler"], indirect=True)
def test_scheduler_without_spillway_fails_jobs_clearly(dask_cluster: DaskCluster, joined_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    # deploy/README.md: Spillway must be installed on the scheduler, where the progress plugin runs.
    # The Dask engine's progress plugin runs on the scheduler; a Polars job registers none.
    spec = {"name": "no_plugin", "engine": "dask", "source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [], "sink": {"path": str(tmp_path / "out")}}
    with joined_service.client() as api:
        job = wait_terminal(api, api.submit(spec).id, timeout=120)
    assert job.state == JobStatus.FAILED and job.error is not None
    assert "ModuleNotFoundError" in job.error.message and "spillway" in job.error.message, job.error
    assert not (tmp_path / "out").exists()
