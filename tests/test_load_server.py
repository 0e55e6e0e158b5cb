"""The HTTP server's stack and the garbage collector settings behind bench/load.py's figures (issue 16 item 14).

``spillway serve`` runs on uvloop and httptools by default and on asyncio's loop and h11 with
``SPILLWAY_SERVER_LOOP=asyncio`` / ``SPILLWAY_SERVER_HTTP=h11``; each stack runs a job, follows
it to its end over server-sent events and answers a malformed request with a 400.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.conftest import start_service

pytestmark = pytest.mark.slow


def _loaded(pid: int) -> set[str]:
    """Which of uvloop and httptools the process has mapped (their compiled modules)."""
    paths = [m.path for m in psutil.Process(pid).memory_maps()]
    return {name for name in ("uvloop", "httptools") if any(f"/{name}/" in p for p in paths)}


def _raw_request(url: str, data: bytes) -> bytes:
    """Send ``data`` as it is on one connection; the first bytes of the answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(data)
        return sock.recv(200)


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, {"uvloop", "httptools"}), ({"SPILLWAY_SERVER_LOOP": "asyncio", "SPILLWAY_SERVER_HTTP": "h11"}, set())],
    ids=["uvloop-httptools", "asyncio-h11"],
)
def test_each_server_stack_runs_jobs_and_streams(tmp_path: Path, sample_data: dict[str, Path], env: dict[str, str], expected: set[str]) -> None:
    service = start_service(tmp_path / "svc", extra_env=env)
    try:
        assert _loaded(service.process.pid) == expected
        with service.client() as client:
            spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 5}], "sink": {"path": str(tmp_path / "out")}}
            accepted = client.submit(spec)
            events = list(client.events(accepted.id))
            assert events[-1].kind == "end" and events[-1].state.value == "SUCCEEDED"
            assert events[-1].job is not None and events[-1].job.result is not None and events[-1].job.result.total_rows == 5
            assert client.get(accepted.id).state.value == "SUCCEEDED"
        assert _raw_request(service.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200")
        assert _raw_request(service.url, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400")
    finally:
        service.stop()


def test_an_unknown_server_stack_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="server_http"):
        start_service(tmp_path / "svc", extra_env={"SPILLWAY_SERVER_HTTP": "zttp"})


def _in_child(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object, returned here."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tune_gc_freezes_start_up_and_still_collects_cycles() -> None:
    result = _in_child(
        """
        import gc, json, weakref
        from spillway.service.gc_tuning import YOUNG_THRESHOLD, tune_gc
        before = gc.get_threshold()
        tune_gc()
        after = gc.get_threshold()

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        keep = [[] for _ in range(3 * YOUNG_THRESHOLD)]  # enough allocations for a young collection on its own
        print(json.dumps({"before": before, "after": after, "frozen": gc.get_freeze_count(), "cycle_freed": gone() is None, "young": YOUNG_THRESHOLD}))
        """
    )
    assert result["after"] == [result["young"], result["before"][1], result["before"][2]]
    assert result["frozen"] > 5_000  # the interpreter's and the imported modules, classes and functions
    assert result["cycle_freed"] is True
