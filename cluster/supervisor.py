"""Keeps the embedded cluster alive: when its process dies, start a new one.

Jobs running on the dead cluster fail with the reason (the manager sees their
futures cancelled by the lost connection); new jobs run on the new cluster. A
cluster joined by address is not restarted here: it is someone else's to run,
and the client reconnects to it by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from spillway.cluster.factory import ClusterHandle, start_cluster
from spillway.cluster.settings import ClusterSettings

log = logging.getLogger(__name__)


class ClusterSupervisor:
    """Watches a local cluster's process and replaces the cluster when it exits.

    Parameters
    ----------
    settings
        What to start again.
    handle
        The cluster now in use.
    on_replaced
        Called with the new handle, so the manager and the routes use it.
    interval
        Seconds between checks.
    """

    def __init__(self, settings: ClusterSettings, handle: ClusterHandle, on_replaced: Callable[[ClusterHandle], None], interval: float = 1.0) -> None:
        self.settings = settings
        self.handle = handle
        self.on_replaced = on_replaced
        self.interval = interval
        self.restarts = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="spillway-cluster-supervisor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            process = self.handle.cluster.process if self.handle.cluster is not None else None
            if process is None or process.poll() is None:
                continue
            log.error("the local cluster exited (code %s); running jobs fail, starting a new cluster", process.returncode)
            old = self.handle
            try:
                new = await start_cluster(self.settings)
            except Exception:  # noqa: BLE001 - try again on the next check
                log.exception("could not start a new cluster; retrying")
                continue
            self.handle = new
            self.restarts += 1
            self.on_replaced(new)
            await old.close()
            log.warning("a new %s is up at %s", new.kind, new.client.scheduler.address)
