"""Row positions in Polars plans, in forms both Polars and cudf-polars run and order alike.

cudf-polars 26.10 has no ``int_range`` (every ordered window, a per-group top_k and a join with a
``where`` left the GPU for it: bench/results/gpu_tests_2026-12-02d.log). It runs a ``cum_sum``
inside ``over`` and ``with_row_index`` on a frame, so a running count of a column of ones is a
row's position within its partition. Without ``order_by``, though, cudf-polars' grouped scan
does not keep the frame's order among rows of one group (on the H200 the peers of a rank over a
descending key came out in another order than the partition's rows: a wrong rank), so every
order-sensitive window runs ``over(keys, order_by=`` the frame's row index ``)``. On the CPU a
position alone costs about what ``int_range`` did (2 M rows in 100,000 partitions: 0.35 s
against 0.33 s; ``rank("ordinal")`` over the row index took 2.4 s); a whole window step 20-40 %
more (bench/RESULTS.md, "Ordered windows on cudf-polars"), for one lowering on both engines.

Nor does cudf-polars run ``reverse`` inside ``over``: a window over a partition's rows from its
last to its first (:func:`in_reverse_order`) is ordered by the row index descending instead, which
its grouped window sorts each partition by before putting every result back on its row.
"""

from __future__ import annotations

import polars as pl

#: The helper columns :func:`with_counters` adds (ones to count, the row index to order by); the caller drops them.
ONE, ROW = "__spillway_one", "__spillway_row"
COUNTERS = [ONE, ROW]


def with_counters(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame``, in its order, with the :data:`COUNTERS` that :func:`position` and :func:`in_order` read."""
    return frame.with_row_index(ROW).with_columns(pl.lit(1, dtype=pl.Int64).alias(ONE))


def in_order(expr: pl.Expr, keys: list[str]) -> pl.Expr:
    """``expr`` within each partition of ``keys``, over the rows in the frame's order (the whole frame without keys)."""
    return expr.over(keys, order_by=ROW) if keys else expr


def in_reverse_order(expr: pl.Expr, keys: list[str]) -> pl.Expr:
    """``expr`` within each partition of ``keys`` over the rows from the frame's last to its first (the whole
    frame without keys); each result is given back on its own row, so it combines with :func:`in_order`'s."""
    # Without keys the partition is ONE, the same for every row: it is `over`'s order_by that reverses the rows.
    return expr.over(keys or [ONE], order_by=ROW, descending=True)


def position() -> pl.Expr:
    """A row's position from 0 (under :func:`in_order`: within its partition), on a frame :func:`with_counters` made."""
    return pl.col(ONE).cum_sum() - 1


def with_row_numbers(frame: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """``frame`` with its rows numbered from 0 in ``name`` (Int64)."""
    return frame.with_row_index(name).with_columns(pl.col(name).cast(pl.Int64))
