"""How a Polars job runs on one GPU worker: in memory when its working set fits, streaming with spilling when not.

cudf-polars has two single-GPU executors (../shared/gpu/README.md §7, measured on one H200):

* ``in-memory`` materialises every input and intermediate on the device. Fastest while they
  fit (TPC-H SF 100: 27.2 s), and out-of-memory when they do not.
* ``streaming`` splits the scans into partitions and streams them through the query on
  rapidsmpf, which spills to host memory above its ``spill_device_limit``. Slower where the
  data fits (SF 100: ~120 s untuned), but bounded by the limit.

A job that does not fit one worker, on a cluster of several GPU workers, runs across all of them
(``multi-gpu``: cudf-polars' DaskEngine, jobs/gpu_multi.py), when its sink allows it.

So the choice is made per job, before it starts, from its working set as the parquet footers
give it (the uncompressed bytes of the column chunks the optimized query reads) against the
worker's device memory limit (the cluster's ``device_memory_limit``). In-memory needs room
for intermediates beside the inputs (a join's build side, a sort's copy), hence the headroom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spillway.jobs.read_progress import SourceRead
from spillway.jobs.spec import JobSpec
from spillway.jobs.storage import is_url

#: In-memory runs when the working set is at most this share of the device limit.
IN_MEMORY_SHARE = 0.5
#: dask-cuda's own default device_memory_limit ("auto"): this share of the device.
AUTO_DEVICE_SHARE = 0.8

GpuExecutor = Literal["in-memory", "streaming", "multi-gpu"]
#: ``cluster.gpu_multi_worker``: when a job runs across every GPU worker.
MultiWorkerMode = Literal["auto", "off", "always"]


@dataclass(frozen=True)
class GpuPlacement:
    """The executor a GPU job runs with, and the figures it was chosen from."""

    executor: GpuExecutor
    working_set_bytes: int
    device_limit_bytes: int | None
    reason: str

    @property
    def spill_device_limit(self) -> int | None:
        """Bytes of device memory the streaming executor may hold before it spills to host."""
        return self.device_limit_bytes if self.executor in ("streaming", "multi-gpu") else None


def device_limit_bytes(setting: int | float | None, device_total: int | None) -> int | None:
    """The worker's device limit in bytes: ``setting`` (bytes, a fraction, or None for auto) against the device's size."""
    if isinstance(setting, int):
        return setting
    if device_total is None:
        return None
    share = setting if isinstance(setting, float) else AUTO_DEVICE_SHARE
    return int(device_total * share)


def place_on_gpu(spec: JobSpec, reads: list[SourceRead], limit: int | None) -> GpuPlacement:
    """In-memory when the job's working set is at most ``IN_MEMORY_SHARE`` of ``limit``; else streaming.

    ``reads`` are the job's local sources (:func:`jobs.read_progress.source_reads`). A source
    in an object store has no size known up front, so a job that reads one streams.
    """
    working_set = sum(read.in_memory_bytes for read in reads)
    unread_sources = sum(1 for _, source in spec.source_fields() if is_url(source.path))
    if limit is None:
        return GpuPlacement("in-memory", working_set, None, "in-memory: the device's size is unknown, so there is no limit to keep")
    if unread_sources:
        return GpuPlacement(
            "streaming", working_set, limit,
            f"streaming with spilling above {_gib(limit)}: {unread_sources} source(s) of unknown size (object stores)",
        )
    if working_set <= IN_MEMORY_SHARE * limit:
        return GpuPlacement(
            "in-memory", working_set, limit,
            f"in-memory: working set {_gib(working_set)} is within {IN_MEMORY_SHARE:.0%} of the device limit {_gib(limit)}",
        )
    return GpuPlacement(
        "streaming", working_set, limit,
        f"streaming with spilling above {_gib(limit)}: working set {_gib(working_set)} is over {IN_MEMORY_SHARE:.0%} of the device limit",
    )


def across_gpus(placement: GpuPlacement, spec: JobSpec, mode: MultiWorkerMode, gpu_workers: int) -> GpuPlacement:
    """``placement``, or the job across all ``gpu_workers`` where ``mode`` asks for it and the spec allows it.

    ``auto``: a job placed on streaming (it does not fit one worker in memory) runs across the
    workers when there are two or more. ``always``: every job that can (tests and benchmarks of
    this path on one GPU shared by several workers). ``off``: never.
    """
    from spillway.jobs.gpu_multi import why_not_across_gpus

    wanted = mode == "always" or (mode == "auto" and placement.executor == "streaming" and gpu_workers >= 2)
    if not wanted or gpu_workers < 1:
        return placement
    why_not = why_not_across_gpus(spec)
    if why_not is not None:
        return placement if mode == "auto" else GpuPlacement(
            placement.executor, placement.working_set_bytes, placement.device_limit_bytes,
            f"{placement.reason} (not across the GPU workers: {why_not})",
        )
    fit = "" if mode == "always" else f", as its working set {_gib(placement.working_set_bytes)} does not fit one worker"
    limit = f", spilling above {_gib(placement.device_limit_bytes)} each" if placement.device_limit_bytes else ""
    return GpuPlacement(
        "multi-gpu", placement.working_set_bytes, placement.device_limit_bytes,
        f"across {gpu_workers} GPU worker(s) with cudf-polars' DaskEngine{fit}{limit} (cluster.gpu_multi_worker={mode})",
    )


def _gib(count: int) -> str:
    return f"{count / 2**30:.1f} GiB"
