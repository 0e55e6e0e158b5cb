"""Service replicas on one database: who is alive, which jobs no live replica runs, cancels across them, leases.

Each replica (one ``spillway serve`` process) has a row with a heartbeat. A replica whose
heartbeat is older than the timeout is taken for dead and its row deleted, by whichever
replica notices first; a RUNNING job whose replica has no row is an orphan, which any
replica settles (:meth:`cluster.manager.JobManager.recover_orphans`), each settle being a
conditional update that only one wins. A lease row names the one replica that may do a
singleton's work (the cron scheduler) until it expires.

Times are the replicas' own clocks (UTC): they must agree to well within the timeout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta

from typing import Any

from sqlalchemy import Column, DateTime, Integer, String, Table, delete, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from spillway.jobs.status import JobStatus
from spillway.service.store import Clock, _aware, jobs_table, metadata, utc_now

replicas_table = Table(
    "spillway_replicas",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("host", String(255), nullable=False),
    # The kernel's boot id: with the host name, tells whether a pid here is the replica's pid.
    Column("boot_id", String(64), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
)

leases_table = Table(
    "spillway_leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class ReplicaIdentity:
    """One replica: its id (unique per process start) and where it runs."""

    id: str
    host: str
    boot_id: str
    pid: int

    @classmethod
    def of_this_process(cls, name: str | None = None) -> ReplicaIdentity:
        """This process's identity; ``name`` (``SPILLWAY_REPLICA_NAME``) leads its id instead of the host name."""
        host = os.uname().nodename
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot_id = f.read().strip()
        except OSError:  # not Linux: the host name alone, so a pid here is never taken as proof of death
            boot_id = ""
        pid = os.getpid()
        return cls(id=f"{(name or host)[:40]}-{pid}-{os.urandom(3).hex()}", host=host[:255], boot_id=boot_id, pid=pid)


def _pid_gone(pid: int) -> bool:
    if pid == os.getpid():  # a predecessor in this pid namespace: this process is not it
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _insert_new(conn: Connection, table: Table, values: dict[str, Any]) -> bool:
    """INSERT that loses quietly to an existing row with the same primary key; whether it won."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    key = [column.name for column in table.primary_key]
    # RETURNING, not rowcount: with implicit RETURNING psycopg reports rowcount -1.
    statement = insert(table).values(**values).on_conflict_do_nothing(index_elements=key).returning(table.c[key[0]])
    return conn.execute(statement).first() is not None


class ReplicaStore:
    """Replica rows, orphaned jobs, cancel requests and leases; made by :attr:`service.store.JobStore.replicas`."""

    def __init__(self, engine: Engine, *, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.clock = clock

    def register(self, replica: ReplicaIdentity) -> None:
        """Add (or refresh) ``replica``'s row, heartbeat now."""
        now = self.clock()
        with self.engine.begin() as conn:
            values = {"id": replica.id, "host": replica.host, "boot_id": replica.boot_id, "pid": replica.pid,
                      "started_at": now, "heartbeat_at": now}
            if not _insert_new(conn, replicas_table, values):
                conn.execute(update(replicas_table).where(replicas_table.c.id == replica.id).values(heartbeat_at=now))

    def beat(self, replica_id: str) -> bool:
        """Refresh the heartbeat; False when the row is gone (another replica took this one for dead)."""
        with self.engine.begin() as conn:
            moved = conn.execute(update(replicas_table).where(replicas_table.c.id == replica_id).values(heartbeat_at=self.clock()))
        return moved.rowcount == 1

    def remove(self, replica_id: str) -> None:
        """Delete the row (a replica stopping cleanly, after its jobs were settled)."""
        with self.engine.begin() as conn:
            conn.execute(delete(replicas_table).where(replicas_table.c.id == replica_id))

    def expire(self, timeout_s: float) -> list[str]:
        """Delete the rows of replicas silent for ``timeout_s``; their ids."""
        cutoff = self.clock() - timedelta(seconds=timeout_s)
        with self.engine.begin() as conn:
            gone = conn.execute(delete(replicas_table).where(replicas_table.c.heartbeat_at < cutoff).returning(replicas_table.c.id))
            return sorted(gone.scalars())

    def expire_dead_here(self, replica: ReplicaIdentity) -> list[str]:
        """Delete the rows of other replicas on this host (same boot) whose process is gone; their ids.

        A replica restarted on the same host settles its predecessor's jobs at once, not after
        the heartbeat timeout.
        """
        if not replica.boot_id:
            return []
        rows = replicas_table.c
        with self.engine.connect() as conn:
            here = conn.execute(
                select(rows.id, rows.pid).where(rows.host == replica.host, rows.boot_id == replica.boot_id, rows.id != replica.id)
            ).all()
        dead = [replica_id for replica_id, pid in here if _pid_gone(pid)]
        if dead:
            with self.engine.begin() as conn:
                conn.execute(delete(replicas_table).where(rows.id.in_(dead)))
        return sorted(dead)

    def live(self) -> list[tuple[str, datetime]]:
        """Every replica with a row, and its last heartbeat."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(replicas_table.c.id, replicas_table.c.heartbeat_at).order_by(replicas_table.c.id)).all()
        return [(replica_id, _aware(beat) or beat) for replica_id, beat in rows]

    def running_orphans(self) -> list[str]:
        """RUNNING jobs that no live replica runs: their replica's row is gone (or they predate replicas)."""
        jobs = jobs_table.c
        query = select(jobs.id).where(
            jobs.state == JobStatus.RUNNING.value,
            or_(jobs.replica_id.is_(None), jobs.replica_id.not_in(select(replicas_table.c.id))),
        ).order_by(jobs.seq)
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def request_cancel(self, job_id: str, *, asked_on: str) -> bool:
        """Ask the live replica running ``job_id`` (another than ``asked_on``) to cancel it; whether one does."""
        jobs = jobs_table.c
        with self.engine.begin() as conn:
            moved = conn.execute(
                update(jobs_table)
                .where(jobs.id == job_id, jobs.state == JobStatus.RUNNING.value, jobs.replica_id != asked_on,
                       jobs.replica_id.in_(select(replicas_table.c.id)))
                .values(cancel_requested_at=self.clock())
            )
        return moved.rowcount == 1

    def cancel_requests(self, replica_id: str) -> list[str]:
        """The RUNNING jobs of ``replica_id`` that a cancel on another replica asked to stop."""
        jobs = jobs_table.c
        query = select(jobs.id).where(jobs.replica_id == replica_id, jobs.state == JobStatus.RUNNING.value, jobs.cancel_requested_at.is_not(None))
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take or renew lease ``name`` for ``ttl_s`` seconds; False while another holder's has not expired."""
        now = self.clock()
        until = now + timedelta(seconds=ttl_s)
        leases = leases_table.c
        with self.engine.begin() as conn:
            # Under PostgreSQL's row lock a second taker re-reads the row the first wrote, and loses.
            taken = conn.execute(
                update(leases_table)
                .where(leases.name == name, or_(leases.holder == holder, leases.expires_at < now))
                .values(holder=holder, expires_at=until)
            ).rowcount == 1
            return taken or _insert_new(conn, leases_table, {"name": name, "holder": holder, "expires_at": until})

    def release_lease(self, name: str, holder: str) -> None:
        """Give lease ``name`` up, if ``holder`` holds it: another replica takes it on its next try."""
        with self.engine.begin() as conn:
            conn.execute(delete(leases_table).where(leases_table.c.name == name, leases_table.c.holder == holder))

    def lease_holder(self, name: str) -> tuple[str, datetime] | None:
        """Who holds lease ``name`` and until when (it may have expired)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(leases_table.c.holder, leases_table.c.expires_at).where(leases_table.c.name == name)).first()
        return None if row is None else (row[0], _aware(row[1]) or row[1])
