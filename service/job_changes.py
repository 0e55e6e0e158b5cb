"""``JobChanges``: wakes the event streams of a job the moment its row changes.

The store calls :meth:`JobChanges.notify` after every committed write, from whatever thread
wrote; each ``GET /jobs/{id}/events`` stream waits on :meth:`JobChanges.watch` instead of
polling the database on a timer, so a job's end reaches its watchers within a millisecond,
not within a poll interval. Writes made by another service process on the same database
are not seen here: streams still re-read the row every ``fallback_s`` for those.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class JobWatch:
    """One stream's view of one job: :meth:`wait` returns once the job changed (or after a timeout)."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def _set(self) -> None:
        self._changed.set()

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a change; whether one came. Changes are not lost between calls."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        self._changed.clear()
        return True


class JobChanges:
    """The job ids written in this process, delivered to the streams watching them on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._watches: dict[str, set[JobWatch]] = defaultdict(set)

    def notify(self, job_id: str) -> None:
        """Record that ``job_id`` changed; safe from any thread (the store writes from worker threads)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, job_id)

    def _wake(self, job_id: str) -> None:
        for watch in self._watches.get(job_id, ()):
            watch._set()

    @asynccontextmanager
    async def watch(self, job_id: str) -> AsyncIterator[JobWatch]:
        """A :class:`JobWatch` on ``job_id`` for the duration of the block."""
        watch = JobWatch()
        self._watches[job_id].add(watch)
        try:
            yield watch
        finally:
            watches = self._watches.get(job_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[job_id]
