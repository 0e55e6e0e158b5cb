"""Issue 16, second trust pass: the holes a hostile run found, each against a live service."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from spillway.jobs.status import JobStatus
from tests.conftest import ServiceProcess, start_service, wait_for
from tests.test_auth import call, create_token


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service with auth on and tokens of every scope (two submit tokens: two owners)."""
    workdir = tmp_path_factory.mktemp("trust2")
    service = start_service(workdir, extra_env={"SPILLWAY_AUTH": "on"})
    tokens = {scope: create_token(service, scope) for scope in ("read", "submit", "admin")}
    tokens["other"] = create_token(service, "submit")
    yield service, tokens
    service.stop()


def pipeline_body(name: str, tmp: Path) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": "@daily",
        "paused": True,
        "spec": {"source": {"format": "parquet", "path": f"{tmp}/in/{{{{ ds }}}}"}, "sink": {"path": f"{tmp}/out/{{{{ ds_nodash }}}}"}},
    }


def test_query_token_is_only_for_event_streams_not_paths_ending_in_events(secured: Any, tmp_path: Path) -> None:
    service, tokens = secured
    created = call(service, "POST", "/pipelines", tokens["admin"], json=pipeline_body("events", tmp_path))
    assert created.status_code == 201, created.text
    definition = {k: v for k, v in pipeline_body("events", tmp_path).items() if k not in ("name", "paused")}
    with httpx.Client(base_url=service.url, timeout=30) as http:
        for method, kwargs in (("GET", {}), ("PUT", {"json": definition}), ("DELETE", {})):
            response = http.request(method, "/pipelines/events", params={"token": tokens["admin"]}, **kwargs)
            assert response.status_code == 401, (method, response.text)
            assert response.json()["error"]["code"] == "unauthenticated"
    assert call(service, "GET", "/pipelines/events", tokens["admin"]).json()["version"] == 1, "nothing changed"
    assert call(service, "DELETE", "/pipelines/events", tokens["admin"]).status_code == 204


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]) <= {"code", "message", "field"}
    return body["error"]


@pytest.mark.parametrize("where", ["source", "sink", "sources"])
def test_nul_byte_in_a_path_is_422(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, where: str) -> None:
    spec: dict[str, Any] = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "sink": {"path": str(tmp_path / "out")}}
    field = f"{where}.path"
    if where == "sources":
        spec["sources"] = {"products": {"format": "csv", "path": f"{tmp_path}/p\x00.csv"}}
        field = "sources.products.path"
    else:
        spec[where]["path"] = spec[where]["path"] + "\x00/etc/passwd"
    with httpx.Client(base_url=service.url, timeout=30) as http:
        error = error_of(http.post("/jobs", json=spec), 422)
    assert error["code"] == "invalid_path" and error["field"] == field and "NUL" in error["message"]


@pytest.mark.parametrize("path", ["/jobs", "/pipelines/nightly/runs"])
def test_offset_past_64_bits_is_422(service: ServiceProcess, path: str) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        error = error_of(http.get(path, params={"offset": str(2**63)}), 422)
        assert error["field"] == "query.offset"
        assert http.get("/jobs", params={"offset": str(2**63 - 1)}).json()["items"] == []


@pytest.mark.parametrize(("method", "path", "allowed"), [("DELETE", "/jobs", "GET, POST"), ("PATCH", "/pipelines/nightly", "DELETE, GET, PUT"), ("GET", "/jobs/x/cancel", "POST")])
def test_405_names_every_allowed_method(service: ServiceProcess, method: str, path: str, allowed: str) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        response = http.request(method, path)
    assert error_of(response, 405)["code"] == "method_not_allowed"
    assert response.headers["Allow"] == allowed


@pytest.fixture(scope="module")
def rooted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service with two data roots: one holding a small dataset, one empty."""
    from spillway.jobs.samples import write_sample_data

    root, empty = tmp_path_factory.mktemp("root2"), tmp_path_factory.mktemp("empty_root")
    data = write_sample_data(root / "data", rows=2000, files=2)
    service = start_service(root / "svc", extra_env={"SPILLWAY_ALLOWED_ROOTS": f'["{root}", "{empty}"]'})
    yield service, {"data": root, "empty": empty}, data
    service.stop()


@pytest.mark.parametrize(
    ("which", "suffix", "mode"), [("empty", "", "error"), ("empty", "/", "overwrite"), ("data", "", "overwrite"), ("data", "/./", "append"), ("data", "/data/..", "error")]
)
def test_a_sink_that_is_a_root_is_refused(rooted: Any, which: str, suffix: str, mode: str) -> None:
    # Staged beside itself, such a sink would be written in the root's parent and renamed over the root.
    service, roots, data = rooted
    spec = {"source": {"format": "parquet", "path": str(data["sales"])}, "sink": {"path": f"{roots[which]}{suffix}", "mode": mode}}
    with httpx.Client(base_url=service.url, timeout=30) as http:
        error = error_of(http.post("/jobs", json=spec), 403)
    assert error["field"] == "sink.path" and error["code"] == "path_not_allowed"
    assert "contains '..'" in error["message"] if ".." in suffix else "is an allowed root itself" in error["message"]
    assert data["sales"].is_dir() and roots["empty"].is_dir() and not any(roots["empty"].iterdir())


@pytest.mark.parametrize("sink", ["s3://bucket/etl", "s3://bucket/etl/"])
def test_a_sink_that_is_a_url_root_is_refused(sink: str) -> None:
    from spillway.jobs.sandbox import PathNotAllowed, check_paths
    from spillway.jobs.spec import JobSpec

    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": "s3://bucket/etl/in/"}, "sink": {"path": sink}})
    with pytest.raises(PathNotAllowed, match="is an allowed root itself") as refused:
        check_paths(spec, ["s3://bucket/etl/"])
    assert refused.value.field == "sink.path"
    check_paths(spec.model_copy(update={"sink": spec.sink.model_copy(update={"path": "s3://bucket/etl/out"})}), ["s3://bucket/etl/"])

def test_an_empty_dashboard_address_turns_the_dashboard_off(tmp_path: Path, sample_data: dict[str, Path]) -> None:
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": ""})
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            cluster = http.get("/cluster").json()
            spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "sink": {"path": str(tmp_path / "out")}}
            accepted = http.post("/jobs", json=spec).json()
        from distributed import Client

        with Client(cluster["scheduler_address"], timeout=30) as client:
            http_port = client.scheduler_info()["services"].get("dashboard")
    finally:
        service.stop()
    assert cluster["dashboard_link"] is None and accepted["links"]["dashboard"] is None
    assert http_port != 8787, "the scheduler's HTTP server does not hold the dashboard's port"
    assert "dashboard off" in service.log()


def test_queue_limit_holds_under_concurrent_inserts(database_url: str) -> None:
    from spillway.jobs.errors import QueueFull
    from spillway.jobs.spec import JobSpec
    from spillway.service.store import JobStore

    store = JobStore(database_url)
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": "/tmp/in"}, "sink": {"path": "/tmp/out"}})
    outcomes: list[str] = []
    barrier = threading.Barrier(60)

    def insert() -> None:
        barrier.wait()
        try:
            store.create(spec, "pandas", max_pending=10)
            outcomes.append("created")
        except QueueFull:
            outcomes.append("full")

    threads = [threading.Thread(target=insert) for _ in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert outcomes.count("created") == 10 and outcomes.count("full") == 50
        assert store.count_by_state()[JobStatus.PENDING] == 10
    finally:
        store.close()


def test_queue_limit_holds_under_60_concurrent_posts(tmp_path: Path, big_data: dict[str, Path], sample_data: dict[str, Path]) -> None:
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "1", "SPILLWAY_MAX_QUEUED_JOBS": "10"})
    try:
        with httpx.Client(base_url=service.url, timeout=120) as http:
            heavy = {"source": {"format": "parquet", "path": str(big_data["sales"])}, "steps": [{"op": "sort", "by": ["amount"]}], "sink": {"path": str(tmp_path / "heavy")}}
            blocker = http.post("/jobs", json=heavy).json()["id"]
            wait_for(lambda: http.get(f"/jobs/{blocker}").json()["state"] != "PENDING", what="the blocking job to start")
            barrier = threading.Barrier(60)
            answers: list[httpx.Response] = []

            def submit(i: int) -> None:
                body = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 1}], "sink": {"path": str(tmp_path / f"o{i}")}}
                barrier.wait()
                answers.append(http.post("/jobs", json=body))

            threads = [threading.Thread(target=submit, args=(i,)) for i in range(60)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            jobs = http.get("/jobs", params={"limit": 500}).json()["items"]
            http.post(f"/jobs/{blocker}/cancel")
    finally:
        service.stop()
    accepted = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code == 429]
    assert len(accepted) + len(refused) == 60, [a.text for a in answers if a.status_code not in (202, 429)]
    # Only a job that left the queue (the blocker finishing lets one start) frees a place in it.
    started = sum(1 for j in jobs if j["id"] != blocker and j["state"] != "PENDING")
    assert 10 <= len(accepted) <= 10 + started, (len(accepted), started)
    assert all(r.json()["error"]["code"] == "queue_full" and r.headers["Retry-After"] == "5" for r in refused)
