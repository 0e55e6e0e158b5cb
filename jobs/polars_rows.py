"""Row positions in Polars plans, in forms both Polars and cudf-polars run.

cudf-polars 26.10 has no ``int_range`` (every ordered window, a per-group top_k and a join with a
``where`` left the GPU for it: bench/results/gpu_tests_2026-12-02d.log). It runs a
``cum_sum`` inside ``over`` and ``with_row_index`` on a frame. A running count of a column of
ones is a row's position within its partition; on the CPU it costs what ``int_range`` did
(2 M rows in 100,000 partitions: 0.282 s against 0.288 s, where ``rank("ordinal")`` over a row
index took 2.0 s).
"""

from __future__ import annotations

import polars as pl

#: The helper column of ones a plan counts rows with; :func:`with_ones` adds it, the caller drops it.
ONE = "__spillway_one"


def with_ones(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame`` with the :data:`ONE` column that :func:`position` counts."""
    return frame.with_columns(pl.lit(1, dtype=pl.Int64).alias(ONE))


def position() -> pl.Expr:
    """A row's position from 0 (inside ``over``: within its partition), on a frame :func:`with_ones` made."""
    return pl.col(ONE).cum_sum() - 1


def with_row_numbers(frame: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """``frame`` with its rows numbered from 0 in ``name`` (Int64)."""
    return frame.with_row_index(name).with_columns(pl.col(name).cast(pl.Int64))
