"""``JobChanges``: wakes the event streams of a job the moment its row changes.

The store calls :meth:`JobChanges.notify` after every committed write, from whatever thread
wrote; each ``GET /jobs/{id}/events`` stream waits on :meth:`JobChanges.watch` instead of
polling the database on a timer, so a job's end reaches its watchers within a millisecond,
not within a poll interval.

Writes made by another service process on the same database reach no ``notify`` here. For
those, one task looks at the database every ``fallback_s`` for all the streams at once: one
query of the watched jobs' versions (state and ``updated_at``, :meth:`JobStore.versions`),
waking only the streams whose job's version differs from the one they last showed. Each
stream reading its whole row every second instead cost the service a fifth of a core with 200
streams open on jobs that did not change (bench/RESULTS.md, issue 16 item 14).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from typing import Any

log = logging.getLogger(__name__)

#: The versions of those of the given jobs that exist (``JobStore.versions``); called in a thread.
Versions = Callable[[Iterable[str]], dict[str, Any]]


class JobWatch:
    """One stream's view of one job: :meth:`wait` returns once the job changed (or after a timeout)."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self._seen: Any = None

    def _set(self) -> None:
        self._changed.set()

    def seen(self, version: Any) -> None:
        """Record the version of the job the stream has just read (:func:`service.store.job_version`):
        the look at the database wakes this watch when the job's version is another one."""
        self._seen = version

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a change; whether one came. Changes are not lost between calls."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        self._changed.clear()
        return True


class JobChanges:
    """The job ids written in this process, delivered to the streams watching them on ``loop``.

    Parameters
    ----------
    loop
        The event loop the streams run on.
    versions
        Reads the versions of jobs from the database (``JobStore.versions``), to see other
        processes' writes; None: only this process's writes are seen.
    fallback_s
        Seconds between those looks, while any stream is open.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, versions: Versions | None = None, fallback_s: float = 1.0) -> None:
        self._loop = loop
        self._watches: dict[str, set[JobWatch]] = defaultdict(set)
        self._versions = versions
        self._fallback_s = fallback_s
        self._poller: asyncio.Task[None] | None = None

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
        if self._versions is not None and (self._poller is None or self._poller.done()):
            self._poller = asyncio.create_task(self._look_while_watched(), name="spillway-job-changes")
        try:
            yield watch
        finally:
            watches = self._watches.get(job_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[job_id]

    async def _look_while_watched(self) -> None:
        """Every ``fallback_s`` while any stream is open: one read of the watched jobs' versions."""
        assert self._versions is not None
        while self._watches:
            await asyncio.sleep(self._fallback_s)
            ids = list(self._watches)
            if not ids:
                break
            try:
                current = await asyncio.to_thread(self._versions, ids)
            except Exception as exc:  # noqa: BLE001 - the database restarting: the streams wait, look again next round
                log.warning("looking for other replicas' job changes failed: %s: %s", type(exc).__name__, exc)
                continue
            for job_id in ids:
                version = current.get(job_id)  # None: the row is gone, which the stream's next read reports
                for watch in self._watches.get(job_id, ()):
                    if version is None or watch._seen != version:
                        watch._set()

    async def close(self) -> None:
        """Stop looking at the database (at shutdown)."""
        if self._poller is not None:
            self._poller.cancel()
            with suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
