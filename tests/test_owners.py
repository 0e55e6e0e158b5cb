"""Owners (issue 16, item 5): a token sees and cancels only its own jobs and pipelines; admin sees all.

Another owner's job or pipeline answers exactly as a missing one does (404), so its id or name
tells a token nothing. The live-service tests run with auth on, two submit tokens (alice and bob),
an admin and a read token; the store tests run on SQLite and, when SPILLWAY_TEST_POSTGRES_URL is
set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Column, MetaData, Table, update

from spillway.jobs.errors import JobNotFound
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.service.pipelines import PipelineStore
from spillway.service.pipelines.bridge import job_callbacks
from spillway.service.pipelines.errors import PipelineNotFound
from spillway.service.pipelines.tables import pipelines_table
from spillway.service.store import JobStore, jobs_table, make_engine, utc_now
from tests.conftest import ROOT, ServiceProcess, start_service, wait_for
from tests.test_auth import call
from tests.test_pipelines_api import NOW, make_app
from tests.test_pipelines_fakes import FakeClock, FakeJobs, pipeline

TOKENS = {"alice": "submit", "bob": "submit", "admin": "admin", "reader": "read"}


def _create_token(service: ServiceProcess, name: str, scope: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "spillway", "token", "create", "--scope", scope, "--name", name],
        cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60, check=True,
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def owners(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A live service with auth on and a token per name in TOKENS."""
    service = start_service(tmp_path_factory.mktemp("owners"), extra_env={"SPILLWAY_AUTH": "on"})
    tokens = {name: _create_token(service, name, scope) for name, scope in TOKENS.items()}
    yield service, tokens
    service.stop()


def small_spec(sample_data: dict[str, Path], sink: Path) -> dict[str, Any]:
    return {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": str(sink)}}


def submit(service: ServiceProcess, token: str, spec: dict[str, Any]) -> str:
    response = call(service, "POST", "/jobs", token, json=spec)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def submit_with_key(service: ServiceProcess, token: str, spec: dict[str, Any], key: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    return httpx.post(f"{service.url}/jobs", json=spec, headers=headers, timeout=30)


def finished(service: ServiceProcess, token: str, job_id: str) -> dict[str, Any]:
    def terminal() -> dict[str, Any] | None:
        job = call(service, "GET", f"/jobs/{job_id}", token).json()
        return job if JobStatus(job["state"]).is_terminal() else None

    return wait_for(terminal, timeout=120, what=f"job {job_id} to finish")


def listing(service: ServiceProcess, token: str, path: str = "/jobs", **params: Any) -> dict[str, Any]:
    response = call(service, "GET", path, token, params={"limit": 500, **params})
    assert response.status_code == 200, response.text
    return response.json()


def assert_not_found(response: httpx.Response, code: str) -> None:
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == code


def test_each_token_sees_only_its_own_jobs_and_admin_sees_all(owners: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens = owners
    alice, bob, admin = tokens["alice"], tokens["bob"], tokens["admin"]
    a = submit(service, alice, small_spec(sample_data, tmp_path / "a"))
    b = submit(service, bob, small_spec(sample_data, tmp_path / "b"))
    job_a, job_b = finished(service, alice, a), finished(service, bob, b)
    assert job_a["owner"].startswith("alice#") and job_b["owner"].startswith("bob#")

    pages = {name: listing(service, token) for name, token in tokens.items()}
    for name, other, mine, theirs in (("alice", "bob", a, b), ("bob", "alice", b, a)):
        ids = {j["id"] for j in pages[name]["items"]}
        assert mine in ids and theirs not in ids, f"{name} lists only their own jobs"
        assert {j["owner"] for j in pages[name]["items"]} == {job_a["owner"] if name == "alice" else job_b["owner"]}
        assert pages[name]["total"] == len(pages[name]["items"]), "the total counts only the token's jobs"
    assert {a, b} <= {j["id"] for j in pages["admin"]["items"]}
    assert pages["admin"]["total"] == pages["alice"]["total"] + pages["bob"]["total"], "admin owns none here and sees everyone's"
    assert pages["reader"] == {"items": [], "total": 0, "limit": 500, "offset": 0}, "a read token owns no jobs"
    assert b not in {j["id"] for j in listing(service, alice, state="SUCCEEDED")["items"]}

    missing = call(service, "GET", "/jobs/0000000000000000", alice).json()
    for path in (f"/jobs/{b}", f"/jobs/{b}/logs", f"/jobs/{b}/events"):
        hidden = call(service, "GET", path, alice)
        assert_not_found(hidden, "job_not_found")
        assert hidden.json()["error"]["message"] == missing["error"]["message"].replace("0000000000000000", b), "the same answer as for no job"
    with httpx.Client(base_url=service.url, timeout=60) as http:
        assert_not_found(http.get(f"/jobs/{b}/events", params={"token": alice}), "job_not_found")
        assert "event: end" in http.get(f"/jobs/{a}/events", params={"token": alice}).text
    assert_not_found(call(service, "GET", f"/jobs/{a}", tokens["reader"]), "job_not_found")

    for job_id in (a, b):
        for path in (f"/jobs/{job_id}", f"/jobs/{job_id}/logs", f"/jobs/{job_id}/events"):
            assert call(service, "GET", path, admin).status_code == 200, f"admin reads {path}"
    assert call(service, "GET", f"/jobs/{b}", admin).json()["result"]["total_rows"] == 3


def test_a_token_cannot_cancel_another_tokens_job_and_admin_can(owners: Any, big_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens = owners
    heavy = {
        "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "sort", "by": ["amount"]}, {"op": "sort", "by": ["order_id"]}],
        "sink": {"path": str(tmp_path / "heavy")},
    }
    job_id = submit(service, tokens["bob"], heavy)
    assert_not_found(call(service, "POST", f"/jobs/{job_id}/cancel", tokens["alice"]), "job_not_found")
    assert call(service, "POST", f"/jobs/{job_id}/cancel", tokens["reader"]).status_code == 403, "scope is checked first"
    assert call(service, "GET", f"/jobs/{job_id}", tokens["bob"]).json()["state"] in ("PENDING", "RUNNING"), "alice's cancel did nothing"
    cancelled = call(service, "POST", f"/jobs/{job_id}/cancel", tokens["admin"])
    assert cancelled.status_code == 202, cancelled.text
    assert finished(service, tokens["bob"], job_id)["state"] == "CANCELLED"
    assert not (tmp_path / "heavy").exists()


def test_idempotency_keys_are_per_owner(owners: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens = owners
    alice, bob = tokens["alice"], tokens["bob"]
    key = f"nightly-{uuid.uuid4().hex}"
    spec_a, spec_b = small_spec(sample_data, tmp_path / "ka"), small_spec(sample_data, tmp_path / "kb")
    first_a = submit_with_key(service, alice, spec_a, key)
    # Bob's use of the same key is his own: a new job, not alice's and not a 409 that would reveal hers.
    first_b = submit_with_key(service, bob, spec_b, key)
    assert first_a.status_code == 202 and first_b.status_code == 202, first_b.text
    a, b = first_a.json()["id"], first_b.json()["id"]
    assert a != b
    for token, spec, job_id in ((alice, spec_a, a), (bob, spec_b, b)):
        replay = submit_with_key(service, token, spec, key)
        assert replay.status_code == 200 and replay.json()["id"] == job_id
    conflict = submit_with_key(service, alice, spec_b, key)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"
    assert a in conflict.text and b not in conflict.text, "the conflict names alice's own job only"


def pipeline_body(name: str, sample_data: dict[str, Path], tmp: Path, **fields: Any) -> dict[str, Any]:
    spec = small_spec(sample_data, tmp / name)
    spec["sink"]["path"] += "/{{ ds_nodash }}"
    return {"name": name, "schedule": "@daily", "spec": spec, **fields}


def test_each_token_sees_only_its_own_pipelines_and_admin_sees_all(owners: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens = owners
    alice, bob, admin = tokens["alice"], tokens["bob"], tokens["admin"]
    body = pipeline_body("alice_daily", sample_data, tmp_path, paused=True)
    created = call(service, "POST", "/pipelines", alice, json=body)
    assert created.status_code == 201, created.text
    assert created.json()["owner"].startswith("alice#")
    definition = {k: v for k, v in body.items() if k not in ("name", "paused")}

    names = {name: [p["name"] for p in listing(service, token, "/pipelines")["items"]] for name, token in tokens.items()}
    assert "alice_daily" in names["alice"] and "alice_daily" in names["admin"]
    assert "alice_daily" not in names["bob"] and names["reader"] == []

    path = "/pipelines/alice_daily"
    attempts = [
        ("GET", path, {}),
        ("PUT", path, {"json": {**definition, "retries": 3}}),
        ("POST", f"{path}/pause", {}),
        ("POST", f"{path}/resume", {}),
        ("GET", f"{path}/runs", {}),
        ("POST", f"{path}/runs", {"json": {"logical_date": "2026-04-01"}}),
        ("POST", f"{path}/backfill", {"json": {"start": "2026-04-01", "end": "2026-04-03"}}),
        ("DELETE", path, {}),
    ]
    for method, where, kwargs in attempts:
        assert_not_found(call(service, method, where, bob, **kwargs), "pipeline_not_found")
    assert_not_found(call(service, "GET", path, tokens["reader"]), "pipeline_not_found")
    mine = call(service, "GET", path, alice).json()
    assert mine["version"] == 1 and mine["paused"] is True and mine["retries"] == 0, "bob's attempts changed nothing"
    assert call(service, "GET", f"{path}/runs", alice).json()["total"] == 0
    # Names are one namespace: a taken name is a 409 whoever holds it (documented in docs/guarantees.md).
    assert call(service, "POST", "/pipelines", bob, json=body).json()["error"]["code"] == "pipeline_exists"

    assert call(service, "GET", path, admin).status_code == 200
    edited = call(service, "PUT", path, admin, json={**definition, "retries": 2})
    assert edited.status_code == 200 and edited.json()["version"] == 2
    assert edited.json()["owner"] == mine["owner"], "an admin's edit does not take the pipeline over"
    assert call(service, "DELETE", path, admin).status_code == 204
    assert_not_found(call(service, "GET", path, alice), "pipeline_not_found")


def test_a_pipeline_runs_jobs_belong_to_its_owner(owners: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens = owners
    alice, bob = tokens["alice"], tokens["bob"]
    created = call(service, "POST", "/pipelines", alice, json=pipeline_body("alice_runs", sample_data, tmp_path))
    assert created.status_code == 201, created.text
    assert call(service, "POST", "/pipelines/alice_runs/runs", alice, json={"logical_date": "2026-04-01"}).status_code == 201

    def job_of_run() -> str | None:
        (run,) = call(service, "GET", "/pipelines/alice_runs/runs", alice).json()["items"]
        return run["attempts"][0]["job_id"] if run["attempts"] else None

    job_id = wait_for(job_of_run, timeout=60, what="the run's job")
    job = finished(service, alice, job_id)
    assert job["state"] == "SUCCEEDED" and job["owner"] == created.json()["owner"]
    assert job_id in {j["id"] for j in listing(service, alice)["items"]}
    assert call(service, "GET", f"/jobs/{job_id}/logs", alice).status_code == 200
    assert_not_found(call(service, "GET", f"/jobs/{job_id}", bob), "job_not_found")
    assert job_id not in {j["id"] for j in listing(service, bob)["items"]}
    assert call(service, "GET", f"/jobs/{job_id}", tokens["admin"]).status_code == 200


def test_cluster_and_health_are_not_per_owner(owners: Any) -> None:
    service, tokens = owners
    assert call(service, "GET", "/healthz").status_code == 200
    clusters = [call(service, "GET", "/cluster", token).json() for token in tokens.values()]
    assert all(c["backend"] == clusters[0]["backend"] for c in clusters)


# ---------------------------------------------------------------- the stores (SQLite and PostgreSQL)

SPEC = JobSpec.model_validate({"source": {"format": "parquet", "path": "in"}, "sink": {"path": "out"}})


def test_job_store_keeps_owners_apart(database_url: str) -> None:
    store = JobStore(database_url)
    try:
        a, _ = store.create(SPEC, "pandas", owner="alice#1")
        b, _ = store.create(SPEC, "pandas", owner="bob#2")
        store.save_logs(b.id, ["bob's secret"])
        assert store.get(a.id, owner="alice#1").id == a.id
        with pytest.raises(JobNotFound, match=f"no job with id '{b.id}'"):
            store.get(b.id, owner="alice#1")
        with pytest.raises(JobNotFound):
            store.logs(b.id, owner="alice#1")
        assert store.logs(b.id, owner="bob#2") == ["bob's secret"] == store.logs(b.id)
        items, total = store.list(owner="alice#1")
        assert [j.id for j in items] == [a.id] and total == 1
        assert store.list(owner="carol#3") == ([], 0)
        assert {j.id for j in store.list()[0]} == {a.id, b.id}, "no owner: every job (auth off, admin)"
        assert store.list(owner="bob#2", state=JobStatus.PENDING)[1] == 1

        first, new = store.create(SPEC, "pandas", idempotency_key="k", owner="alice#1")
        other, other_new = store.create(SPEC, "pandas", idempotency_key="k", owner="bob#2")
        again, again_new = store.create(SPEC, "pandas", idempotency_key="k", owner="alice#1")
        unowned, unowned_new = store.create(SPEC, "pandas", idempotency_key="k")
        assert new and other_new and unowned_new and not again_new
        assert again.id == first.id and len({first.id, other.id, unowned.id}) == 3, "one key, one job per owner"
        assert store.get_by_idempotency_key("k", owner="bob#2").id == other.id
        assert store.get_by_idempotency_key("k").id == unowned.id
        with pytest.raises(JobNotFound):
            store.get_by_idempotency_key("k", owner="carol#3")

        # A key stored before keys were per owner (raw, on a job with an owner) is still its owner's.
        legacy, _ = store.create(SPEC, "pandas", idempotency_key="legacy")
        with store.engine.begin() as conn:
            conn.execute(update(jobs_table).where(jobs_table.c.id == legacy.id).values(owner="alice#1"))
        assert store.get_by_idempotency_key("legacy", owner="alice#1").id == legacy.id
        assert store.create(SPEC, "pandas", idempotency_key="legacy", owner="alice#1")[0].id == legacy.id
        with pytest.raises(JobNotFound):
            store.get_by_idempotency_key("legacy", owner="bob#2")
    finally:
        store.close()


def test_pipeline_store_keeps_owners_apart_and_runs_jobs_as_the_owner(database_url: str) -> None:
    jobs, pipelines = JobStore(database_url), PipelineStore(database_url)
    try:
        record = pipelines.create(pipeline("sales"), owner="alice#1")
        pipelines.create(pipeline("shared"))
        assert record.owner == "alice#1" and record.view().owner == "alice#1"
        assert [p.name for p in pipelines.list(owner="alice#1")] == ["sales"]
        assert [p.name for p in pipelines.list(owner="bob#2")] == []
        assert [p.name for p in pipelines.list()] == ["sales", "shared"]
        definition = pipeline("sales", retries=2).definition()
        for act in (
            lambda: pipelines.get("sales", owner="bob#2"),
            lambda: pipelines.update("sales", definition, owner="bob#2"),
            lambda: pipelines.set_paused("sales", True, owner="bob#2"),
            lambda: pipelines.delete("sales", owner="bob#2"),
        ):
            with pytest.raises(PipelineNotFound, match="no pipeline named 'sales'"):
                act()
        assert pipelines.get("sales").version == 1 and not pipelines.get("sales").paused
        assert pipelines.update("sales", definition).owner == "alice#1", "an edit keeps the owner"
        assert pipelines.set_paused("sales", True, owner="alice#1").paused

        enqueued: list[str] = []
        submit, _ = job_callbacks(jobs, enqueued.append, backend="pandas", validate=lambda spec: None)
        job_id = asyncio.run(submit(SPEC, "pipeline-run:r1:1", owner="alice#1"))
        assert jobs.get(job_id, owner="alice#1").owner == "alice#1" and enqueued == [job_id]
        assert asyncio.run(submit(SPEC, "pipeline-run:r1:1", owner="alice#1")) == job_id, "a resubmission finds it"
        pipelines.delete("sales", owner="alice#1")
        assert [p.name for p in pipelines.list()] == ["shared"]
    finally:
        pipelines.close()
        jobs.close()


def test_an_older_pipeline_store_gets_the_owner_column(database_url: str) -> None:
    older = MetaData()
    Table(
        pipelines_table.name,
        older,
        *(Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable, autoincrement=c.autoincrement) for c in pipelines_table.columns if c.name != "owner"),
    )
    engine = make_engine(database_url)  # no store first: the pipeline store upgrades the table it finds (service/migrations)
    older.create_all(engine)
    now = utc_now()
    with engine.begin() as conn:
        conn.execute(
            older.tables[pipelines_table.name].insert().values(
                name="before", version=1, definition=pipeline("before").definition().model_dump(mode="json"),
                paused=True, scheduled_through=now, claim_seq=0, created_at=now, updated_at=now,
            )
        )
    pipelines = PipelineStore(engine)
    try:
        assert pipelines.get("before").owner is None, "a pipeline from before owners has none: only admin (or auth off) sees it"
        with pytest.raises(PipelineNotFound):
            pipelines.get("before", owner="alice#1")
        assert pipelines.create(pipeline("after"), owner="alice#1").owner == "alice#1"
        assert pipelines.get("after", owner="alice#1").name == "after"
    finally:
        pipelines.close()
        engine.dispose()


def test_with_auth_off_there_are_no_owners_and_everything_is_visible(database_url: str) -> None:
    earlier = PipelineStore(database_url)
    earlier.create(pipeline("alices"), owner="alice#1")  # made while auth was on
    earlier.close()
    app = make_app(database_url, FakeClock(NOW), FakeJobs())  # no job store: auth off
    client = TestClient(app)
    try:
        assert client.get("/pipelines/alices").status_code == 200
        created = client.post("/pipelines", json=pipeline("anyones").model_dump(mode="json"))
        assert created.status_code == 201 and created.json()["owner"] is None
        assert [p["name"] for p in client.get("/pipelines").json()["items"]] == ["alices", "anyones"]
        assert client.post("/pipelines/alices/pause").json()["paused"] is True
    finally:
        app.state.pipelines.store.close()
