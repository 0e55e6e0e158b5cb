"""Samples device memory and cuDF spill totals on every GPU worker while a job runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from spillway.jobs.status import JobResources

METHOD = (
    "sampled with client.run on every worker each progress interval: device memory in use from NVML "
    "(includes any RMM pool reservation and other jobs running at the same time), and the growth of "
    "cuDF's spill statistics (device → host bytes) between the first and last sample. A job across the GPU "
    "workers holds their event loops: its GPUs are read by the workers' nannies, NVML only (its spilling is "
    "rapidsmpf's, in streaming_spilled_bytes)"
)


class GpuSampler:
    """Collects :func:`cluster.gpu_stats.worker_gpu_stats` readings until stopped."""

    def __init__(self, read: Callable[[], Awaitable[dict[str, dict[str, Any]]]], interval: float) -> None:
        self.read = read
        self.interval = interval
        self.samples: list[dict[str, dict[str, Any]]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            reading = await self.read()
            if reading:
                self.samples.append(reading)
            await asyncio.sleep(self.interval)

    async def stop(self) -> JobResources:
        """Stop sampling, take one last reading and summarise."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        last = await self.read()
        if last:
            self.samples.append(last)
        return summarise(self.samples)


def summarise(samples: list[dict[str, dict[str, Any]]]) -> JobResources:
    """Peak device memory (per worker and summed per sample) and spill growth."""
    per_worker: dict[str, int] = {}
    peak_total: int | None = None
    for sample in samples:
        used = {w: s["memory_used"] for w, s in sample.items() if s.get("memory_used") is not None}
        for worker, value in used.items():
            per_worker[worker] = max(per_worker.get(worker, 0), value)
        if used:
            peak_total = max(peak_total or 0, sum(used.values()))
    spilled: int | None = None
    if samples:
        first, last = samples[0], samples[-1]
        deltas = [
            last[w]["spilled_to_host_bytes"] - first[w]["spilled_to_host_bytes"]
            for w in last
            if w in first and last[w].get("spilled_to_host_bytes") is not None and first[w].get("spilled_to_host_bytes") is not None
        ]
        spilled = sum(deltas) if deltas else None
    return JobResources(
        peak_device_memory_bytes=peak_total,
        peak_device_memory_per_worker=per_worker,
        spilled_to_host_bytes=spilled,
        samples=len(samples),
        method=METHOD,
    )
