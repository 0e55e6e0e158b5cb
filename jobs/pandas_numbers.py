"""Number functions of the expression language for the Dask engine (pandas, dask, cuDF).

Each takes the call's argument values: a column (a Series-like) or, when the parser folds a
constant, a plain value. The semantics are :mod:`jobs.lower_polars`' (docs/spec.md, "Numbers"):
``floor``, ``ceil`` and ``sign`` keep an integer an integer; ``sqrt`` of a negative and ``ln``
of zero or a negative are null; ``greatest`` and ``least`` skip nulls, as PostgreSQL and DuckDB do.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from spillway.jobs.pandas_functions import _is_value


def floating(value: Any) -> bool:
    """Whether ``value`` is a float: a literal, or a column of numpy's, pandas' nullable or cuDF's floats."""
    return isinstance(value, (float, np.floating)) or getattr(getattr(value, "dtype", None), "kind", "") == "f"


def as_floats(value: Any) -> Any:
    """A column of integers as float64, a null as NaN (the engine's float null; pandas' nullable integers refuse a float
    in ``fillna`` and ``where``, and their ``/`` gives nullable floats whose 0 / 0 is null, not NaN); else ``value``."""
    if _is_value(value) or getattr(value.dtype, "kind", "") not in "iu":
        return value
    return value.astype("float64")


def supertype(*values: Any) -> tuple[Any, ...]:
    """``values`` in Polars' supertype of them: integer columns as float64 where a float is among them."""
    return tuple(map(as_floats, values)) if any(map(floating, values)) else values


def _integral(value: Any) -> bool:
    return pd.api.types.is_integer_dtype(getattr(value, "dtype", None)) or isinstance(value, (int, np.integer))


def _rounding(ufunc: Any, scalar: Callable[[float], float]) -> Callable[[Any], Any]:
    def impl(value: Any) -> Any:
        if _is_value(value):
            return None if pd.isna(value) else value if isinstance(value, (int, np.integer)) else float(scalar(value))
        return value if _integral(value) else ufunc(value)

    return impl


def _sign(value: Any) -> Any:
    if _is_value(value):
        return None if pd.isna(value) else type(value)(np.sign(value))
    return np.sign(value)


def _within(ufunc: Any, scalar: Callable[[float], float], lowest: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``ufunc`` over floats, null where ``lowest`` (the domain's test) is false."""

    def impl(value: Any) -> Any:
        if _is_value(value):
            return None if pd.isna(value) or not lowest(value) else scalar(float(value))
        floats = value.astype("float64")
        return ufunc(floats.where(lowest(floats)))

    return impl


def _exp(value: Any) -> Any:
    if _is_value(value):
        return None if pd.isna(value) else float(np.exp(float(value)))
    return np.exp(value.astype("float64"))


def _extreme(keeps_left: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """greatest / least: the values folded pairwise, a null giving way to the other side."""

    def pair(left: Any, right: Any) -> Any:
        left, right = supertype(left, right)
        if _is_value(left) and _is_value(right):
            if pd.isna(left):
                return None if pd.isna(right) else right
            return left if pd.isna(right) or keeps_left(left, right) else right
        if _is_value(left):  # the column first: the pick is symmetric
            left, right = right, left
        if _is_value(right) and pd.isna(right):
            return left
        keep = keeps_left(left, right).fillna(False).astype(bool)
        if not _is_value(right):
            keep = keep | right.isna()
        return left.where(keep, right)

    def impl(*values: Any) -> Any:
        result = values[0]
        for value in values[1:]:
            result = pair(result, value)
        return result

    return impl


def _safe_divide(left: Any, right: Any) -> Any:
    """``left / right``, null where ``right`` is zero (or null)."""
    left, right = as_floats(left), as_floats(right)
    if _is_value(right):
        if pd.isna(right) or right == 0 or (_is_value(left) and pd.isna(left)):
            return None if _is_value(left) else left * np.nan
        return left / right
    return left / right.where(right != 0)


#: In the error of ``divide`` by zero on either engine: the service names the expressions from it.
DIVISION_BY_ZERO = "spillway: division by zero"


def keeps(flags: Any, *reached: Any) -> Any:
    """``flags`` (the rows a check fails on) where every mask of ``reached`` (the rows that reach the check) holds too."""
    for mask in reached:
        flags = flags & mask
    return flags


def _nonzero(divisor: Any, *reached: Any) -> Any:
    """``divisor`` (a partition), or the error of ``divide`` when one of its values is zero in a row every mask of ``reached`` keeps."""
    if bool(keeps((divisor == 0).fillna(False), *reached).any()):
        raise ZeroDivisionError(f"{DIVISION_BY_ZERO}: divide(x, y) met a zero divisor; safe_divide(x, y) gives null there instead")
    return divisor


def _divide(left: Any, right: Any, *reached: Any) -> Any:
    """``left / right``; a zero divisor fails (as SQL's division does), when the partition holding it is computed.

    Only a zero in a row that every mask of ``reached`` keeps fails: the rows the parts of an ``and``
    to its left keep, or those that take its branch of an ``if`` (jobs/lower_pandas.py, _REACHED).
    """
    left, right = as_floats(left), as_floats(right)
    if _is_value(right):
        if not pd.isna(right) and right == 0:
            raise ZeroDivisionError(f"{DIVISION_BY_ZERO}: divide(x, y) met a zero divisor")
        return None if (_is_value(left) and pd.isna(left)) or pd.isna(right) else left / right
    if hasattr(right, "map_partitions"):
        checked = right.map_partitions(_nonzero, *reached, meta=right._meta, align_dataframes=False)
    else:
        checked = _nonzero(right, *reached)
    return left / checked


#: Function name → implementation; lower_pandas registers them beside its own.
NUMBER_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "floor": _rounding(np.floor, math.floor),
    "ceil": _rounding(np.ceil, math.ceil),
    "sign": _sign,
    "sqrt": _within(np.sqrt, math.sqrt, lambda x: x >= 0),
    "ln": _within(np.log, math.log, lambda x: x > 0),
    "exp": _exp,
    "safe_divide": _safe_divide,
    "divide": _divide,
    "greatest": _extreme(operator.ge),
    "least": _extreme(operator.le),
}
