"""Status reads for coroutines: the reads of jobs queued while the last ones ran, made in one query.

The most frequent request (``GET /jobs/{id}``) reads one job. Made one ``asyncio.to_thread``
and one SELECT each, the hops cost the service more CPU than the rows under 100 concurrent
readers (bench/RESULTS.md, issue 16 item 14); :class:`StatusReads` batches them instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spillway.service.schemas import JobView
    from spillway.service.store import JobStore

_Read = tuple[str, "str | None", asyncio.AbstractEventLoop, "asyncio.Future[JobView]"]


class StatusReads:
    """:meth:`JobStore.get` for coroutines: the reads queued while the last ones ran, in one query.

    A status read used to be one ``asyncio.to_thread`` and one SELECT. Under 100 concurrent
    readers the hops (the thread pool's locks and futures, waking a thread, waking the loop back)
    and SQLAlchemy's fixed cost of a statement took more of the service's CPU than the rows
    themselves (bench/RESULTS.md, issue 16 item 14). Here a read joins a queue that ``threads``
    threads drain: each takes whatever has queued by the time it is free (up to ``batch``), reads
    it with :meth:`JobStore.get_many`, and answers each loop in one callback. No read waits for
    company (a lone read is read alone, at once), and none is answered from a query that began
    before it queued: every reader sees the database as it was after it asked, as before.
    """

    def __init__(self, store: JobStore, *, threads: int = 2, batch: int = 500) -> None:
        self._store = store
        self._batch = batch
        self._queue: queue.SimpleQueue[_Read | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, name=f"spillway-status-reads-{i}", daemon=True) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    async def get(self, job_id: str, *, owner: str | None = None) -> JobView:
        """The job, as :meth:`JobStore.get` reads it. Raises :class:`JobNotFound`."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[JobView] = loop.create_future()
        with self._lock:
            queued = not self._closed
            if queued:
                self._queue.put((job_id, owner, loop, answer))
        if not queued:  # closed with the store, which still reads
            return await asyncio.to_thread(self._store.get, job_id, owner=owner)
        return await answer

    def close(self) -> None:
        """Stop the threads once the reads queued so far are answered; later reads take a thread each."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in self._threads:
                    self._queue.put(None)

    def _serve(self) -> None:
        while (first := self._queue.get()) is not None:
            batch = [first]
            while len(batch) < self._batch:
                try:
                    read = self._queue.get_nowait()
                except queue.Empty:
                    break
                if read is None:
                    self._queue.put(None)  # this thread's stop, taken after the batch is answered
                    break
                batch.append(read)
            self._answer(batch)

    def _answer(self, batch: list[_Read]) -> None:
        reads = [(job_id, owner) for job_id, owner, _, _ in batch]
        try:
            views: list[Any] = self._store.get_many(reads)
        except Exception:  # noqa: BLE001 - each read again on its own, to fail (or not) as it would have alone
            views = [self._get_one(job_id, owner) for job_id, owner in reads]
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[JobView], Any]]] = {}
        for (_, _, loop, answer), view in zip(batch, views):
            by_loop.setdefault(loop, []).append((answer, view))
        for loop, answers in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there any more
                loop.call_soon_threadsafe(_settle, answers)

    def _get_one(self, job_id: str, owner: str | None) -> JobView | Exception:
        try:
            return self._store.get(job_id, owner=owner)
        except Exception as exc:  # noqa: BLE001 - handed to the reader, who raises it
            return exc


def _settle(answers: list[tuple[asyncio.Future[JobView], Any]]) -> None:
    """On the readers' loop: each answer's view, or its error; a reader that gave up is skipped."""
    for answer, view in answers:
        if answer.cancelled():
            continue
        if isinstance(view, BaseException):
            answer.set_exception(view)
        else:
            answer.set_result(view)
