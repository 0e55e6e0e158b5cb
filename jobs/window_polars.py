"""The window step on Polars: each output column one expression evaluated ``over`` the partition.

The frame is sorted by ``order_by`` first (nulls last, as the sort step), so within each
partition ``over`` sees the rows in that order. The rules are SQL's, and the Dask engine's
(:mod:`jobs.window_pandas`): aggregates skip nulls, a frame without a non-null value gives
null (count: 0), a rank is the row number of the first of its peers.
"""

from __future__ import annotations

import polars as pl

from spillway.jobs.polars_rows import COUNTERS, in_order, in_reverse_order, position, with_counters
from spillway.jobs.spec import PEER_WINDOW_FUNCS, VALUE_WINDOW_FUNCS, WindowColumn, WindowStep

_PEER = "__spillway_peer"
_HALF = "__spillway_half"  # helper columns of frames with `following` rows: _HALF_<output>_<sum or count>_<side>
_ANY_PARTITION = 2**31 - 1  # rows: as many as a cuDF column can hold


def _ntile(buckets: int) -> pl.Expr:
    """SQL's NTILE within one partition: ``buckets`` groups in order, sizes differing by at most one, the larger first."""
    at, rows = position(), pl.len().cast(pl.Int64)
    size, larger = rows // buckets, rows % buckets  # `larger` groups hold size + 1 rows
    in_larger = larger * (size + 1)
    later = larger + (at - in_larger) // pl.max_horizontal(size, pl.lit(1, pl.Int64)) + 1
    return pl.when(at < in_larger).then(at // (size + 1) + 1).otherwise(later)


def _frame_value(column: WindowColumn, value: pl.Expr) -> pl.Expr:
    """``first_value`` or ``last_value`` of ``column``'s frame, within one partition: a row's value, null or not.

    (Where a ``last_value`` frame ends at its row, :func:`window_columns` takes the row's value outside any window.)"""
    frame, ahead = column.frame or "partition", column.following or 0
    if column.func == "last_value":
        if frame == "partition":
            return value.last()
        # A rolling frame ends `following` rows on, or at the partition's last row before that.
        return pl.when(position() + ahead < pl.len()).then(value.shift(-ahead)).otherwise(value.last())
    if frame == "rolling":  # this row and `preceding` before it: the partition's first until there are that many
        back = column.preceding or 0
        return pl.when(position() >= back).then(value.shift(back)).otherwise(value.first())
    return value.first()


def _rolling(func: str, value: pl.Expr, size: int, *, center: bool = False, dtype: pl.DataType | None = None) -> pl.Expr:
    """``func`` over the ``size`` rows up to each row (``center``: centred on it), within one partition (``dtype``: the
    value's type, where known)."""
    if func == "count":
        return value.is_not_null().cast(pl.Int64).rolling_sum(size, min_samples=1, center=center)
    rolled: pl.Expr = getattr(value, f"rolling_{func}")(size, min_samples=1, center=center)  # min_samples: non-null values
    if func in ("min", "max") and dtype is not None and dtype.is_float():
        # A frame holding a NaN gives NaN, as Polars' rolling extremes do. cudf-polars 26.10 skips NaN there, and a
        # frame of NaN alone gave the extreme's identity (inf) on the H200: a wrong answer, so it is said outright.
        holds_nan = value.is_nan().cast(pl.Int64).rolling_sum(size, min_samples=1, center=center) > 0
        return pl.when(holds_nan).then(pl.lit(float("nan"), dtype=dtype)).otherwise(rolled)
    return rolled


def _around(column: WindowColumn, value: pl.Expr, keys: list[str], name: str,
            dtype: pl.DataType | None = None) -> tuple[pl.Expr, dict[str, pl.Expr]]:
    """An aggregate over a rolling frame with ``following`` rows, for each row; and the helper columns it reads, by name.

    From this row on, the frame is a rolling one over the rows in reverse order; with as many rows on each side,
    a centred one. Otherwise it is the frame up to this row and the one from it on, combined (this row counts
    once), each half a window of its own: cudf-polars runs no ``reverse`` inside ``over``."""
    func, back, ahead = column.func, column.preceding or 0, column.following or 0
    if back == 0:
        return in_reverse_order(_rolling(func, value, ahead + 1, dtype=dtype), keys), {}
    if back == ahead:
        return in_order(_rolling(func, value, 2 * back + 1, center=True, dtype=dtype), keys), {}

    def before(part: str) -> pl.Expr:
        return in_order(_rolling(part, value, back + 1, dtype=dtype), keys)

    def after(part: str) -> pl.Expr:
        return in_reverse_order(_rolling(part, value, ahead + 1, dtype=dtype), keys)

    present = value.is_not_null().cast(pl.Int64)
    if func in ("min", "max"):
        halves = before(func), after(func)
        extreme = (pl.min_horizontal if func == "min" else pl.max_horizontal)(*halves)
        if dtype is not None and dtype.is_float():  # a half that holds a NaN is NaN (_rolling), which `*_horizontal` skips
            return pl.when(halves[0].is_nan() | halves[1].is_nan()).then(pl.lit(float("nan"), dtype=dtype)).otherwise(extreme), {}
        return extreme, {}
    if func == "count":
        return before("count") + after("count") - present, {}
    # The halves of a sum are read twice, so they are helper columns (Polars computes a window again where an
    # expression repeats it), and a mean's counts too (the pass that combines them is then windowless and cheaper).
    parts = ("sum", "count") if func == "mean" else ("sum",)
    sides = (("before", before), ("after", after))
    helpers = {f"{_HALF}_{name}_{part}_{side}": half(part) for part in parts for side, half in sides}

    def both(part: str) -> tuple[pl.Expr, pl.Expr]:
        return pl.col(f"{_HALF}_{name}_{part}_before"), pl.col(f"{_HALF}_{name}_{part}_after")

    # A half's sum is null where it has no value; the frame has one where either half has.
    sum_before, sum_after = both("sum")
    total = pl.when(sum_before.is_not_null() | sum_after.is_not_null()).then(
        sum_before.fill_null(0) + sum_after.fill_null(0) - value.fill_null(0))
    if func == "sum":
        return total, helpers
    count_before, count_after = both("count")
    return total / (count_before + count_after - present), helpers


def _running_extreme(func: str, value: pl.Expr, dtype: pl.DataType | None) -> pl.Expr:
    """A running ``min`` or ``max`` within one partition; a null row keeps the extreme so far.

    It is a rolling frame as long as any partition can be, which cudf-polars runs inside ``over``. The
    forms with a fill over nulls it either refuses there (the fill, then the extreme) or ran wrong (the
    extreme, then the fill: over the whole frame, not the partition, a wrong minimum on the H200). Polars
    has no rolling decimal form, so a decimal fills first, on the CPU (cudf-polars refuses it: dask-cudf).
    Where a NaN is in the frame the rolling form gives NaN, as a ``rolling`` frame does."""
    if isinstance(dtype, pl.Decimal):
        filled = value.forward_fill()
        return filled.cum_min() if func == "min" else filled.cum_max()
    return _rolling(func, value, _ANY_PARTITION, dtype=dtype)


def _aggregate(column: WindowColumn, value: pl.Expr, dtype: pl.DataType | None = None) -> pl.Expr:
    """The aggregate of ``column`` over its frame, within one partition (``dtype``: the value's type, where known)."""
    func, frame = column.func, column.frame or "partition"
    if func in VALUE_WINDOW_FUNCS:
        return _frame_value(column, value)
    present = value.is_not_null().cast(pl.Int64)
    if frame == "partition":
        count = present.sum()  # int64 throughout: cudf-polars sums a partition's partial count() in uint32 (jobs/polars_frame.py)
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
        return _running_extreme(func, value, dtype)
    return _rolling(func, value, (column.preceding or 0) + 1, dtype=dtype)


def _extreme_type(frame: pl.LazyFrame, column: WindowColumn, value: pl.Expr) -> pl.DataType | None:
    """The type of a running or rolling ``min`` or ``max``'s ``value`` on ``frame`` (its schema only: no data is
    read), which decides its form (decimals, floats); None for the other columns."""
    if column.func not in ("min", "max") or column.frame not in ("running", "rolling"):
        return None
    return frame.select(value).collect_schema().dtypes()[0]


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
    helpers: dict[str, pl.Expr] = {}
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
        elif column.func == "last_value" and column.frame in ("running", "rolling") and not column.following:
            result = inputs[name]  # the frame ends at this row: its value (cudf-polars takes no bare column inside `over`)
        elif column.following and column.func not in VALUE_WINDOW_FUNCS:
            result, halves = _around(column, inputs[name], keys, name, _extreme_type(frame, column, inputs[name]))
            helpers.update(halves)
        else:
            result = in_order(_aggregate(column, inputs[name], _extreme_type(frame, column, inputs[name])), keys)
        outputs.append(result.alias(name))
    if helpers:  # before the outputs that read them
        frame = frame.with_columns(half.alias(helper) for helper, half in helpers.items())
    frame = frame.with_columns(outputs)
    return frame.drop(*COUNTERS, *([_PEER] if funcs & PEER_WINDOW_FUNCS else []), *helpers)
