"""Who may use the GPU workers now: every job at once, or one job across all of them alone.

Jobs share the workers as Dask places their tasks. A job across every GPU worker (cudf-polars'
DaskEngine, jobs/gpu_multi.py) cannot share them: it runs through ``client.run``, which the
scheduler does not see, and holds each worker's device memory for its ranks. So it waits until
the jobs running finish, and jobs that come after it wait until it is done (it goes first, so a
steady flow of small jobs cannot starve it). A job's ``cancelled`` event ends its wait.
"""

from __future__ import annotations

import asyncio


class GpuGate:
    """A shared/exclusive gate over the cluster's GPU workers, for the jobs of one service."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._sharing = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    @property
    def sharing(self) -> int:
        """Jobs holding the workers shared now."""
        return self._sharing

    @property
    def exclusive(self) -> bool:
        """Whether one job holds the workers alone now."""
        return self._exclusive

    async def acquire_shared(self, cancelled: asyncio.Event) -> bool:
        """Wait to share the workers; False (nothing held) when ``cancelled`` is set first."""
        async with self._changed:
            await self._changed.wait_for(lambda: cancelled.is_set() or (not self._exclusive and not self._waiting_exclusive))
            if cancelled.is_set():
                return False
            self._sharing += 1
            return True

    async def release_shared(self) -> None:
        async with self._changed:
            self._sharing -= 1
            self._changed.notify_all()

    async def acquire_exclusive(self, cancelled: asyncio.Event) -> bool:
        """Wait to hold the workers alone; False (nothing held) when ``cancelled`` is set first."""
        async with self._changed:
            self._waiting_exclusive += 1
            try:
                await self._changed.wait_for(lambda: cancelled.is_set() or (not self._exclusive and not self._sharing))
            finally:
                self._waiting_exclusive -= 1
                self._changed.notify_all()  # shared waiters look again, whether this one got in or gave up
            if cancelled.is_set():
                return False
            self._exclusive = True
            return True

    async def release_exclusive(self) -> None:
        async with self._changed:
            self._exclusive = False
            self._changed.notify_all()

    async def wake(self) -> None:
        """Have every waiter look again (a job's ``cancelled`` was set)."""
        async with self._changed:
            self._changed.notify_all()
