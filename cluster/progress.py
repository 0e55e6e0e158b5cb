"""Per-job progress from scheduler transitions, grouped by the spec's stages.

In the spirit of ``distributed.diagnostics.progress.MultiProgress``: the plugin knows
its job's keys from the start (the graph is registered before it is submitted) and the
stages each key does work for (cluster/stages.py: ``read source``, ``steps[1] groupby``),
counts keys reaching memory, takes them back if they are lost and recomputed, and
publishes counts per stage and overall on a scheduler event topic. It removes itself
when the job ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from dask.typing import Key
from distributed.diagnostics.plugin import SchedulerPlugin

from spillway.jobs.status import PROGRESS_TOPIC

_RECOMPUTE_STATES = frozenset({"released", "waiting", "processing", "queued", "no-worker"})


def plugin_name(job_id: str) -> str:
    """The scheduler-plugin name of a job's progress plugin."""
    return f"spillway-progress-{job_id}"


class JobProgressPlugin(SchedulerPlugin):
    """Counts one job's finished tasks per stage and publishes them as events.

    Parameters
    ----------
    job_id
        The job these keys belong to; events carry it.
    stage_of_key
        Every key of the job's graph mapped to the stages it does work for: a fused task
        counts for each of them, and once overall.
    result_keys
        The keys whose completion, failure or release ends the job.
    stages
        The stages in the order to show them; by default, as they first appear in ``stage_of_key``.
    interval
        Seconds between published updates while counts change.
    """

    idempotent = False

    def __init__(
        self, job_id: str, stage_of_key: dict[Key, tuple[str, ...]], result_keys: list[Key], stages: list[str] | None = None,
        interval: float = 0.25,
    ) -> None:
        self.job_id = job_id
        self.name = plugin_name(job_id)
        self.stage_of_key = stage_of_key
        self.result_keys = set(result_keys)
        self.interval = interval
        self.totals = Counter(stage for key_stages in stage_of_key.values() for stage in key_stages)
        listed = stages or list(dict.fromkeys(stage for key_stages in stage_of_key.values() for stage in key_stages))
        self.stages = [stage for stage in listed if self.totals[stage]]
        self.done: set[Key] = set()
        self.done_per_stage: Counter[str] = Counter()
        self.tasks_per_worker: Counter[str] = Counter()
        self.erred: Key | None = None
        self.ended = False
        self._dirty = True
        self._scheduler: Any = None
        self._loop_task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._started = time.monotonic()

    async def start(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self._wake = asyncio.Event()
        self._started = time.monotonic()
        # Tasks another job already computed (same keys) count as done now.
        for key in self.stage_of_key:
            ts = scheduler.tasks.get(key)
            if ts is not None and ts.state == "memory":
                self._count(key)
        self._loop_task = asyncio.create_task(self._publish_loop())

    def transition(self, key: Key, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if key not in self.stage_of_key:
            return
        if finish == "memory":
            self._count(key)
            if kwargs.get("worker"):
                self.tasks_per_worker[kwargs["worker"]] += 1
        elif start == "memory" and finish in _RECOMPUTE_STATES and key in self.result_keys:
            # A result released by its client: the job is over (cancelled or collected).
            self.ended = True
        elif finish in ("waiting", "processing", "queued", "no-worker"):
            self._uncount(key)  # lost with a worker, recomputed
        elif finish == "erred":
            self.erred = key
            self.ended = True
        elif finish == "forgotten" and key in self.result_keys:
            self.ended = True
        if key in self.result_keys and self.result_keys <= self.done:
            self.ended = True
        self._dirty = True
        if self.ended and self._wake is not None:
            self._wake.set()  # the final counts go out now: the service commits on them

    def _count(self, key: Key) -> None:
        if key not in self.done:
            self.done.add(key)
            self.done_per_stage.update(self.stage_of_key[key])

    def _uncount(self, key: Key) -> None:
        if key in self.done:
            self.done.remove(key)
            self.done_per_stage.subtract(self.stage_of_key[key])

    def snapshot(self) -> dict[str, Any]:
        """Counts per stage in the spec's order, and distinct tasks overall, as published on the topic."""
        done = self.done_per_stage
        return {
            "job_id": self.job_id,
            "time": time.time(),
            "stages": [[stage, done[stage], self.totals[stage]] for stage in self.stages],
            "tasks": [len(self.done), len(self.stage_of_key)],
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "workers": dict(self.tasks_per_worker),
            "ended": self.ended,
        }

    async def _publish_loop(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except TimeoutError:
                pass
            if self._dirty:
                self._dirty = False
                self._scheduler.log_event(PROGRESS_TOPIC, self.snapshot())
            if self.ended:
                self._scheduler.plugins.pop(self.name, None)
                return

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
