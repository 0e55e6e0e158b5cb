"""The launcher the demo, the end-to-end tests and the benchmarks start the service with."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from spillway.service import launcher


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port someone else is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_taken_before_the_service_binds_it_costs_a_fresh_port(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race the launcher loses when a Dask worker takes the port it chose first.
    ports = iter([taken_port])
    real_free_port = launcher.free_port
    monkeypatch.setattr(launcher, "free_port", lambda: next(ports, None) or real_free_port())
    env = {
        "SPILLWAY_CLUSTER__BACKEND": "pandas",
        "SPILLWAY_CLUSTER__N_WORKERS": "1",
        "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0",
        "SPILLWAY_CLUSTER__LOCAL_DIRECTORY": str(tmp_path / "dask"),
    }
    service = launcher.launch_service(tmp_path, env)
    try:
        assert not service.url.endswith(f":{taken_port}")
        assert service.client().health().details["pid"] == service.process.pid
        first_log = (tmp_path / f"service-{taken_port}.log").read_text()
        assert "address already in use" in first_log.lower()
    finally:
        service.stop()
