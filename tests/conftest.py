"""Fixtures: generated data, a real service under uvicorn with a real local Dask cluster."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from jobs.samples import write_sample_data
from service.client import SpillwayClient
from service.schemas import JobView

ROOT = Path(__file__).resolve().parents[1]


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """40k sales rows in 4 parquet files, and a products CSV."""
    return write_sample_data(tmp_path_factory.mktemp("data"), rows=40_000, files=4)


@pytest.fixture(scope="session")
def big_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """1.2M rows in 24 files: enough work that a job is still running when a test acts on it."""
    return write_sample_data(tmp_path_factory.mktemp("big"), rows=1_200_000, files=24)


@pytest.fixture(scope="session")
def sales_frame(sample_data: dict[str, Path]) -> pd.DataFrame:
    """The sample sales as one pandas frame: the reference every result is checked against."""
    return pd.read_parquet(sample_data["sales"])


@dataclass
class ServiceProcess:
    """A real service: ``python -m service.cli serve`` on a free port."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str]

    def client(self) -> SpillwayClient:
        return SpillwayClient(self.url)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_service(workdir: Path, *, database_url: str | None = None, extra_env: dict[str, str] | None = None) -> ServiceProcess:
    """Start the service and wait until /healthz says ok."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "SPILLWAY_PORT": str(port),
        "SPILLWAY_DATABASE_URL": database_url or f"sqlite:///{workdir / 'spillway.db'}",
        "SPILLWAY_CLUSTER__BACKEND": "pandas",
        "SPILLWAY_CLUSTER__N_WORKERS": "2",
        "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0",
        "SPILLWAY_CLUSTER__LOCAL_DIRECTORY": str(workdir / "dask"),
        **(extra_env or {}),
    }
    log_path = workdir / f"service-{port}.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve"], cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    service = ServiceProcess(f"http://127.0.0.1:{port}", process, log_path, env)

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"service exited with {process.returncode}:\n{service.log()[-3000:]}")
        try:
            with service.client() as client:
                return client.health().status == "ok"
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    wait_for(healthy, timeout=120, interval=0.3, what="the service to become healthy")
    return service


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One live service shared by the end-to-end tests (2 CPU workers, SQLite)."""
    proc = start_service(tmp_path_factory.mktemp("service"), extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "2"})
    yield proc
    proc.stop()


@pytest.fixture()
def api(service: ServiceProcess) -> Iterator[SpillwayClient]:
    with service.client() as client:
        yield client


def wait_terminal(client: SpillwayClient, job_id: str, timeout: float = 120.0) -> JobView:
    """Poll a job until it is terminal."""
    return wait_for(lambda: (j := client.get(job_id)).state.is_terminal() and j, timeout=timeout, interval=0.2, what=f"job {job_id} to finish")


def gpu_available() -> bool:
    from cluster.factory import gpu_stack_installed, visible_gpu_count

    return gpu_stack_installed() and visible_gpu_count() > 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and the gpu extra (pip install '.[gpu]')")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
