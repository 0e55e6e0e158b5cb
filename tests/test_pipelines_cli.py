"""``spillway pipeline ...`` through the SDK against the router served by uvicorn, with fake jobs."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Optional

import pytest
import typer
import uvicorn
import yaml
from fastapi import Request
from typer.testing import CliRunner

from spillway.jobs.status import JobStatus
from spillway.service.cli_pipelines import pipeline_app
from tests.conftest import wait_for
from tests.test_pipelines_api import make_app
from tests.test_pipelines_fakes import UTC, FakeClock, FakeJobs, spec_template, tick

pytest_plugins = ["tests.test_pipelines_fakes"]  # the database and scheduler fixtures

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)

# The way service/cli.py mounts it: a root app whose --token the group reads back.
root = typer.Typer()


@root.callback()
def _root(token: Annotated[Optional[str], typer.Option("--token")] = None) -> None:  # noqa: UP007, ARG001
    """The spillway root command, reduced to its global option."""


root.add_typer(pipeline_app, name="pipeline")


@pytest.fixture()
def live(sqlite_url: str) -> Iterator[dict[str, Any]]:
    """The pipeline router under uvicorn on a free port; records the Authorization headers it sees."""
    clock, jobs = FakeClock(NOW), FakeJobs()
    app = make_app(sqlite_url, clock, jobs)
    seen: list[str | None] = []

    @app.middleware("http")
    async def record_auth(request: Request, call_next: Any) -> Any:
        seen.append(request.headers.get("authorization"))
        return await call_next(request)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=20, what="uvicorn to start")
    yield {"url": f"http://127.0.0.1:{sock.getsockname()[1]}", "clock": clock, "jobs": jobs, "services": app.state.pipelines, "auth": seen}
    server.should_exit = True
    thread.join(timeout=20)
    app.state.pipelines.store.close()
    sock.close()


def spillway(live: dict[str, Any], *args: str) -> Any:
    return CliRunner().invoke(root, ["pipeline", *args, "--url", live["url"]], env={"COLUMNS": "200"})


def test_pipeline_lifecycle_from_the_cli(live: dict[str, Any], tmp_path: Path) -> None:
    spec = spec_template(steps=[{"op": "join", "right": {"format": "csv", "path": "ref/{{ ds }}.csv"}, "on": ["id"]}])
    file = tmp_path / "sales.yaml"
    # `on:` must stay a key, not become YAML 1.1's True.
    file.write_text(yaml.safe_dump({"name": "sales", "spec": spec, "schedule": "30 2 * * *", "timezone": "Europe/Berlin", "params": {"region": "north"}}))
    created = spillway(live, "create", str(file))
    assert created.exit_code == 0, created.output
    assert "created sales (v1); next run 2026-05-02T02:30+02:00" in created.output

    listing = spillway(live, "list")
    assert "sales" in listing.output and "Europe/Berlin" in listing.output and "active" in listing.output
    shown = spillway(live, "show", "sales")
    assert "catchup=skip" in shown.output and "ref/{{ ds }}.csv" in shown.output
    assert "paused sales" in spillway(live, "pause", "sales").output
    assert "resumed sales" in spillway(live, "resume", "sales").output

    triggered = spillway(live, "trigger", "sales", "--date", "2026-04-01T02:30", "--param", "region=east")
    assert triggered.exit_code == 0 and "for 2026-04-01T02:30+02:00" in triggered.output
    filled = spillway(live, "backfill", "sales", "--start", "2026-04-01", "--end", "2026-04-03T23:00")
    assert "queued 2 runs; 1 dates already had one" in filled.output

    tick(live["services"].scheduler)
    live["jobs"].finish("job1", JobStatus.SUCCEEDED)
    tick(live["services"].scheduler)
    runs = spillway(live, "runs", "sales")
    assert runs.exit_code == 0, runs.output
    assert "3 runs of sales" in runs.output and "out/east/20260401" in runs.output and "1:SUCCEEDED (job1)" in runs.output
    assert "2026-04-01T02:30+02:00" in runs.output

    assert "deleted sales" in spillway(live, "delete", "sales").output
    gone = spillway(live, "show", "sales")
    assert gone.exit_code == 1 and "pipeline_not_found" in gone.output


def test_template_errors_and_bad_params_fail_clearly(live: dict[str, Any], tmp_path: Path) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump({"name": "bad", "spec": spec_template(sink={"path": "out/{{ dz }}"}), "schedule": "@daily"}))
    result = spillway(live, "create", str(file))
    assert result.exit_code == 2 and "invalid_template" in result.output and "spec.sink.path" in result.output
    assert "'dz' is undefined" in result.output
    bad_param = spillway(live, "trigger", "bad", "--date", "2026-04-01", "--param", "novalue")
    assert bad_param.exit_code == 2 and "NAME=VALUE" in bad_param.output


def test_the_root_token_reaches_the_service(live: dict[str, Any]) -> None:
    result = CliRunner().invoke(root, ["--token", "s3cret", "pipeline", "list", "--url", live["url"]])
    assert result.exit_code == 0, result.output
    assert live["auth"][-1] == "Bearer s3cret"
