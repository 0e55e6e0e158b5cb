"""The window step on Polars: each output column one expression evaluated ``over`` the partition.

The frame is sorted by ``order_by`` first (nulls last, as the sort step), so within each
partition ``over`` sees the rows in that order. The rules are SQL's, and the Dask engine's
(:mod:`jobs.window_pandas`): aggregates skip nulls, a frame without a non-null value gives
null (count: 0), a rank is the row number of the first of its peers.
"""

from __future__ import annotations

import polars as pl

from spillway.jobs.polars_rows import COUNTERS, in_order, position, with_counters
from spillway.jobs.spec import PEER_WINDOW_FUNCS, VALUE_WINDOW_FUNCS, WindowColumn, WindowStep

_PEER = "__spillway_peer"


def _ntile(buckets: int) -> pl.Expr:
    """SQL's NTILE within one partition: ``buckets`` groups in order, sizes differing by at most one, the larger first."""
    at, rows = position(), pl.len().cast(pl.Int64)
    size, larger = rows // buckets, rows % buckets  # `larger` groups hold size + 1 rows
    in_larger = larger * (size + 1)
    later = larger + (at - in_larger) // pl.max_horizontal(size, pl.lit(1, pl.Int64)) + 1
    return pl.when(at < in_larger).then(at // (size + 1) + 1).otherwise(later)


def _frame_value(column: WindowColumn, value: pl.Expr) -> pl.Expr:
    """``first_value`` or ``last_value`` of ``column``'s frame, within one partition: a row's value, null or not."""
    frame, ahead = column.frame or "partition", column.following or 0
    if column.func == "last_value":
        if frame == "partition":
            return value.last()
        # A running or rolling frame ends at this row, or `following` rows on (the partition's last before that).
        return pl.when(position() + ahead < pl.len()).then(value.shift(-ahead)).otherwise(value.last()) if ahead else value
    if frame == "rolling":  # this row and `preceding` before it: the partition's first until there are that many
        back = column.preceding or 0
        return pl.when(position() >= back).then(value.shift(back)).otherwise(value.first())
    return value.first()


def _around(column: WindowColumn, value: pl.Expr) -> pl.Expr:
    """An aggregate over a rolling frame with ``following`` rows, within one partition: over the frame up to
    this row and over the one from it on (a rolling frame over the reversed rows), combined; this row counts once."""

    def before(func: str) -> pl.Expr:
        return _aggregate(column.model_copy(update={"following": None, "func": func}), value)

    def after(func: str) -> pl.Expr:
        ahead = column.model_copy(update={"following": None, "preceding": column.following, "func": func})
        return _aggregate(ahead, value.reverse()).reverse()

    count = before("count") + after("count") - value.is_not_null().cast(pl.Int64)
    if column.func == "count":
        return count
    if column.func in ("min", "max"):
        return (pl.min_horizontal if column.func == "min" else pl.max_horizontal)(before(column.func), after(column.func))
    total = pl.when(count > 0).then(before("sum").fill_null(0) + after("sum").fill_null(0) - value.fill_null(0))
    return total if column.func == "sum" else total / count


def _aggregate(column: WindowColumn, value: pl.Expr) -> pl.Expr:
    """The aggregate of ``column`` over its frame, within one partition."""
    func, frame = column.func, column.frame or "partition"
    if func in VALUE_WINDOW_FUNCS:
        return _frame_value(column, value)
    if column.following:
        return _around(column, value)
    present = value.is_not_null().cast(pl.Int64)
    if frame == "partition":
        count = value.count().cast(pl.Int64)
        if func == "count":
            return count
        return pl.when(count > 0).then(getattr(value, func)())
    if frame == "running":
        count = present.cum_sum()
        if func == "count":
            return count
        total = pl.when(count > 0).then(value.fill_null(0).cum_sum())
        if func == "sum":
            return total
        if func == "mean":
            return total / count
        return (value.cum_min() if func == "min" else value.cum_max()).forward_fill()  # a null row keeps the extreme so far
    size = (column.preceding or 0) + 1
    if func == "count":
        return present.rolling_sum(size, min_samples=1)
    rolled: pl.Expr = getattr(value, f"rolling_{func}")(size, min_samples=1)  # min_samples counts non-null values
    return rolled


def window_columns(frame: pl.LazyFrame, step: WindowStep, inputs: dict[str, pl.Expr]) -> pl.LazyFrame:
    """``frame`` with ``step``'s columns added; ``inputs`` gives each column's input expression by output name."""
    keys = list(step.partition_by)
    order = [key.column for key in step.order_by]
    if order:
        frame = frame.sort(order, descending=[key.descending for key in step.order_by], nulls_last=True)
    frame = with_counters(frame)
    funcs = {column.func for column in step.columns.values()}
    if funcs & PEER_WINDOW_FUNCS:  # a separate pass: Polars does not nest one window in another
        frame = frame.with_columns(in_order(position(), [*keys, *order]).alias(_PEER))
    row_number = in_order(position(), keys) + 1
    rows = in_order(pl.len(), keys).cast(pl.Int64)
    outputs: list[pl.Expr] = []
    for name, column in step.columns.items():
        if column.func == "row_number":
            result = row_number
        elif column.func == "rank":
            result = row_number - pl.col(_PEER)
        elif column.func == "dense_rank":
            result = in_order((pl.col(_PEER) == 0).cast(pl.Int64).cum_sum(), keys)
        elif column.func == "percent_rank":  # (rank - 1) / (rows - 1); 0 in a partition of one row
            result = pl.when(rows > 1).then((row_number - pl.col(_PEER) - 1) / (rows - 1)).otherwise(pl.lit(0.0))
        elif column.func == "cume_dist":  # the share of rows before this one or its peers, with them
            result = (row_number - pl.col(_PEER) + pl.len().over([*keys, *order]) - 1) / rows
        elif column.func == "ntile":
            result = in_order(_ntile(column.buckets or 1), keys)
        elif column.func in ("lag", "lead"):
            offset = (column.offset or 1) * (1 if column.func == "lag" else -1)
            fill = None if column.default is None else pl.lit(column.default)
            result = in_order(inputs[name].shift(offset, fill_value=fill), keys)
        else:
            result = in_order(_aggregate(column, inputs[name]), keys)
        outputs.append(result.alias(name))
    frame = frame.with_columns(outputs)
    return frame.drop(*COUNTERS, *([_PEER] if funcs & PEER_WINDOW_FUNCS else []))
