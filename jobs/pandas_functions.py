"""Date and text functions of the expression language for the Dask engine (pandas, dask, cuDF).

Each takes the call's argument values in order: a column (a Series-like) or, when the parser
folds a constant, a plain value. Only Series methods the three share, and arithmetic with
``pd.Timedelta``, are used. Semantics (docs/spec.md, "Dates and times", "Strings") are those
of :mod:`jobs.lower_polars` too: SQL's, where SQL has one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from spillway.jobs.number_text import DECIMAL_TEXT, INTEGER_RANGES, INTEGER_TEXT

_DAY = pd.Timedelta(days=1)
_FLOORS = {"hour": "h", "minute": "min", "second": "s"}
_STEPS = {"week": pd.Timedelta(weeks=1), "day": _DAY, "hour": pd.Timedelta(hours=1), "minute": pd.Timedelta(minutes=1),
          "second": pd.Timedelta(seconds=1)}


def _is_value(value: Any) -> bool:
    """Whether ``value`` is one plain value (a folded constant), not a column."""
    return getattr(value, "ndim", 0) == 0


def _lift(fn: Callable[..., Any], position: int = 0) -> Callable[..., Any]:
    """``fn`` over Series, also taking a plain value (null: null) at ``position``."""

    def impl(*args: Any) -> Any:
        if not _is_value(args[position]):
            return fn(*args)
        if pd.isna(args[position]):
            return None
        column = [*args[:position], pd.Series([args[position]]), *args[position + 1 :]]
        result = fn(*column).iloc[0]
        return None if pd.isna(result) else result

    return impl


def _is_cudf(value: Any) -> bool:
    return type(getattr(value, "_meta", value)).__module__.split(".")[0] == "cudf"


def _on_host(value: Any) -> Any:
    """A cuDF column in host memory, its integers as pandas' nullable integers: plain ``to_pandas`` makes an
    integer column with a null float64, and ``cast(…, 'string')`` of it then gives ``'3.0'``."""
    return value.to_pandas(nullable=getattr(value, "dtype", np.dtype(object)).kind in "iu")


def on_host(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (written for pandas) also over cuDF columns: each cuDF partition through host memory.

    For what cuDF lacks or does differently (measured on the H200, bench/RESULTS.md): a Timedelta
    times an integer column, list columns in ``where``, ``collect`` of text. The dask-cudf engine
    mostly reaches these when cudf-polars refused the job; pandas columns go to ``fn`` as they are.
    """

    def on_partitions(*args: Any) -> Any:
        if not any(_is_cudf(arg) for arg in args):
            return fn(*args)
        import cudf

        return cudf.from_pandas(fn(*(_on_host(arg) if _is_cudf(arg) else arg for arg in args)))

    def impl(*args: Any) -> Any:
        if any(hasattr(arg, "map_partitions") and _is_cudf(arg) for arg in args):  # dask-cudf: each partition on its worker
            import dask.dataframe as dd

            meta = on_partitions(*(arg._meta if hasattr(arg, "_meta") else arg for arg in args))
            return dd.map_partitions(on_partitions, *args, meta=meta)
        return on_partitions(*args)

    return impl


def whole_numbers(values: Any) -> Any:
    """Whole numbers (a date's parts, a text's length or position, a date difference) as the language's integers,
    int64 with their nulls kept, as on Polars.

    pandas gives a date's parts as int32, and as float64 in a partition where a date is null (rounding past 2**53,
    ``12.0`` in text): on pandas they become the nullable ``Int64`` in every partition, as integer columns are read
    (jobs/dask_read.py); on cuDF ``int64``, whose columns hold nulls themselves.
    """
    meta = getattr(values, "_meta", values)
    return values.astype("Int64" if isinstance(meta, pd.Series) else "int64")


def _part(value: Any, name: str) -> Any:
    """A datetime part by its pandas name (``day_of_week``), or cuDF's older one (``dayofweek``)."""
    found = getattr(value.dt, name, None)
    return found if found is not None else getattr(value.dt, name.replace("_", ""))


def _trunc(unit: str, value: Any) -> Any:
    if unit in _FLOORS:
        return value.dt.floor(_FLOORS[unit])
    day = value.dt.floor("D")
    if unit == "day":
        return day
    if unit == "week":  # weeks start on Monday, as ISO's and Polars'
        return day - _part(value, "day_of_week") * _DAY
    if unit == "year":
        return day - (_part(value, "day_of_year") - 1) * _DAY
    month = day - (value.dt.day - 1) * _DAY
    if unit == "month":
        return month
    # A quarter: back 0, 1 or 2 months from the month's first day. 28 days back from a first
    # lands in the month before, 56 back two months before (months have 28 to 31 days).
    earlier = month - ((value.dt.month - 1) % 3) * (28 * _DAY)
    return earlier - (earlier.dt.day - 1) * _DAY


def _diff(unit: str, start: Any, end: Any) -> Any:
    """The number of ``unit`` boundaries from ``start`` to ``end`` (DuckDB's date_diff)."""
    if unit in ("year", "quarter", "month"):
        def index(value: Any) -> Any:
            if unit == "year":
                return value.dt.year
            return value.dt.year * 4 + value.dt.quarter if unit == "quarter" else value.dt.year * 12 + value.dt.month

        return whole_numbers(index(end) - index(start))
    return whole_numbers((_trunc(unit, end) - _trunc(unit, start)) // _STEPS[unit])


def _diff_values(unit: str, start: Any, end: Any) -> Any:
    if any(_is_value(v) and pd.isna(v) for v in (start, end)):
        return None
    if _is_value(start) and _is_value(end):
        return _diff(unit, pd.Series([start]), pd.Series([end])).iloc[0]
    # A literal against a column: as a column of that value, which has the .dt accessor.
    if _is_value(start):
        start = end.to_frame(name="start").assign(start=start)["start"]
    elif _is_value(end):
        end = start.to_frame(name="end").assign(end=end)["end"]
    return _diff(unit, start, end)


def _split_part(value: Any, delimiter: str, index: int) -> Any:
    part = value.str.split(re.escape(delimiter)).str.get(index - 1)  # pandas reads a delimiter longer than one character as a regex
    return part.fillna("").where(value.notnull())  # past the last part: '' (SQL), a null stays null


def _pad(side: str) -> Callable[..., Any]:
    def pad(value: Any, width: int, fill: str = " ") -> Any:
        return value.str.pad(width, side=side, fillchar=fill).str.slice(0, width)  # longer text is cut, as SQL's lpad

    return pad


def _concat(*values: Any) -> Any:
    """SQL's concat: the texts joined, a null counting as ''."""
    parts = ["" if _is_value(v) and pd.isna(v) else v if _is_value(v) else v.fillna("") for v in values]
    result = parts[0]
    for part in parts[1:]:
        result = result + part
    return result


#: Function name → implementation over the call's argument values.
_DTYPES: dict[str, Any] = {name: name for name in ("int64", "int32", "float64", "float32", "bool", "datetime64[ns]")}
_DTYPES["string"] = str


def cast_values(value: Any, name: str) -> Any:
    """``cast(value, name)`` over a column: pandas' ``astype``, with nulls kept null."""
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", "")
    if name == "string" and kind == "M" and not _is_cudf(value):
        return datetime_text(value)
    if name == "string":  # pandas 2 would turn nulls into the text "nan"; cuDF keeps them null
        text = value.astype(str) if _is_cudf(value) else value.astype(str).where(value.notnull())
        return text.str.lower() if kind == "b" else text  # bools as 'true' and 'false', as Polars and a CSV sink write them
    nullable_ints = isinstance(dtype, pd.api.extensions.ExtensionDtype) and kind in "iu"  # a date's part, an integer column
    if name in ("int64", "int32") and kind == "f":  # numpy's floats, or pandas' nullable ones (a mean of integers)
        # numpy ints hold no null: pandas' nullable ints do, so a null stays null (cuDF's ints are nullable already)
        return np.trunc(value).astype(name.capitalize())
    if name in ("int64", "int32") and (nullable_ints or (kind == "b" and isinstance(dtype, pd.BooleanDtype))):
        # pandas' nullable bools (a source's bool column) hold nulls, which astype("int64") refused: 1, 0, null, as on Polars
        return value.astype(name.capitalize())
    if name == "bool" and (kind == "f" or nullable_ints) and not _is_cudf(value):
        # a null stays null, as on Polars: astype(bool) made NaN true and refused pandas' NA
        return (value != 0).astype("boolean").where(value.notnull())
    if name == "datetime64[ns]" and kind == "M" and not _is_cudf(value):
        if isinstance(value, pd.Series):
            return _in_nanoseconds(value)
        return value.map_partitions(_in_nanoseconds, meta=value._meta.astype(_DTYPES[name]))  # each partition's own error
    return value.astype(_DTYPES[name])


def _in_nanoseconds(value: pd.Series) -> pd.Series:
    """A pandas date-time column in nanoseconds; a value they cannot hold (the sentinel 9999-12-31) fails the job with
    :data:`DATETIME_OUT_OF_RANGE` (the service names the expression), as on the Polars engine."""
    try:
        return value.astype("datetime64[ns]")
    except pd.errors.OutOfBoundsDatetime as exc:
        raise ValueError(f"{DATETIME_OUT_OF_RANGE}: {exc}") from None


#: In the error of a cast to ``datetime64[ns]`` of a date-time outside nanoseconds' range, on either engine.
DATETIME_OUT_OF_RANGE = "spillway: datetime out of range"

_FRACTION_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def datetime_text(value: pd.Series) -> pd.Series:
    """A pandas date-time column as the Polars engine writes it as text (docs/spec.md, "Casts"): every value with the
    fraction of its unit (``2024-01-01 00:00:00.000000`` for microseconds) and a zoned one with its offset
    (``+01:00``); pandas' ``astype(str)`` left out the time of a column of midnights and the fraction of whole seconds."""
    unit = value.dtype.unit if hasattr(value.dtype, "unit") else np.datetime_data(value.dtype)[0]
    digits = _FRACTION_DIGITS.get(unit, 9)
    text = value.dt.strftime("%Y-%m-%d %H:%M:%S")
    if digits:
        fraction = value.dt.strftime("%f").str.slice(0, min(digits, 6))
        if digits == 9:
            fraction = fraction + value.dt.nanosecond.fillna(0).astype("int64").astype(str).str.zfill(3)
        text = text + "." + fraction
    if getattr(value.dtype, "tz", None) is not None:
        offset = value.dt.strftime("%z")
        text = text + offset.str.slice(0, 3) + ":" + offset.str.slice(3, 5)
    return text.where(value.notnull())


def _try_cast(value: Any, name: str) -> Any:
    """``cast`` to a number, with a null where it would fail (docs/spec.md, "Casts"), as :mod:`jobs.lower_polars` does.

    Text must have the shape of INTEGER_TEXT or DECIMAL_TEXT; a float's integer part must lie in
    the integer type's range (the fraction is dropped, as cast drops it; NaN and infinities: null).
    """
    if _is_value(value):
        if pd.isna(value):
            return None
        result = _try_cast(pd.Series([value]), name).iloc[0]
        return None if pd.isna(result) else result
    dtype = value.dtype
    low, high = INTEGER_RANGES.get(name, (None, None))
    if pd.api.types.is_string_dtype(dtype) or dtype == object:
        pattern = INTEGER_TEXT if low is not None else DECIMAL_TEXT
        shaped = value.where(value.str.contains(pattern, regex=True).fillna(False).astype(bool), None)  # cuDF: null, not NaN
        if low is None:
            return shaped.astype(name)
        parsed = shaped.str.replace(r"^\+", "", regex=True).astype("Int64")  # at most 18 digits: every one fits int64
        return parsed.where((parsed >= low) & (parsed < high)).astype(name.capitalize())
    if low is not None and pd.api.types.is_float_dtype(dtype):
        whole = np.trunc(value)
        value = value.where((whole >= float(low)) & (whole < float(high)))  # NaN and infinities compare false: null; cuDF takes float bounds
    elif name == "int32" and pd.api.types.is_integer_dtype(dtype):
        return value.where((value >= low) & (value < high)).astype("Int32")
    return cast_values(value, name)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "try_cast": on_host(_try_cast),  # on cuDF, where + astype gave int64's minimum for the nulls (H200, 2026-12-02)
    "date_trunc": _lift(on_host(_trunc), 1),
    "date_diff": on_host(_diff_values),
    "strftime": _lift(lambda d, fmt: d.dt.strftime(fmt)),
    "day_of_week": _lift(lambda d: whole_numbers(_part(d, "day_of_week") + 1)),  # ISO: Monday 1 … Sunday 7
    "day_of_year": _lift(lambda d: whole_numbers(_part(d, "day_of_year"))),
    "quarter": _lift(lambda d: whole_numbers(d.dt.quarter)),
    "week": _lift(lambda d: whole_numbers(d.dt.isocalendar().week)),  # ISO week
    "split_part": _lift(on_host(_split_part)),
    "strpos": _lift(lambda s, text: whole_numbers(s.str.find(text) + 1)),  # 1-based; 0: not found
    "replace": _lift(lambda s, old, new: s.str.replace(old, new, regex=False)),
    "trim": _lift(lambda s: s.str.strip()),
    "ltrim": _lift(lambda s: s.str.lstrip()),
    "rtrim": _lift(lambda s: s.str.rstrip()),
    "lpad": _lift(_pad("left")),
    "rpad": _lift(_pad("right")),
    "concat": _concat,
}
