"""Fixtures: generated data, a real service under uvicorn with a real local Dask cluster."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spillway.jobs.samples import write_sample_data
from spillway.service.client import SpillwayClient
from spillway.service.launcher import REPO_ROOT as ROOT
from spillway.service.launcher import ServiceProcess, launch_service
from spillway.jobs.spec import JobSpec
from spillway.service.schemas import JobAccepted, JobView

__all__ = ["ROOT", "ServiceProcess", "start_service", "wait_for", "wait_terminal"]


def wait_for(predicate: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """40k sales rows in 4 parquet files, and a products CSV."""
    return write_sample_data(tmp_path_factory.mktemp("data"), rows=40_000, files=4)


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once from this tree (no isolation: the venv's setuptools)."""
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("spillway-*.whl")
    return wheel


@pytest.fixture(scope="session")
def big_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """1.2M rows in 24 files: enough work that a job is still running when a test acts on it."""
    return write_sample_data(tmp_path_factory.mktemp("big"), rows=1_200_000, files=24)


@pytest.fixture(scope="session")
def sales_frame(sample_data: dict[str, Path]) -> pd.DataFrame:
    """The sample sales as one pandas frame: the reference every result is checked against."""
    return pd.read_parquet(sample_data["sales"])


def start_service(workdir: Path, *, extra_env: dict[str, str] | None = None) -> ServiceProcess:
    """A live service on the CPU backend with 2 workers and its own SQLite store."""
    env = {
        "SPILLWAY_CLUSTER__BACKEND": "pandas",
        "SPILLWAY_CLUSTER__N_WORKERS": "2",
        "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0",
        "SPILLWAY_CLUSTER__LOCAL_DIRECTORY": str(workdir / "dask"),
        "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]',  # pytest's tmp_path lives there
        **(extra_env or {}),
    }
    return launch_service(workdir, env)


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One live service shared by the end-to-end tests (2 CPU workers, SQLite)."""
    proc = start_service(tmp_path_factory.mktemp("service"), extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "2"})
    yield proc
    proc.stop()


ENGINES = ("polars", "dask")


class EngineClient(SpillwayClient):
    """A client whose submitted specs run on ``engine`` unless they name one themselves."""

    def __init__(self, base_url: str, engine: str) -> None:
        super().__init__(base_url)
        self.engine = engine

    def submit(self, spec: JobSpec | dict[str, Any], *, idempotency_key: str | None = None) -> JobAccepted:
        body = spec.model_dump(mode="json") if isinstance(spec, JobSpec) else dict(spec)
        if body.get("engine") is None:
            body["engine"] = self.engine
        return super().submit(body, idempotency_key=idempotency_key)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests on the live service run once per engine; ``@pytest.mark.engines("dask")`` narrows that
    for a test about one engine's own behaviour (the Dask engine's per-partition progress, say)."""
    explicit = any("engine" in str(m.args[0]).replace(" ", "").split(",") for m in metafunc.definition.iter_markers("parametrize"))
    if "engine" in metafunc.fixturenames and not explicit:
        marker = metafunc.definition.get_closest_marker("engines")
        metafunc.parametrize("engine", marker.args if marker else ENGINES, scope="function")


@pytest.fixture()
def api(service: ServiceProcess, engine: str) -> Iterator[SpillwayClient]:
    """A client of the shared service whose jobs run on ``engine`` (each test runs on both)."""
    with EngineClient(service.url, engine) as client:
        yield client


POSTGRES_URL = os.environ.get("SPILLWAY_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL: a SQLite file, or a fresh schema of its own on PostgreSQL (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'spillway.db'}"
        return
    with fresh_postgres_schema() as url:
        yield url


@contextlib.contextmanager
def fresh_postgres_schema() -> Iterator[str]:
    """The URL of a fresh PostgreSQL schema of its own, dropped after; skips the test without SPILLWAY_TEST_POSTGRES_URL."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL test skipped: set SPILLWAY_TEST_POSTGRES_URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    from sqlalchemy import text

    from spillway.service.store import make_engine

    schema = f"t_{uuid.uuid4().hex[:8]}"
    engine = make_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield POSTGRES_URL + ("&" if "?" in POSTGRES_URL else "?") + f"options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


def wait_terminal(client: SpillwayClient, job_id: str, timeout: float = 120.0) -> JobView:
    """Poll a job until it is terminal."""
    return wait_for(lambda: (j := client.get(job_id)).state.is_terminal() and j, timeout=timeout, interval=0.2, what=f"job {job_id} to finish")


def gpu_available() -> bool:
    from spillway.cluster.factory import gpu_stack_installed, visible_gpu_count

    return gpu_stack_installed() and visible_gpu_count() > 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and the gpu extra (pip install '.[gpu]')")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
