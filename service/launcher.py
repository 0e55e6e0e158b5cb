"""Start the service as a child process and wait until it is healthy.

Used by ``spillway demo``, the end-to-end tests and the benchmarks, so all of them
exercise the real thing: ``python -m service.cli serve`` under uvicorn.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from spillway.service.client import SpillwayClient

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port that was free a moment ago on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServiceProcess:
    """A running service: its URL, process and log file."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str]

    def client(self) -> SpillwayClient:
        return SpillwayClient(self.url)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
        """Send ``sig`` (SIGINT: a graceful shutdown) and wait; kill if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


_BIND_ATTEMPTS = 5


def launch_service(workdir: Path, env: dict[str, str] | None = None, *, timeout: float = 180.0) -> ServiceProcess:
    """Start ``spillway serve`` on a free port with ``SPILLWAY_*`` overrides in ``env``.

    The store defaults to ``workdir/spillway.db`` and the log goes to
    ``workdir/service-<port>.log``. A port taken by someone else between choosing
    it and binding it (tests and benchmarks start services side by side) costs a
    fresh port and another start, up to five times.

    Raises
    ------
    RuntimeError
        If the service exits or is not healthy within ``timeout`` seconds; the
        message carries the end of its log.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    for _ in range(_BIND_ATTEMPTS):
        service = _start(workdir, env)
        try:
            return _wait_healthy(service, deadline, timeout)
        except _PortTaken:
            continue
    raise RuntimeError(f"no free port after {_BIND_ATTEMPTS} attempts:\n{service.log()[-3000:]}")


class _PortTaken(Exception):
    """The service could not bind its port: another process took it first."""


def _start(workdir: Path, env: dict[str, str] | None) -> ServiceProcess:
    port = free_port()
    full_env = {
        **os.environ,
        "SPILLWAY_DATABASE_URL": f"sqlite:///{workdir / 'spillway.db'}",
        **(env or {}),
        "SPILLWAY_PORT": str(port),
    }
    log_path = workdir / f"service-{port}.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "spillway", "serve"], cwd=REPO_ROOT, env=full_env, stdout=log_file, stderr=subprocess.STDOUT
        )
    return ServiceProcess(f"http://127.0.0.1:{port}", process, log_path, full_env)


def _wait_healthy(service: ServiceProcess, deadline: float, timeout: float) -> ServiceProcess:
    process = service.process
    with service.client() as client:
        while True:
            if process.poll() is not None:
                log = service.log()
                if "address already in use" in log.lower():
                    raise _PortTaken
                raise RuntimeError(f"the service exited with code {process.returncode}:\n{log[-3000:]}")
            try:
                health = client.health()
                # Another service on this port (it won the race for it) answers too: wait
                # until ours is the one answering, or fails to bind.
                if health.status == "ok" and health.details.get("pid") == process.pid:
                    return service
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if time.monotonic() > deadline:
                service.stop(signal.SIGKILL)
                raise RuntimeError(f"the service was not healthy within {timeout:.0f} s:\n{service.log()[-3000:]}")
            time.sleep(0.3)
