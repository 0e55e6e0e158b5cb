"""The window step on one pandas or cuDF frame that holds whole partitions.

The Dask engine shuffles rows on the partition keys, so every partition of the window
lies in one dask partition, and runs :func:`compute_window` on each (a groupby-apply, done
vectorised per dask partition, not per group). Only pandas-API methods that cuDF shares
are used. The rules are those of the Polars engine (:mod:`jobs.window_polars`): aggregates
skip nulls, a frame without a non-null value gives null (count: 0), a rank is the row
number of the first of its peers, nulls sort last.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from spillway.jobs.spec import PEER_WINDOW_FUNCS, VALUE_WINDOW_FUNCS

_ALL = "__spillway_all"
_TEMP = "__spillway_wtemp"


@dataclass(frozen=True)
class WindowOutput:
    """One output column, as plain values (it travels to the workers): its name, the
    function, the input column (None for ranks), and the function's options."""

    name: str
    func: str
    input: str | None = None
    offset: int = 1
    default: Any = None
    frame: str = "partition"
    preceding: int = 0
    buckets: int = 1
    following: int = 0


def _by_group(frame: Any, keys: list[str], series: Any, method: str) -> Any:
    """``series`` (aligned with ``frame``) through a grouped cumulative ``method`` per partition."""
    grouped = frame[keys].assign(**{_TEMP: series}).groupby(keys, dropna=False, sort=False)[_TEMP]
    return getattr(grouped, method)()


def _sizes(frame: Any, keys: list[str]) -> Any:
    """How many rows each row's group of ``keys`` holds (a sum of ones: cuDF shares that transform)."""
    return frame[keys].assign(**{_TEMP: 1}).groupby(keys, dropna=False, sort=False)[_TEMP].transform("sum").astype("int64")


def _ntile(position: Any, rows: Any, buckets: int) -> Any:
    """SQL's NTILE: ``buckets`` groups in order, sizes differing by at most one, the larger first (as jobs.window_polars)."""
    size, larger = rows // buckets, rows % buckets
    in_larger = larger * (size + 1)
    later = larger + (position - in_larger) // size.clip(lower=1) + 1
    return (position // (size + 1) + 1).where(position < in_larger, later)


def _running(frame: Any, keys: list[str], output: WindowOutput, value: Any, count: Any) -> Any:
    if output.func == "count":
        return count
    total = _by_group(frame, keys, value.fillna(0), "cumsum").where(count > 0)
    if output.func == "sum":
        return total
    if output.func == "mean":
        return total / count.where(count > 0)
    extreme = _by_group(frame, keys, value, "cummin" if output.func == "min" else "cummax")
    return _by_group(frame, keys, extreme, "ffill")  # a null row keeps the extreme so far


def _frame_value(frame: Any, keys: list[str], position: Any, output: WindowOutput) -> Any:
    """``first_value`` or ``last_value`` of the frame: the value of the row it starts or ends at, taken by
    position (``frame`` is sorted by partition and order, its index 0 … n-1; pandas' ``first`` skips nulls)."""
    value = frame[output.input]
    if output.func == "last_value" and output.frame != "partition" and not output.following:
        return value  # a running or rolling frame ends at this row
    row = position.index.to_series()
    start = row - position
    if output.func == "last_value":
        last = start + _sizes(frame, keys) - 1  # the partition's last row; a rolling frame ends `following` rows on, up to it
        at = last if output.frame == "partition" else (row + output.following).where(row + output.following <= last, last)
    elif output.frame == "rolling":
        at = row - position.clip(upper=output.preceding)
    else:
        at = start
    return value.take(at.astype("int64")).reset_index(drop=True)


def _around(frame: Any, keys: list[str], position: Any, output: WindowOutput) -> Any:
    """An aggregate over a rolling frame with ``following`` rows: over the frame up to this row and over the
    one from it on (the same rolling frame over the rows reversed, which keeps each partition's rows together), combined."""
    backwards = frame.iloc[::-1].reset_index(drop=True)
    position_back = backwards.groupby(keys, dropna=False, sort=False).cumcount()

    def before(func: str) -> Any:
        return _aggregate(frame, keys, position, replace(output, func=func, following=0))

    def after(func: str) -> Any:
        ahead = _aggregate(backwards, keys, position_back, replace(output, func=func, following=0, preceding=output.following))
        return ahead.iloc[::-1].reset_index(drop=True)

    value = frame[output.input]
    count = before("count") + after("count") - value.notnull().astype("int64")
    if output.func == "count":
        return count
    if output.func in ("min", "max"):
        low, high = before(output.func), after(output.func)
        first = (low <= high) if output.func == "min" else (low >= high)
        return low.where(first | high.isnull(), high)  # a null side gives the other
    total = (before("sum").fillna(0) + after("sum").fillna(0) - value.fillna(0)).where(count > 0)
    return total if output.func == "sum" else total / count.where(count > 0)


def _aggregate(frame: Any, keys: list[str], position: Any, output: WindowOutput) -> Any:
    if output.func in VALUE_WINDOW_FUNCS:
        return _frame_value(frame, keys, position, output)
    if output.following:
        return _around(frame, keys, position, output)
    value = frame[output.input]
    present = value.notnull().astype("int64")
    if output.frame == "partition":
        count = frame.groupby(keys, dropna=False, sort=False)[output.input].transform("count").astype("int64")
        if output.func == "count":
            return count
        return frame.groupby(keys, dropna=False, sort=False)[output.input].transform(output.func).where(count > 0)
    running = _running(frame, keys, output, value, _by_group(frame, keys, present, "cumsum"))
    if output.frame == "running":
        return running
    # Rows are sorted by partition, so a plain rolling window over the frame stays inside
    # the row's partition once the row has `preceding` rows before it there; before that,
    # the rolling frame is the running one.
    size = output.preceding + 1
    if output.func == "count":
        rolled = present.rolling(size, min_periods=1).sum().astype("int64")
    elif output.func == "mean":
        total = value.rolling(size, min_periods=1).sum()
        rolled = total / present.rolling(size, min_periods=1).sum()
    else:
        rolled = getattr(value.rolling(size, min_periods=1), output.func)()
    return rolled.where(position >= output.preceding, running)


def compute_window(part: Any, keys: list[str], order: list[tuple[str, bool]], outputs: list[WindowOutput], dtypes: dict[str, Any] | None = None) -> Any:
    """``part`` with the window columns of ``outputs`` added, over partitions of ``keys`` in
    ``order`` (column, descending); ``dtypes`` fixes the new columns' types, so that every
    dask partition agrees with the graph's metadata."""
    if not keys:
        part = part.assign(**{_ALL: 0})
    by = list(keys) or [_ALL]
    columns = [*by, *(column for column, _ in order)]
    ascending = [True] * len(by) + [not descending for _, descending in order]
    frame = part.sort_values(columns, ascending=ascending, na_position="last").reset_index(drop=True)
    grouped = frame.groupby(by, dropna=False, sort=False)
    position = grouped.cumcount()
    funcs = {output.func for output in outputs}
    peer = frame.groupby(columns, dropna=False, sort=False).cumcount() if funcs & PEER_WINDOW_FUNCS else None
    rows = _sizes(frame, by) if funcs & {"ntile", "percent_rank", "cume_dist"} else None
    results: dict[str, Any] = {}
    for output in outputs:
        if output.func == "row_number":
            results[output.name] = position + 1
        elif output.func == "rank":
            results[output.name] = position - peer + 1
        elif output.func == "dense_rank":
            results[output.name] = _by_group(frame, by, (peer == 0).astype("int64"), "cumsum")
        elif output.func == "percent_rank":
            results[output.name] = ((position - peer) / (rows - 1).clip(lower=1)).astype("float64")  # 0 in a one-row partition
        elif output.func == "cume_dist":
            results[output.name] = (position - peer + _sizes(frame, columns)) / rows
        elif output.func == "ntile":
            results[output.name] = _ntile(position, rows, output.buckets)
        elif output.func in ("lag", "lead"):
            shift = output.offset if output.func == "lag" else -output.offset
            shifted = grouped[output.input]
            if isinstance(output.default, float) and frame[output.input].dtype.kind in "iu":
                # A float default beside integers gives floats, Polars' supertype (pandas' nullable ints refused the fill).
                shifted = frame[by].assign(**{_TEMP: frame[output.input].astype("float64")}).groupby(by, dropna=False, sort=False)[_TEMP]
            results[output.name] = shifted.shift(shift) if output.default is None else shifted.shift(shift, fill_value=output.default)
        else:
            results[output.name] = _aggregate(frame, by, position, output)
    for output in outputs:  # a rolling sum, min or max of integers is computed in floats: integers again, as on Polars
        if output.frame == "rolling" and output.func in ("sum", "min", "max") and getattr(frame[output.input].dtype, "kind", "?") in "iu":
            results[output.name] = results[output.name].astype("Int64")
    if dtypes:
        results = {name: value.astype(dtypes[name]) for name, value in results.items()}
    out = frame.assign(**results)
    return out.drop(columns=[_ALL]) if not keys else out
