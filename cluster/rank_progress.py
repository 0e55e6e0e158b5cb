"""Live progress of a job across the GPU workers: its ranks' trace counts, read through their nannies.

Each rank of cudf-polars' DaskEngine holds its worker's event loop for the whole query, so it
can send nothing; it counts cudf-polars' trace events and writes the counts to a file in its
worker's directory (jobs/gpu_trace_progress.py). The nanny beside each worker has a free event
loop and reads that file for the service every progress interval. The query ends with its
slowest rank, so the stages show each figure at its lowest over the ranks.

The same counts tell a stuck query from a slow one: a healthy query logs an event per chunk it
reads or computes, so ranks whose events have not moved for ``stall_s`` wait for each other
forever (a rank blocked, a collective that never completes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import polars as pl
from distributed import Client

from spillway.cluster.nannies import nanny_answers
from spillway.jobs.gpu_trace_progress import CHUNK_UNIT, NODE_UNIT, NodeCounts, plan_shape, rank_trace_counts, slowest_rank, stage_rows
from spillway.jobs.status import StageProgress

log = logging.getLogger(__name__)


class RankFollower:
    """Reads a multi-GPU job's ranks' counts every ``interval`` seconds and hands its stages to ``update``."""

    def __init__(
        self, client: Client, ranks: list[str], frame: pl.LazyFrame, stages: list[StageProgress], read_stages: set[str],
        interval: float, update: Callable[[list[StageProgress], float], None], *,
        stall_s: float = 0.0, stalled: Callable[[float], None] | None = None,
    ) -> None:
        self.client, self.ranks, self.interval, self.update = client, list(ranks), interval, update
        #: ``stalled(seconds)`` is called when the ranks' events have not moved for ``stall_s`` (and again after as long
        #: once more; 0: never).
        self.stall_s, self.stalled = stall_s, stalled
        self._moved_at, self._events = time.perf_counter(), -1
        self._warned = False
        self.shape = plan_shape(frame)
        self.planned = [(stage.name, 1 if stage.name in read_stages else None) for stage in stages]
        #: Readings in which every rank answered, and the last of them.
        self.readings = 0
        self.last: NodeCounts | None = None

    async def run(self, query: str) -> None:
        """Until cancelled (when the query ends), reading the counts the ranks publish for ``query`` (the job's id).

        A rank that has published nothing for it (traces off, or not started yet: the file may
        still hold the job before's counts) leaves the stages as they are, and no stall is counted.
        """
        started = time.perf_counter()
        self._moved_at, self._events = started, -1
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._read(query, started)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a nanny restarting, an odd file: read again next time (said once a job)
                log.log(logging.DEBUG if self._warned else logging.WARNING, "could not read the ranks' trace counts: %s: %s",
                        type(exc).__name__, exc)
                self._warned = True

    async def _read(self, query: str, started: float) -> None:
        answers = await nanny_answers(self.client, rank_trace_counts, self.ranks)
        readings = [counts for counts in answers.values() if counts is not None and counts.get("query") == query]
        if len(readings) < len(self.ranks):
            return
        self.last = slowest_rank(readings)
        self.readings += 1
        now = time.perf_counter()
        if self.last.events != self._events:
            self._moved_at, self._events = now, self.last.events
        elif self.stall_s > 0 and now - self._moved_at >= self.stall_s and self.stalled is not None:
            self.stalled(now - self._moved_at)
            self._moved_at = now  # told again after as long once more, should the job not have ended by then
        rows = stage_rows(self.planned, self.shape, self.last, finished=False)
        self.update([StageProgress(name=name, done=done, total=total, unit=unit) for name, done, total, unit in rows],
                    round(now - started, 3))

    def summary(self) -> str:
        """What the job's log says of its live progress."""
        if self.last is None:
            return "live progress: no trace counts read from the ranks (cudf-polars' traces off, or the query ended first)"
        of = f"{self.last.actors_done} of {self.last.plan_nodes}" if self.last.plan_nodes else f"{self.last.nodes}"
        chunks = f", {self.last.chunks_read} of {self.last.scan_chunks} {CHUNK_UNIT} read" if self.last.scan_chunks else ""
        return (f"live progress: the ranks' trace counts read {self.readings} time(s) through their nannies; the last: "
                f"{self.last.events} trace events over all ranks, {of} {NODE_UNIT} done{chunks} (the lowest over the ranks)")
