"""The heartbeat's decisions on a real store (SQLite, and PostgreSQL with SPILLWAY_TEST_POSTGRES_URL):
a replica judges others only after beating for the timeout itself, and one that finds its row gone
stops its jobs and registers again. Time is a fake clock; the two-process test is tests/test_replicas.py."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from spillway.service.replica_heartbeat import ReplicaHeartbeat
from spillway.service.replicas import ReplicaIdentity
from spillway.service.store import JobStore

TIMEOUT_S = 30.0


class Clocks:
    """The store's wall clock and the heartbeat's monotonic one, moved together."""

    def __init__(self) -> None:
        self.wall = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
        self.mono = 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


class Calls:
    """What the heartbeat asked of the manager."""

    def __init__(self) -> None:
        self.settles = 0
        self.fenced: list[str] = []

    async def settle(self) -> int:
        self.settles += 1
        return 0

    async def fence(self, reason: str) -> None:
        self.fenced.append(reason)


def heartbeat(store: JobStore, clocks: Clocks, calls: Calls, name: str = "me") -> ReplicaHeartbeat:
    identity = ReplicaIdentity(id=name, host="h", boot_id="", pid=1)
    return ReplicaHeartbeat(store.replicas, identity, interval_s=5, timeout_s=TIMEOUT_S, settle_orphans=calls.settle,
                            fenced=calls.fence, monotonic=clocks.monotonic)


def test_a_replica_judges_others_only_after_beating_for_the_timeout(database_url: str) -> None:
    clocks, calls = Clocks(), Calls()
    store = JobStore(database_url, clock=clocks.now)
    try:
        store.replicas.register(ReplicaIdentity(id="silent", host="h2", boot_id="", pid=1))
        clocks.advance(TIMEOUT_S * 2)  # silent's heartbeat is old: as after an outage of the database
        beats = heartbeat(store, clocks, calls)
        asyncio.run(beats.register())
        asyncio.run(beats.beat())
        assert [r for r, _ in store.replicas.live()] == ["me", "silent"], "not judged before beating for the timeout"
        assert calls.settles == 0
        clocks.advance(TIMEOUT_S)
        asyncio.run(beats.beat())
        assert [r for r, _ in store.replicas.live()] == ["me"]
        assert calls.settles == 1 and calls.fenced == []
    finally:
        store.close()


def test_a_replica_that_finds_its_row_gone_stops_its_jobs_and_registers_again(database_url: str) -> None:
    clocks, calls = Clocks(), Calls()
    store = JobStore(database_url, clock=clocks.now)
    try:
        beats = heartbeat(store, clocks, calls)
        asyncio.run(beats.register())
        clocks.advance(TIMEOUT_S + 1)  # its event loop stalled: another replica takes it for dead
        assert store.replicas.expire(TIMEOUT_S) == ["me"]
        asyncio.run(beats.beat())
        assert len(calls.fenced) == 1 and "SPILLWAY_REPLICA_TIMEOUT_S" in calls.fenced[0]
        assert [r for r, _ in store.replicas.live()] == ["me"]
        asyncio.run(beats.beat())
        assert len(calls.fenced) == 1, "fenced once, not on every beat"
    finally:
        store.close()
