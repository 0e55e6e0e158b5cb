"""The database side of replicas, on SQLite and (with SPILLWAY_TEST_POSTGRES_URL) PostgreSQL: each job is
claimed once however many replicas claim at the same moment, in submission order and within per-owner
limits; a dead replica's jobs are orphans and a live one's are not; cancel requests reach the owner;
one lease holder at a time. The two-process tests with kills are tests/test_replicas.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.service.replicas import ReplicaIdentity
from spillway.service.store import JobStore

SPEC = JobSpec.model_validate({"name": "j", "source": {"format": "parquet", "path": "/tmp/in"}, "sink": {"path": "/tmp/out"}})


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture()
def store(database_url: str) -> Iterator[JobStore]:
    store = JobStore(database_url)
    yield store
    store.close()


def replica(name: str, pid: int = 1) -> ReplicaIdentity:
    return ReplicaIdentity(id=name, host="elsewhere", boot_id="b", pid=pid)


def test_concurrent_claims_take_each_job_once_in_submission_order(store: JobStore) -> None:
    ids = [store.create(SPEC, "pandas")[0].id for _ in range(40)]
    claimed: dict[str, list[str]] = {name: [] for name in ("a", "b", "c", "d")}
    barrier = threading.Barrier(len(claimed))

    def claim_all(name: str) -> None:
        barrier.wait()
        while (job := store.claim_next(name)) is not None:
            claimed[name].append(job.id)

    threads = [threading.Thread(target=claim_all, args=(name,)) for name in claimed]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [job_id for jobs in claimed.values() for job_id in jobs]
    assert sorted(every) == sorted(ids), "each job claimed exactly once"
    for name, jobs in claimed.items():
        assert jobs == sorted(jobs, key=ids.index), f"replica {name} claimed out of submission order"
        assert all(store.get(job_id).replica == name and store.get(job_id).state == JobStatus.RUNNING for job_id in jobs)
    assert store.claim_next("a") is None


def test_a_claim_skips_an_owner_at_its_running_limit_across_replicas(store: JobStore) -> None:
    first = store.create(SPEC, "pandas", owner="alice")[0].id
    second = store.create(SPEC, "pandas", owner="alice")[0].id
    bob = store.create(SPEC, "pandas", owner="bob")[0].id
    assert store.claim_next("a", max_running_per_owner=1).id == first
    assert store.claim_next("b", max_running_per_owner=1).id == bob, "alice's second job keeps its place; bob's goes ahead"
    assert store.claim_next("b", max_running_per_owner=1) is None
    store.finish(first, JobStatus.SUCCEEDED)
    assert store.claim_next("b", max_running_per_owner=1).id == second


def test_orphans_are_the_running_jobs_of_replicas_without_a_row(database_url: str) -> None:
    clock = Clock()
    store = JobStore(database_url, clock=clock)
    try:
        replicas = store.replicas
        replicas.register(replica("alive"))
        replicas.register(replica("dead"))
        for name in ("alive", "dead"):
            store.create(SPEC, "pandas")
            store.claim_next(name)
        pending = store.create(SPEC, "pandas")[0].id
        assert replicas.running_orphans() == []
        clock.now += timedelta(seconds=20)
        assert replicas.beat("alive")
        clock.now += timedelta(seconds=15)
        assert replicas.expire(30) == ["dead"], "only the replica silent for 30 s"
        (orphan,) = replicas.running_orphans()
        assert store.get(orphan).replica == "dead" and pending != orphan
        assert not replicas.beat("dead"), "a replica taken for dead finds its row gone"
    finally:
        store.close()


def test_a_replica_restarted_on_its_host_forgets_predecessors_whose_process_is_gone(store: JobStore) -> None:
    me = ReplicaIdentity.of_this_process()
    if not me.boot_id:
        pytest.skip("no /proc/sys/kernel/random/boot_id: the host check needs Linux")
    store.replicas.register(me)
    dead_pid = 2**22 + 12345  # above Linux's pid_max default of 2**22: no such process
    store.replicas.register(ReplicaIdentity(id="gone", host=me.host, boot_id=me.boot_id, pid=dead_pid))
    store.replicas.register(ReplicaIdentity(id="parent", host=me.host, boot_id=me.boot_id, pid=1))  # alive
    store.replicas.register(ReplicaIdentity(id="other-host", host="elsewhere", boot_id=me.boot_id, pid=dead_pid))
    assert store.replicas.expire_dead_here(me) == ["gone"]
    assert [r for r, _ in store.replicas.live()] == sorted([me.id, "other-host", "parent"])


def test_a_cancel_request_reaches_only_the_live_replica_running_the_job(store: JobStore) -> None:
    store.replicas.register(replica("a"))
    store.replicas.register(replica("b"))
    job = store.create(SPEC, "pandas")[0].id
    queued = store.create(SPEC, "pandas")[0].id
    store.claim_next("a")
    assert not store.replicas.request_cancel(job, asked_on="a"), "the replica running it cancels it itself"
    assert not store.replicas.request_cancel(queued, asked_on="b"), "a PENDING job is cancelled outright"
    assert store.replicas.cancel_requests("a") == []
    assert store.replicas.request_cancel(job, asked_on="b")
    assert store.replicas.cancel_requests("a") == [job] and store.replicas.cancel_requests("b") == []
    store.replicas.remove("a")
    other = store.create(SPEC, "pandas")[0].id
    store.claim_next("b")
    store.replicas.remove("b")
    assert not store.replicas.request_cancel(other, asked_on="c"), "no live replica runs it: nobody to ask"


def test_one_lease_holder_until_it_lapses_or_is_released(database_url: str) -> None:
    clock = Clock()
    store = JobStore(database_url, clock=clock)
    try:
        replicas = store.replicas
        results: list[bool] = []
        barrier = threading.Barrier(4)

        def take(name: str) -> None:
            barrier.wait()
            results.append(replicas.acquire_lease("scheduler", name, 30))

        threads = [threading.Thread(target=take, args=(f"r{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == [False, False, False, True], "exactly one of four takers at once"
        holder = replicas.lease_holder("scheduler")
        assert holder is not None
        first = holder[0]
        other = next(f"r{i}" for i in range(4) if f"r{i}" != first)
        clock.now += timedelta(seconds=20)
        assert replicas.acquire_lease("scheduler", first, 30), "the holder renews"
        clock.now += timedelta(seconds=20)
        assert not replicas.acquire_lease("scheduler", other, 30), "renewed 20 s ago: not lapsed"
        clock.now += timedelta(seconds=11)
        assert replicas.acquire_lease("scheduler", other, 30), "lapsed: another takes it"
        assert not replicas.acquire_lease("scheduler", first, 30)
        replicas.release_lease("scheduler", first)  # not the holder: nothing happens
        assert replicas.lease_holder("scheduler")[0] == other
        replicas.release_lease("scheduler", other)
        assert replicas.acquire_lease("scheduler", first, 30), "released: taken at once"
    finally:
        store.close()


def test_the_identity_is_unique_per_process_start() -> None:
    a, b = ReplicaIdentity.of_this_process("api"), ReplicaIdentity.of_this_process("api")
    assert a.id != b.id and a.id.startswith("api-") and len(a.id) <= 64
