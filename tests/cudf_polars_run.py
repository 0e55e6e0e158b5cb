"""Collect a LazyFrame on cudf-polars, or record why cudf-polars refuses it (GPU tests only)."""

from __future__ import annotations

import polars as pl

from spillway.jobs.gpu_support import gpu_refusal


def on_cudf_polars(query: pl.LazyFrame, name: str) -> pl.DataFrame | None:
    """``query`` collected by cudf-polars' in-memory executor (``raise_on_fail``: nothing falls back to the
    CPU), or None where its translation refuses the plan (such a job goes to dask-cudf under ``engine:
    auto``). Either way a line is printed, so a device run with ``-s`` records what cudf-polars takes."""
    refusal = gpu_refusal(query)
    if refusal is not None:
        print(f"{name}: refused by cudf-polars: {refusal}")
        assert refusal.strip()
        return None
    frame = query.collect(engine=pl.GPUEngine(executor="in-memory", raise_on_fail=True))
    print(f"{name}: runs on cudf-polars")
    return frame
