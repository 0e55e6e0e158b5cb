"""cudf-polars' streaming executor on one GPU worker: a device limit it spills above, and what it spilled.

The single-GPU streaming executor runs on cudf-polars' process-wide ``DefaultSingletonEngine``
(rapidsmpf on a single-rank communicator), which reads its settings from ``RAPIDSMPF_*``
environment variables once, when it is first built in the worker process. The worker's device
limit is the same for every job it runs, so it is set there before the first streaming job;
a worker whose engine was already built with another limit keeps that one.

Spilling is rapidsmpf's own: dask-cuda's ``device_memory_limit`` and cuDF's spill manager do not
see its buffers, so the bytes it moved are read from its statistics after each query.
"""

from __future__ import annotations

import os
from typing import Any

import polars as pl

SPILL_LIMIT_ENV = "RAPIDSMPF_SPILL_DEVICE_LIMIT"
STATISTICS_ENV = "RAPIDSMPF_STATISTICS"


def streaming_gpu_engine(spill_device_limit: int) -> Any:
    """A Polars GPU engine on the streaming executor that spills above ``spill_device_limit`` bytes.

    ``raise_on_fail``: a query cudf-polars cannot run fails; it never runs on the CPU. No memory
    resource is passed: the engine takes the worker's current one (its RMM pool, if configured).
    """
    os.environ.setdefault(SPILL_LIMIT_ENV, str(spill_device_limit))
    os.environ.setdefault(STATISTICS_ENV, "true")
    return pl.GPUEngine(executor="streaming", raise_on_fail=True)


def take_spilled_bytes() -> int | None:
    """Bytes the streaming engine spilled device → host since the last call (None: statistics are off).

    Call it after a streaming query, whose engine then exists. Clears the engine's statistics,
    so each job reads its own.
    """
    from cudf_polars.engine.default_singleton_engine import DefaultSingletonEngine

    stats = DefaultSingletonEngine.get_or_create().global_statistics(clear=True)
    entries = stats.to_dict()
    # Seen on 26.10: after a query that recorded nothing, the merged statistics say "disabled"
    # with no entries; they were on all along if this worker asked for them before the engine existed.
    if not entries and not stats.enabled and os.environ.get(STATISTICS_ENV) != "true":
        return None
    return spilled_device_to_host(entries)


def spilled_device_to_host(stats: dict[str, dict[str, int | float]]) -> int:
    """The bytes rapidsmpf copied out of device memory: ``copy-device-to-pinned_host-bytes`` and ``copy-device-to-host-bytes``.

    Names as rapidsmpf 26.10 reports them (seen on an H200: a sort of 10 GiB under a 4 GB
    limit copied 10.08 GiB device → pinned host and back).
    """
    return int(sum(entry.get("value", 0) for name, entry in stats.items() if name.startswith("copy-device-to-") and name.endswith("-bytes")))
