"""A job's log: what the service did, the worker exception with its remote traceback,
and the workers' warnings and errors logged while the job ran. Capped in size.

Worker lines are cluster-wide: with several jobs running at once, a warning in the
window may belong to another job. Each line says which worker logged it.
"""

from __future__ import annotations

import traceback
from datetime import datetime
from typing import Any

MAX_LOG_BYTES = 64 * 1024
_WORKER_LEVELS = ("WARNING", "ERROR", "CRITICAL")


class JobLog:
    """Lines for one job, newest last, never more than ``MAX_LOG_BYTES`` in all."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._size = 0
        self.truncated = False

    def add(self, line: str) -> None:
        if self._size + len(line) > MAX_LOG_BYTES:
            self.truncated = True
            return
        self.lines.append(line)
        self._size += len(line)

    def add_exception(self, exc: BaseException) -> None:
        """The exception with its traceback; for a task error, the worker's own frames (via tblib)."""
        for block in traceback.format_exception(exc):
            self.add(block.rstrip("\n"))

    def add_worker_lines(self, logs: dict[str, list[Any]], start: datetime, end: datetime) -> None:
        """Workers' WARNING and ERROR lines whose timestamp falls in [start, end] (local time, as logged)."""
        begin, finish = start.astimezone().replace(tzinfo=None), end.astimezone().replace(tzinfo=None)
        for worker, entries in sorted(logs.items()):
            for level, message in entries:
                if level not in _WORKER_LEVELS:
                    continue
                try:
                    stamp = datetime.strptime(str(message)[:23], "%Y-%m-%d %H:%M:%S,%f")
                except ValueError:
                    continue
                if begin <= stamp <= finish:
                    self.add(f"[{worker}] {message}")

    def to_list(self) -> list[str]:
        return self.lines + (["… (log truncated)"] if self.truncated else [])
