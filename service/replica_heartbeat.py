"""This replica's heartbeat, the reaping of dead replicas, and the scheduler's lease.

:class:`ReplicaHeartbeat` keeps this replica's row fresh every ``interval_s``. Each beat
also deletes the rows of replicas silent for ``timeout_s`` and settles the RUNNING jobs no
live replica runs (``settle_orphans``), so a replica killed mid-job leaves its jobs FAILED
``interrupted`` (or SUCCEEDED, when its commit had landed) within about ``timeout_s +
interval_s``, on whichever replica notices first.

A replica judges others only after it has itself beaten without a failure for
``timeout_s``: after a database outage every replica's heartbeat is old, and each one gets
that long to beat again before anyone takes it for dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from spillway.service.replicas import ReplicaIdentity, ReplicaStore

log = logging.getLogger("spillway.replicas")

#: The lease the pipeline scheduler ticks under: one replica at a time.
SCHEDULER_LEASE = "pipeline-scheduler"


class ReplicaHeartbeat:
    """Registers this replica, beats, and settles what dead replicas left.

    Parameters
    ----------
    replicas
        The replica rows (``JobStore.replicas``).
    identity
        This replica.
    interval_s
        Seconds between beats.
    timeout_s
        A replica silent this long is taken for dead.
    settle_orphans
        Settles RUNNING jobs of no live replica (``JobManager.recover_orphans``).
    fenced
        Called with a reason when this replica finds its own row gone (the others took it for
        dead and settled its jobs): it must stop running them (``JobManager.abandon_running``).
    monotonic
        The clock of the grace period after a failed beat; tests pass a fake one.
    """

    def __init__(
        self,
        replicas: ReplicaStore,
        identity: ReplicaIdentity,
        *,
        interval_s: float,
        timeout_s: float,
        settle_orphans: Callable[[], Awaitable[int]],
        fenced: Callable[[str], Awaitable[None]],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replicas = replicas
        self.identity = identity
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.settle_orphans = settle_orphans
        self.fenced = fenced
        self.monotonic = monotonic
        self._healthy_since: float | None = None
        self._task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        """Add this replica's row; forget replicas of this host whose process is gone (a restart
        settles its predecessor's jobs at once). Call before the manager starts claiming jobs."""
        await asyncio.to_thread(self.replicas.register, self.identity)
        self._healthy_since = self.monotonic()
        if dead := await asyncio.to_thread(self.replicas.expire_dead_here, self.identity):
            log.warning("replica(s) %s on this host are gone (their process exited): their running jobs are settled now", ", ".join(dead))
        log.info("replica %s registered (heartbeat every %g s, taken for dead after %g s)", self.identity.id, self.interval_s, self.timeout_s)

    def start(self) -> None:
        """Beat every ``interval_s`` until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="spillway-replica-heartbeat")

    async def stop(self) -> None:
        """Stop beating (the row stays until :meth:`deregister`)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def deregister(self) -> None:
        """Delete this replica's row, once its jobs are settled (a clean stop)."""
        try:
            await asyncio.to_thread(self.replicas.remove, self.identity.id)
        except Exception as exc:  # noqa: BLE001 - the database gone at shutdown: the row expires on its own
            log.warning("could not remove this replica's row: %s: %s", type(exc).__name__, exc)

    async def beat(self) -> None:
        """One beat: refresh the row (re-adding it, after stopping this replica's jobs, if it was
        taken for dead), then expire silent replicas and settle orphaned jobs."""
        if not await asyncio.to_thread(self.replicas.beat, self.identity.id):
            reason = (f"this replica ({self.identity.id}) sent no heartbeat for {self.timeout_s:g} s "
                      "(SPILLWAY_REPLICA_TIMEOUT_S) and was taken for dead by another; its jobs here are stopped")
            log.error(reason)
            await self.fenced(reason)
            await asyncio.to_thread(self.replicas.register, self.identity)
        now = self.monotonic()
        if self._healthy_since is None:
            self._healthy_since = now
        if now - self._healthy_since < self.timeout_s:
            return  # the others may be catching up after an outage too
        if gone := await asyncio.to_thread(self.replicas.expire, self.timeout_s):
            log.warning("replica(s) %s sent no heartbeat for %g s: taken for dead", ", ".join(gone), self.timeout_s)
        if settled := await self.settle_orphans():
            log.warning("%d job(s) of dead replicas settled", settled)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database restarting: judge nobody until beats succeed again
                self._healthy_since = None
                log.warning("replica heartbeat failed: %s: %s", type(exc).__name__, exc)


class SchedulerLease:
    """Whether this replica may tick the pipeline scheduler now: it holds (or just took) the lease.

    Parameters
    ----------
    replicas
        The lease rows.
    holder
        This replica's id.
    ttl_s
        How long a taken lease lasts; renewed on every check, so a dead holder's lapses within it.
    """

    def __init__(self, replicas: ReplicaStore, holder: str, ttl_s: float) -> None:
        self.replicas = replicas
        self.holder = holder
        self.ttl_s = ttl_s
        self.held = False

    async def __call__(self) -> bool:
        held = await asyncio.to_thread(self.replicas.acquire_lease, SCHEDULER_LEASE, self.holder, self.ttl_s)
        if held != self.held:
            log.info("pipeline scheduler %s on this replica (%s)", "active" if held else "standing by", self.holder)
        self.held = held
        return held

    async def release(self) -> None:
        """Give the lease up at a clean stop, so another replica takes over on its next tick."""
        if self.held:
            self.held = False
            try:
                await asyncio.to_thread(self.replicas.release_lease, SCHEDULER_LEASE, self.holder)
            except Exception as exc:  # noqa: BLE001 - the database gone at shutdown: the lease lapses on its own
                log.warning("could not release the scheduler lease: %s: %s", type(exc).__name__, exc)
