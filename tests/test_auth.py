"""Bearer tokens: required when asked (and by default off loopback), scoped, stored hashed, never logged."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from spillway.service.config import Settings
from tests.conftest import ROOT, ServiceProcess, start_service


@pytest.mark.parametrize(("host", "required"), [("127.0.0.1", False), ("::1", False), ("localhost", False), ("0.0.0.0", True), ("10.1.2.3", True), ("spillway.internal", True)])
def test_auth_is_on_by_default_off_loopback(host: str, required: bool) -> None:
    assert Settings(host=host).auth_required is required
    assert Settings(host=host, auth="on").auth_required is True
    assert Settings(host=host, auth="off").auth_required is False


def create_token(service: ServiceProcess, scope: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "spillway", "token", "create", "--scope", scope, "--name", f"test-{scope}"],
        cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60, check=True,
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("auth")
    service = start_service(workdir, extra_env={"SPILLWAY_AUTH": "on"})
    tokens = {scope: create_token(service, scope) for scope in ("read", "submit", "admin")}
    yield service, tokens, workdir
    service.stop()


def call(service: ServiceProcess, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=service.url, timeout=30) as http:
        return http.request(method, path, headers=headers, **kwargs)


def test_missing_and_bad_tokens_are_401(secured: Any) -> None:
    service, _, _ = secured
    for response in (call(service, "GET", "/jobs"), call(service, "GET", "/jobs", "spw_not-a-token"), call(service, "GET", "/cluster")):
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "unauthenticated"
    assert call(service, "GET", "/healthz").status_code == 200, "health checks stay open"


def test_scopes(secured: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens, _ = secured
    spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": str(tmp_path / "o")}}
    assert call(service, "GET", "/jobs", tokens["read"]).status_code == 200
    denied = call(service, "POST", "/jobs", tokens["read"], json=spec)
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden" and "needs 'submit'" in denied.json()["error"]["message"]
    assert call(service, "POST", "/jobs", tokens["submit"], json=spec).status_code == 202
    assert call(service, "GET", "/metrics", tokens["admin"]).status_code == 200


def test_cli_and_sdk_send_the_token(secured: Any) -> None:
    service, tokens, _ = secured
    listing = subprocess.run([sys.executable, "-m", "spillway", "--token", tokens["read"], "list", "--url", service.url], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    refused = subprocess.run([sys.executable, "-m", "spillway", "list", "--url", service.url], cwd=ROOT, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert refused.returncode != 0 and "unauthenticated" in (refused.stderr + refused.stdout)


def test_tokens_are_stored_hashed_and_never_logged(secured: Any) -> None:
    service, tokens, workdir = secured
    db = sqlite3.connect(workdir / "spillway.db")
    stored = " ".join(str(v) for row in db.execute("SELECT * FROM spillway_tokens") for v in row)
    db.close()
    log = service.log()
    for token in tokens.values():
        assert token not in stored
        assert token not in log


def test_event_stream_takes_a_query_token_and_the_log_redacts_it(secured: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    service, tokens, _ = secured
    spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": str(tmp_path / "q")}}
    job_id = call(service, "POST", "/jobs", tokens["submit"], json=spec).json()["id"]
    with httpx.Client(base_url=service.url, timeout=60) as http:
        assert http.get(f"/jobs/{job_id}", params={"token": tokens["submit"]}).status_code == 401, "query tokens only for event streams"
        stream = http.get(f"/jobs/{job_id}/events", params={"token": tokens["submit"]})
    assert stream.status_code == 200 and "event: end" in stream.text
    assert tokens["submit"] not in service.log() and "token=[redacted]" in service.log()


def test_running_jobs_per_token_are_limited_and_others_go_ahead(tmp_path: Path, big_data: dict[str, Path]) -> None:
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_AUTH": "on", "SPILLWAY_MAX_RUNNING_PER_TOKEN": "1", "SPILLWAY_MAX_CONCURRENT_JOBS": "2"})
    try:
        alice, bob, admin = create_token(service, "submit"), create_token(service, "submit"), create_token(service, "admin")
        heavy = {"source": {"format": "parquet", "path": str(big_data["sales"])}, "steps": [{"op": "sort", "by": ["amount"]}, {"op": "sort", "by": ["order_id"]}]}
        a1 = call(service, "POST", "/jobs", alice, json={**heavy, "sink": {"path": str(tmp_path / "a1")}}).json()["id"]
        a2 = call(service, "POST", "/jobs", alice, json={**heavy, "sink": {"path": str(tmp_path / "a2")}}).json()["id"]
        b1 = call(service, "POST", "/jobs", bob, json={**heavy, "sink": {"path": str(tmp_path / "b1")}}).json()["id"]
        from spillway.service.client import SpillwayClient
        from tests.conftest import wait_terminal

        with SpillwayClient(service.url, token=admin) as client:  # alice cannot see bob's job
            jobs = {name: wait_terminal(client, job_id, timeout=180) for name, job_id in (("a1", a1), ("a2", a2), ("b1", b1))}
    finally:
        service.stop()
    assert all(j.state.value == "SUCCEEDED" for j in jobs.values())
    assert jobs["a2"].started_at >= jobs["a1"].finished_at, "alice never had two jobs running"
    assert jobs["b1"].started_at < jobs["a1"].finished_at, "bob's job ran beside alice's first, ahead of her second"
    assert jobs["a1"].owner != jobs["b1"].owner and jobs["a1"].owner.startswith("test-submit#")
