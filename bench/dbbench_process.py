"""The harness's side of an engine worker (bench/dbbench_worker.py), a CPU meter, machine info.

A worker runs in its own process group, so killing it at a deadline takes its service
and Dask workers along. The CPU meter tells, for each timed run, how much CPU other
processes on the machine used meanwhile: on a shared machine that is what makes a time
noisy, so the report can say so instead of hiding it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("dbbench_worker.py")


@dataclass(frozen=True)
class Engine:
    """One column of the results: an engine kind on a backend with its limits."""

    name: str
    kind: str  # spillway, dask, duckdb, polars
    backend: str  # pandas or cudf
    threads: int
    devices: str | None = None  # CUDA_VISIBLE_DEVICES for GPU engines


class EngineProcess:
    """A worker process serving one engine; a request that outlives its time is answered by a kill."""

    def __init__(self, engine: Engine, config: dict[str, Any], log_path: Path) -> None:
        limits = {var: str(engine.threads) for var in ("POLARS_MAX_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        with open(log_path, "ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps({**config, **asdict(engine)})],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **limits},
                start_new_session=True,  # its own process group: a kill takes its service and cluster too
            )
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next reply; ``{"timeout": True}`` when none came within ``timeout`` s; None when the process ended."""
        try:
            return self.replies.get(timeout=None if math.isinf(timeout) else max(timeout, 0.1))
        except queue.Empty:
            return {"timeout": True}

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(payload) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return None
        return self.receive(timeout)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, grace: float = 60.0) -> None:
        """Close its stdin (it then shuts its engine down), then SIGTERM and SIGKILL its group if it lingers."""
        if self.process.stdin and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        for sig, wait in ((None, grace), (signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            if sig is not None:
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    return
            try:
                self.process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def kill(self) -> None:
        self.stop(grace=0.1)


class CpuMeter:
    """CPU seconds the whole machine spent, and those of one process tree (psutil; zero without it)."""

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def machine_busy_s(self) -> float:
        stat = Path("/proc/stat")
        if not stat.exists():
            return 0.0
        fields = [int(v) for v in stat.read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / self.tick

    @staticmethod
    def tree_s(pid: int) -> float:
        try:
            import psutil

            root = psutil.Process(pid)
            total = 0.0
            for proc in [root, *root.children(recursive=True)]:
                try:
                    times = proc.cpu_times()
                    total += times.user + times.system
                except psutil.Error:
                    continue
            return total
        except Exception:  # noqa: BLE001 - no psutil or the process is gone: no figure
            return 0.0


def machine_info(backend: str) -> dict[str, Any]:
    """Cores, CPU model, RAM, Python, and on cudf the GPUs as nvidia-smi reports them."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(), "cores": os.cpu_count()}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        info["cpu"] = models[0] if models else None
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        total_kb = next(int(line.split()[1]) for line in meminfo.read_text().splitlines() if line.startswith("MemTotal"))
        info["ram_gib"] = round(total_kb / 2**20, 1)
    if backend == "cudf":
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, check=False, timeout=60)
            info["gpus"] = smi.stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired) as exc:
            info["gpus"] = f"nvidia-smi failed: {exc}"
    return info
