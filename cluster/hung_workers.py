"""Workers that stop answering while jobs run: found by their silent heartbeats, and restarted.

A worker stopped by SIGSTOP, or stuck in a driver call, keeps its connection open and sends
nothing. Dask removes such a worker only after ``distributed.scheduler.worker-ttl`` (5 minutes
by default, and only if the comm notices), and the task it holds never ends: a Polars job would
wait for its run timeout (a day by default). Restarting the worker through its nanny kills the
process; Dask then runs its tasks again on the workers left (a Polars task from an emptied
staging, :func:`cluster.polars_job.run_attempt`), as after any worker's death.

Workers send a heartbeat every 0.5-5 s from their event loop, which keeps running while tasks
compute in threads, so a worker silent for a minute is not busy: it is hung.

A multi-GPU job's ranks are silent by design (their query holds the event loop), so silence says
nothing of them. Their nannies still answer: :func:`stopped_workers` asks each nanny whether its
worker's process is stopped (SIGSTOP, a debugger), which no query ever is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distributed import Client

from spillway.cluster.nannies import NANNY_TIMEOUT_S, nanny_answers

#: /proc states of a process that will not run again until someone continues it.
STOPPED_STATES = frozenset({"T", "t"})


async def restart_silent_workers(client: Client, silent_s: float, *, spare: frozenset[str] = frozenset()) -> list[str]:
    """Restart every worker that has sent no heartbeat for ``silent_s`` seconds, but those in ``spare``; their addresses."""
    silent = [address for address in await client.run_on_scheduler(silent_workers, silent_s=silent_s) if address not in spare]
    if silent:
        await client.restart_workers(silent, raise_for_error=False)
    return silent


def silent_workers(dask_scheduler: Any, silent_s: float) -> list[str]:
    """The scheduler's workers whose last heartbeat is more than ``silent_s`` seconds old."""
    return sorted(address for address, silence in heartbeat_silences(dask_scheduler).items() if silence > silent_s)


def heartbeat_silences(dask_scheduler: Any) -> dict[str, float]:
    """Each of the scheduler's workers: seconds since its last heartbeat."""
    from distributed.metrics import time as scheduler_time  # the clock of last_seen

    now = scheduler_time()
    return {address: now - state.last_seen for address, state in dask_scheduler.workers.items()}


async def stopped_workers(client: Client, workers: list[str], timeout_s: float = NANNY_TIMEOUT_S) -> list[str]:
    """Those of ``workers`` whose process is stopped (SIGSTOP), asked of their nannies (whose event loops are free).

    A worker the scheduler no longer knows (restarting, gone) is left out; so is a nanny that does
    not answer within ``timeout_s`` (the check must never hang the watch that makes it).
    """
    states = await nanny_answers(client, worker_process_state, workers, timeout_s)
    return sorted(address for address, state in states.items() if state in STOPPED_STATES)


def worker_process_state(dask_worker: Any) -> tuple[str | None, str | None]:
    """On a nanny: its worker's address and the process's state letter in /proc (``R``, ``S``, ``T`` …; None: unknown)."""
    address, pid = dask_worker.worker_address, dask_worker.pid
    if pid is None:
        return address, None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone, or no /proc (not Linux)
        return address, None
    return address, stat[stat.rindex(")") + 2]  # after "pid (name) ": the name may hold spaces and parentheses
