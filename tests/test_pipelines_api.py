"""``/pipelines`` through the real router and the app's error handlers, with fake jobs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from spillway.jobs.errors import SpecError
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.service.auth import Scope, create_token
from spillway.service.errors import install_error_handlers
from spillway.service.pipelines import PipelineScheduler, PipelineServices, PipelineStore
from spillway.service.routes.pipelines import router
from spillway.service.store import JobStore
from tests.test_pipelines_fakes import UTC, FakeClock, FakeJobs, pipeline, spec_template, tick

pytest_plugins = ["tests.test_pipelines_fakes"]  # the database and scheduler fixtures

NOW = datetime(2026, 5, 1, 0, 5, tzinfo=UTC)


def make_app(url: str, clock: FakeClock, jobs: FakeJobs, check_job: Any = None, job_store: JobStore | None = None) -> FastAPI:
    """A small app with the pipeline router, the way the service wires it; with a job
    store, bearer tokens are required (the auth dependency reads ``app.state.services``)."""
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router)
    app.state.services = SimpleNamespace(settings=SimpleNamespace(auth_required=job_store is not None), store=job_store)
    store = PipelineStore(url, clock=clock)
    app.state.pipelines = PipelineServices(store, PipelineScheduler(store, submit=jobs.submit, get_job=jobs.get_job), check_job)
    return app


@pytest.fixture()
def env(sqlite_url: str) -> Iterator[tuple[TestClient, FakeClock, FakeJobs, PipelineServices]]:
    clock, jobs = FakeClock(NOW), FakeJobs()
    app = make_app(sqlite_url, clock, jobs)
    yield TestClient(app), clock, jobs, app.state.pipelines
    app.state.pipelines.store.close()


def body(**fields: Any) -> dict[str, Any]:
    return pipeline(**fields).model_dump(mode="json")


def error_of(response: Any) -> dict[str, Any]:
    return response.json()["error"]


def test_crud_and_versions(env: Any) -> None:
    client, _, _, _ = env
    created = client.post("/pipelines", json=body(schedule="30 2 * * *", timezone="Europe/Berlin"))
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["version"] == 1 and view["paused"] is False and view["catchup"] == "skip"
    assert view["next_run_at"] == "2026-05-01T00:30:00Z"  # 02:30 CEST, 25 minutes after NOW
    assert client.post("/pipelines", json=body()).json()["error"]["code"] == "pipeline_exists"
    assert client.get("/pipelines").json()["items"][0]["name"] == "sales"
    definition = {k: v for k, v in body(retries=3).items() if k not in ("name", "paused")}
    updated = client.put("/pipelines/sales", json=definition).json()
    assert updated["version"] == 2 and updated["retries"] == 3 and updated["schedule"] == "0 * * * *"
    paused = client.post("/pipelines/sales/pause").json()
    assert paused["paused"] is True and paused["next_run_at"] is None and paused["version"] == 2
    assert client.post("/pipelines/sales/resume").json()["paused"] is False
    assert client.delete("/pipelines/sales").status_code == 204
    missing = client.get("/pipelines/sales")
    assert missing.status_code == 404 and error_of(missing)["code"] == "pipeline_not_found"
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/pipelines", "/pipelines/{name}", "/pipelines/{name}/runs", "/pipelines/{name}/backfill"} <= set(paths)


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"spec": spec_template(sink={"path": "out/{% if %}"})}, "invalid_template", "spec.sink.path"),
        ({"spec": spec_template(steps=[{"op": "filter", "expr": "day == '{{ dt }}'"}])}, "invalid_template", "spec.steps[0].expr"),
        ({"spec": spec_template(steps=[{"op": "limit", "n": "{{ region }}"}])}, "invalid_template", "spec.steps[0].n"),
        ({"spec": spec_template(sink={"path": "{{ ds.__class__.__mro__ }}"})}, "invalid_template", "spec.sink.path"),
        ({"spec": spec_template(colour="red")}, "invalid_template", "spec.colour"),
        ({"params": {"ds": "x"}}, "invalid_template", "params.ds"),
        ({"schedule": "every day"}, "invalid_schedule", "schedule"),
        ({"timezone": "Europe/Atlantis"}, "invalid_schedule", "timezone"),
        ({"catchup": "some"}, "invalid_spec", "catchup"),
    ],
    ids=["syntax", "unknown-variable", "invalid-after-render", "sandbox", "extra-field", "param-name", "cron", "zone", "policy"],
)

def test_bad_pipelines_are_422_when_saved(env: Any, fields: dict[str, Any], code: str, field: str) -> None:
    client, _, _, _ = env
    response = client.post("/pipelines", json=body(**fields) if "catchup" not in fields else {**body(), **fields})
    assert response.status_code == 422, response.text
    assert error_of(response)["code"] == code and error_of(response)["field"] == field
    assert client.get("/pipelines").json()["items"] == []  # nothing saved


def test_update_is_checked_too_and_keeps_the_old_version(env: Any) -> None:
    client, _, _, _ = env
    client.post("/pipelines", json=body())
    broken = {k: v for k, v in body(spec=spec_template(sink={"path": "{{ nope }}"})).items() if k not in ("name", "paused")}
    response = client.put("/pipelines/sales", json=broken)
    assert response.status_code == 422 and error_of(response)["field"] == "spec.sink.path"
    assert client.get("/pipelines/sales").json()["version"] == 1


def test_extra_checks_of_the_rendered_spec_run_when_saved(sqlite_url: str) -> None:
    def outside_roots(spec: JobSpec) -> None:
        if not spec.sink.path.startswith("/data/"):
            raise SpecError(f"'{spec.sink.path}' is outside the data roots", field="sink.path")

    app = make_app(sqlite_url, FakeClock(NOW), FakeJobs(), check_job=outside_roots)
    response = TestClient(app).post("/pipelines", json=body())
    assert response.status_code == 422 and "outside the data roots" in error_of(response)["message"]
    assert error_of(response)["field"] == "spec.sink.path"
    app.state.pipelines.store.close()


def test_trigger_backfill_and_run_history(env: Any) -> None:
    client, clock, jobs, services = env
    client.post("/pipelines", json=body(schedule="@daily", max_active_runs=2))
    run = client.post("/pipelines/sales/runs", json={"logical_date": "2026-04-01", "params": {"region": "east"}})
    assert run.status_code == 201 and run.json()["state"] == "QUEUED" and run.json()["trigger"] == "manual"
    again = client.post("/pipelines/sales/runs", json={"logical_date": "2026-04-01T00:00:00Z"})
    assert again.status_code == 409 and error_of(again)["code"] == "run_exists"
    bad = client.post("/pipelines/sales/runs", json={"logical_date": "2026-04-02", "params": {"params": "x"}})
    assert bad.status_code == 422
    typo = client.post("/pipelines/sales/runs", json={"logical_date": "2026-04-02", "params": {"regoin": "east"}})  # a typo went unnoticed
    assert typo.status_code == 422 and error_of(typo)["field"] == "params.regoin" and "declares: region" in error_of(typo)["message"]
    filled = client.post("/pipelines/sales/backfill", json={"start": "2026-04-01", "end": "2026-04-03"}).json()
    assert len(filled["created"]) == 2 and filled["existing"] == ["2026-04-01T00:00:00Z"]
    assert client.post("/pipelines/sales/backfill", json={"start": "2026-04-03", "end": "2026-04-01"}).status_code == 422

    tick(services.scheduler)
    clock.advance(minutes=2)
    jobs.finish("job1", JobStatus.SUCCEEDED)
    jobs.finish("job2", JobStatus.FAILED)
    tick(services.scheduler)
    page = client.get("/pipelines/sales/runs").json()
    assert page["total"] == 3
    by_day = {r["logical_date"][:10]: r for r in page["items"]}
    done = by_day["2026-04-01"]
    assert done["state"] == "SUCCEEDED" and done["result_location"] == "out/east/20260401" and done["duration_s"] == 120.0
    assert done["attempts"][0]["job_id"] == "job1" and done["attempts"][0]["state"] == "SUCCEEDED" and done["version"] == 1
    assert by_day["2026-04-02"]["state"] == "FAILED" and by_day["2026-04-02"]["reason"] == "job_failed: job2 failed"
    assert by_day["2026-04-03"]["state"] == "RUNNING"
    failed = client.get("/pipelines/sales/runs", params={"state": "FAILED"}).json()
    assert [r["logical_date"] for r in failed["items"]] == ["2026-04-02T00:00:00Z"]
    assert client.get("/pipelines/nope/runs").status_code == 404


@pytest.mark.parametrize(("path", "payload", "field"), [
    ("runs", {"logical_date": "9999-12-31"}, "logical_date"),
    ("runs", {"logical_date": "9999-12-31T23:59:59"}, "logical_date"),
    ("backfill", {"start": "0001-01-01", "end": "0001-01-03"}, "start"),
    ("backfill", {"start": "9999-12-29", "end": "9999-12-31"}, "start"),
])
def test_dates_at_the_calendars_ends_are_a_422_not_a_500(env: Any, path: str, payload: dict[str, str], field: str) -> None:
    """Found by a hostile run: an interval's end past 9999-12-31 (or its start before year 1) raised OverflowError."""
    client, _, _, _ = env
    client.post("/pipelines", json=body(schedule="@daily"))
    answer = client.post(f"/pipelines/sales/{path}", json=payload)
    assert answer.status_code == 422, answer.text
    assert error_of(answer)["code"] == "invalid_schedule" and error_of(answer)["field"] == field
    assert client.get("/pipelines/sales/runs").json()["total"] == 0  # nothing half made


def test_the_schedule_fires_runs_visible_over_http(env: Any) -> None:
    client, clock, _, services = env
    client.post("/pipelines", json=body())
    clock.set(NOW + timedelta(minutes=55, seconds=5))  # the 01:00 firing, seen 5 s late: on time
    tick(services.scheduler)
    (run,) = client.get("/pipelines/sales/runs").json()["items"]
    assert run["trigger"] == "scheduled" and run["data_interval_end"] == "2026-05-01T01:00:00Z" and run["state"] == "RUNNING"


def test_reading_needs_a_read_token_and_changing_a_submit_token(sqlite_url: str) -> None:
    job_store = JobStore(sqlite_url)
    app = make_app(sqlite_url, FakeClock(NOW), FakeJobs(), job_store=job_store)
    client = TestClient(app)
    reader = {"Authorization": f"Bearer {create_token(job_store, 'ro', Scope.READ)}"}
    writer = {"Authorization": f"Bearer {create_token(job_store, 'rw', Scope.SUBMIT)}"}
    assert client.get("/pipelines").status_code == 401
    assert client.get("/pipelines", headers=reader).status_code == 200
    assert client.post("/pipelines", json=body(), headers=reader).status_code == 403
    assert client.post("/pipelines", json=body(), headers=writer).status_code == 201
    for path in ("/pipelines/sales/pause", "/pipelines/sales/resume"):
        assert client.post(path, headers=reader).status_code == 403
    assert client.post("/pipelines/sales/runs", json={"logical_date": "2026-04-01"}, headers=reader).status_code == 403
    assert client.get("/pipelines/sales/runs", headers=writer).status_code == 200
    assert client.get("/pipelines/sales/runs", headers=reader).status_code == 404, "a read token owns no pipelines (tests/test_owners.py)"
    assert client.delete("/pipelines/sales", headers=reader).status_code == 403
    app.state.pipelines.store.close()
    job_store.close()
