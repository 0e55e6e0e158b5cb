"""A stopped job's log, and when a cancel answers.

A cancel restarts the worker running a Polars query. The job's log then asked every worker for its
lines, the restarting one too, which could hold the request for its 10 s timeout; the cancel waited
for the log, so it answered after ~10 s (1 of 3 cancels in bench/control_plane.py, 2026-12-05). Now
the cancel answers once the CANCELLED state is recorded, and the log skips the restarted workers.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from distributed import Client, LocalCluster

from spillway.cluster.manager import JobManager, _ActiveJob
from spillway.jobs.status import JobStatus


def test_a_stopped_jobs_log_asks_only_the_workers_not_restarted_to_stop_it() -> None:
    async def scenario() -> None:
        async with LocalCluster(n_workers=2, processes=False, asynchronous=True, dashboard_address=None) as cluster, \
                Client(cluster, asynchronous=True) as client:
            manager = JobManager(None, cluster=SimpleNamespace(client=client))  # type: ignore[arg-type]
            workers = sorted(cluster.scheduler.workers)
            active = _ActiveJob("job", writer=None)  # type: ignore[arg-type]
            cancelled = SimpleNamespace(state=JobStatus.CANCELLED)
            assert await manager._log_workers(active, cancelled) is None  # nothing restarted: every worker  # type: ignore[arg-type]
            active.restarted = {workers[0]}
            assert await manager._log_workers(active, cancelled) == workers[1:]  # type: ignore[arg-type]
            active.restarted = set(workers)
            assert await manager._log_workers(active, cancelled) == []  # none asked  # type: ignore[arg-type]

    asyncio.run(scenario())

