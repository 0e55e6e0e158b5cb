"""``GET /cluster`` says what runs where: each running job and the workers its tasks run on, owner-filtered;
and a running job's log can be read while it runs.

A real service on a 2-worker LocalCluster runs a job long enough to be seen mid-run (the fault
tests' slow jobs), on each engine; with auth on, another token does not see it and an admin does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spillway.cluster.manager import key_text
from spillway.jobs.status import JobStatus
from spillway.service.client import SpillwayClient
from tests.conftest import ServiceProcess, start_service, wait_for, wait_terminal
from tests.fault_jobs import slow_spec
from tests.test_owners import _create_token


@pytest.fixture(scope="module")
def service_with_tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, dict[str, str]]]:
    service = start_service(tmp_path_factory.mktemp("cluster_running"), extra_env={"SPILLWAY_AUTH": "on"})
    tokens = {name: _create_token(service, name, scope) for name, scope in {"alice": "submit", "bob": "submit", "admin": "admin"}.items()}
    yield service, tokens
    service.stop()


def _get(service: ServiceProcess, token: str, path: str) -> Any:
    response = httpx.get(service.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    response.raise_for_status()
    return response.json()


def _running(service: ServiceProcess, token: str) -> dict[str, Any]:
    return {job["id"]: job for job in _get(service, token, "/cluster")["running"]}


@pytest.mark.parametrize("engine", ["polars", "dask"])
def test_a_running_job_is_listed_with_the_workers_running_its_tasks(
    service_with_tokens: tuple[ServiceProcess, dict[str, str]], big_data: dict[str, Path], tmp_path: Path, engine: str
) -> None:
    service, tokens = service_with_tokens
    response = httpx.post(
        service.url + "/jobs", json=slow_spec(engine, big_data, tmp_path / "out"), headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=60
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    seen = wait_for(lambda: (job := _running(service, tokens["alice"]).get(job_id)) and job["workers"] and job, timeout=120, interval=0.2,
                    what=f"job {job_id} listed with a worker in GET /cluster")
    addresses = {worker["address"] for worker in _get(service, tokens["alice"], "/cluster")["workers"]}
    assert set(seen["workers"]) <= addresses and all(count >= 1 for count in seen["workers"].values())
    assert (seen["engine"], seen["device"]) == (engine, "cpu") and seen["reason"]
    if engine == "polars":
        assert sum(seen["workers"].values()) == 1  # one task on one worker
    # While it runs, its log already holds the service's events so far.
    assert any("RUNNING on LocalCluster" in line for line in _get(service, tokens["alice"], f"/jobs/{job_id}/logs")["lines"])
    assert job_id not in _running(service, tokens["bob"])  # another owner's job is not there
    assert job_id in _running(service, tokens["admin"])  # an admin sees every job
    httpx.post(service.url + f"/jobs/{job_id}/cancel", headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=60)
    with SpillwayClient(service.url, token=tokens["alice"]) as client:
        assert wait_terminal(client, job_id, timeout=120).state == JobStatus.CANCELLED
    assert job_id not in _running(service, tokens["admin"])


def test_task_keys_match_whether_they_arrive_as_tuples_or_lists() -> None:
    assert key_text(("read-parquet-abc", 3)) == key_text(["read-parquet-abc", 3]) != key_text(("read-parquet-abc", 4))
    assert key_text("spillway-polars-j1") == "spillway-polars-j1"
