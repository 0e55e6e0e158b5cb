"""Expression IR → a Polars expression (the Polars engine's lowering, CPU and GPU alike).

Follows the language's rules (docs/spec.md, "Nulls") exactly as the Dask engine does, where
Polars' own defaults differ: a comparison with a null is false (Polars: null), so a
comparison, ``in`` or predicate result is filled with false; ``not`` of it then stays
two-valued; ``//`` and ``%`` truncate toward zero, as SQL's (Polars floors). Everything else
(arithmetic with a null gives null, half-to-even rounding) is what Polars does already.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import timedelta
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import polars as pl

from spillway.jobs import ir
from spillway.jobs.date_bounds import MIRRORED, date_bound
from spillway.jobs.decimal_cast import decimal_type
from spillway.jobs.errors import ExpressionError
from spillway.jobs.like_patterns import like_form
from spillway.jobs.nan_order import IEEE_COMPARE, greatest_with_nan, total_order_compare
from spillway.jobs.number_text import DECIMAL_TEXT, INTEGER_RANGES, INTEGER_TEXT
from spillway.jobs.pandas_functions import DATETIME_OUT_OF_RANGE
from spillway.jobs.pandas_numbers import DIVISION_BY_ZERO
from spillway.jobs.polars_partitions import slice_expr
from spillway.jobs.regex_functions import REGEX_FUNCTIONS, regex_expr
from spillway.jobs.time_functions import TIME_FUNCTIONS, time_expr
from spillway.jobs.kinds import kind_of_node

_CASTS: dict[str, Any] = {
    "int64": pl.Int64, "int32": pl.Int32, "float64": pl.Float64, "float32": pl.Float32, "bool": pl.Boolean,
    "datetime64[ns]": pl.Datetime("ns"), "string": pl.String,
}
def _cast_type(name: str) -> Any:
    """The Polars type of a cast type name: one of _CASTS, or ``decimal(p, s)`` (jobs.decimal_cast)."""
    exact = decimal_type(name)
    return pl.Decimal(*exact) if exact is not None else _CASTS[name]


def _try_cast(x: pl.Expr, name: str, *, text: bool) -> pl.Expr:
    """``cast``, with a null where it would fail: text that is not a number of the type, a value out of range, NaN.

    Polars' non-strict cast already gives null for what it cannot convert; text is first held to
    the shapes of jobs/expr.py (INTEGER_TEXT, DECIMAL_TEXT), which the Dask engine reads alike.
    """
    converted = x.cast(_CASTS[name], strict=False)
    if text:
        shaped = pl.when(x.str.contains(INTEGER_TEXT if name in INTEGER_RANGES else DECIMAL_TEXT))
        if name != "int32":
            return shaped.then(converted)
        x = shaped.then(x.cast(pl.Int64, strict=False))  # up to 18 digits: int64 holds it, and int32's range is checked below
        converted = x.cast(pl.Int32, strict=False)
    if name not in INTEGER_RANGES:
        return converted
    # The range is checked here, not left to the cast: cudf-polars' cast saturates (1.2e19 → int64's largest; H200 run).
    # A float's fraction is dropped (-2147483648.5 fits int32); an int64 near its largest value is below 2**63
    # though its float is not, so it also passes where the cast kept it as it was.
    low, high = INTEGER_RANGES[name]
    above_low = x >= float(low) if name == "int64" else x > low - 1
    below_high = (x < float(high)) | (converted == x)
    return pl.when(above_low & below_high).then(converted)


def _truncated_divide(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """SQL's ``//``: truncated toward zero (Polars floors); by zero, null."""
    floored = a // b
    return pl.when(b == 0).then(None).when((floored < 0) & (floored * b != a)).then(floored + 1).otherwise(floored)


def _truncated_remainder(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """SQL's ``%``: the dividend's sign (Polars takes the divisor's); by zero, null."""
    floored = a % b
    return pl.when(b == 0).then(None).when((floored != 0) & ((floored < 0) != (a < 0))).then(floored - b).otherwise(floored)


_BINARY: dict[str, Callable[[pl.Expr, pl.Expr], pl.Expr]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "//": _truncated_divide, "%": _truncated_remainder, "**": lambda a, b: a.pow(b),
}
#: Functions that give integers (int64): their arithmetic is checked for overflow as a column's is.
INTEGER_CALLS = frozenset({"length", "year", "month", "day", "day_of_week", "day_of_year", "quarter", "week", "strpos"})
#: Functions whose result is a float where an argument is one (so a NaN can come through or out of them).
_NUMBER_OF_ITS_ARGUMENTS = frozenset({"abs", "floor", "ceil", "sign", "round", "sqrt", "exp", "ln", "greatest", "least",
                                      "coalesce", "fillna", "safe_divide", "divide"})
_FALSE = pl.lit(False)
_TRUNCATE = {"year": "1y", "quarter": "1q", "month": "1mo", "week": "1w", "day": "1d", "hour": "1h", "minute": "1m", "second": "1s"}
_TOTALS = {"week": "total_days", "day": "total_days", "hour": "total_hours", "minute": "total_minutes", "second": "total_seconds"}
_DATETIME_CAST = "datetime64[ns]"


def _fails_where(condition: pl.Expr, sentinel: str) -> pl.Expr:
    """0 where ``condition`` is false; where it holds, the query fails with ``sentinel`` in its error.

    A strict cast of the sentinel text to an integer, done only on the rows that hold it: the
    service finds the sentinel in the error and names the expressions (cluster/manager.py).
    Polars' error quotes the failing text; cudf-polars' names only the cast's types, so each
    sentinel casts to a type of its own (:data:`SENTINEL_TYPES`).
    """
    reached = _REACHED.get()
    if reached is not None:  # inside an ``and``: only the rows its parts to the left keep
        condition = condition & reached
    return pl.when(condition).then(pl.lit(sentinel)).cast(SENTINEL_TYPES[sentinel], strict=True).cast(pl.Int64).fill_null(0)


#: The rows a check (:func:`_fails_where`) may fail on while an ``and``'s part is lowered: those the parts to its left
#: keep (docs/spec.md: "in a filter those the and-ed parts to its left keep"), as the Dask engine reads them. Polars
#: evaluates every part over every row; that a plain column's guard held came from its pushdown into the scan.
_REACHED: ContextVar[pl.Expr | None] = ContextVar("spillway_reached_rows", default=None)


def _false_if_null(expr: pl.Expr) -> pl.Expr:
    return expr.fill_null(_FALSE)


def _like(s: pl.Expr, pattern: str) -> pl.Expr:
    """``s LIKE pattern`` as its cheapest form (jobs/like_patterns.py); null for a null ``s``."""
    kind, text = like_form(pattern)
    if kind == "regex":
        return s.str.contains(text)
    if kind == "equals":
        return s == text
    if kind == "contains":
        return s.str.contains(text, literal=True)
    return s.str.starts_with(text) if kind == "startswith" else s.str.ends_with(text)


def _date_diff(unit: str, start: pl.Expr, end: pl.Expr) -> pl.Expr:
    """The number of ``unit`` boundaries from ``start`` to ``end`` (DuckDB's date_diff)."""
    if unit in ("year", "quarter", "month"):
        def index(value: pl.Expr) -> pl.Expr:
            year = value.dt.year().cast(pl.Int64)
            if unit == "year":
                return year
            return year * 4 + value.dt.quarter() if unit == "quarter" else year * 12 + value.dt.month()

        return index(end) - index(start)
    span = end.dt.truncate(_TRUNCATE[unit]) - start.dt.truncate(_TRUNCATE[unit])
    count: pl.Expr = getattr(span.dt, _TOTALS[unit])()
    return count // 7 if unit == "week" else count


def _strpos(text: pl.Expr, needle: str) -> pl.Expr:
    # Characters before the first match: Polars' str.find counts bytes, SQL's strpos characters.
    before = text.str.splitn(needle, 2).struct.field("field_0").str.len_chars().cast(pl.Int64)
    return pl.when(text.is_null()).then(None).when(text.str.contains(needle, literal=True)).then(before + 1).otherwise(0)


_CALLS: dict[str, Callable[..., pl.Expr]] = {
    "isnull": lambda x: x.is_null(),
    "notnull": lambda x: x.is_not_null(),
    "fillna": lambda x, v: x.fill_null(v),
    "abs": lambda x: x.abs(),
    # Integers stay integers through floor, ceil and sign (sqrt and ln: PolarsLowering.call).
    "floor": lambda x: x.floor(),
    "ceil": lambda x: x.ceil(),
    "sign": lambda x: x.sign(),
    "exp": lambda x: x.cast(pl.Float64).exp(),
    "safe_divide": lambda x, y: pl.when(y != 0).then(x / y),  # / by zero: null, where / gives an infinity
    "divide": lambda x, y: x / y + _fails_where(y == 0, DIVISION_BY_ZERO),
    "greatest": lambda *xs: pl.max_horizontal(*xs),  # nulls skipped, as PostgreSQL and DuckDB do
    "least": lambda *xs: pl.min_horizontal(*xs),
    "lower": lambda s: s.str.to_lowercase(),
    "upper": lambda s: s.str.to_uppercase(),
    # Polars gives these as UInt32, Int8, Int16 or Int32, in which arithmetic wraps (month(d) * 100 was -80): int64, as the language's integers.
    "length": lambda s: s.str.len_chars().cast(pl.Int64),
    "year": lambda d: d.dt.year().cast(pl.Int64),
    "month": lambda d: d.dt.month().cast(pl.Int64),
    "day": lambda d: d.dt.day().cast(pl.Int64),
    "between": lambda x, low, high: _false_if_null(x.is_between(low, high, closed="both")),
    "day_of_week": lambda d: d.dt.weekday().cast(pl.Int64),  # ISO: Monday 1 … Sunday 7
    "day_of_year": lambda d: d.dt.ordinal_day().cast(pl.Int64),
    "quarter": lambda d: d.dt.quarter().cast(pl.Int64),
    "week": lambda d: d.dt.week().cast(pl.Int64),
    "trim": lambda s: s.str.strip_chars(),
    "ltrim": lambda s: s.str.strip_chars_start(),
    "rtrim": lambda s: s.str.strip_chars_end(),
    "concat": lambda *parts: pl.concat_str([part.cast(pl.String) for part in parts], ignore_nulls=True),
}
#: Functions whose arguments after the first are literals, passed as Python values.
_LITERAL_CALLS: dict[str, Callable[..., pl.Expr]] = {
    "round": lambda x, digits=0: x.round(digits),
    "cast": lambda x, name: x.cast(_cast_type(name)),
    "contains": lambda s, text: _false_if_null(s.str.contains(text, literal=True)),
    "like": lambda s, pattern: _false_if_null(_like(s, pattern)),
    "startswith": lambda s, text: _false_if_null(s.str.starts_with(text)),
    "endswith": lambda s, text: _false_if_null(s.str.ends_with(text)),
    "substr": lambda s, start, length=None: s.str.slice(start, length),
    "strftime": lambda d, fmt: d.dt.to_string(fmt),
    "split_part": lambda s, delimiter, index: pl.when(s.is_not_null()).then(
        s.str.split(delimiter).list.get(index - 1, null_on_oob=True).fill_null("")),
    "strpos": _strpos,
    "replace": lambda s, old, new: s.str.replace_all(old, new, literal=True),
    "lpad": lambda s, width, fill=" ": s.str.pad_start(width, fill).str.slice(0, width),
    "rpad": lambda s, width, fill=" ": s.str.pad_end(width, fill).str.slice(0, width),
    **{name: partial(regex_expr, name) for name in REGEX_FUNCTIONS},
    **{name: partial(time_expr, name) for name in TIME_FUNCTIONS},
}


def _is_float(value: Any) -> bool:
    return isinstance(value, (float, np.floating))


def _literal(value: Any) -> pl.Expr:
    if isinstance(value, pd.Timestamp):
        return pl.lit(value.to_pydatetime(), dtype=pl.Datetime("us"))
    if isinstance(value, timedelta):  # pd.Timedelta is one
        return pl.lit(pd.Timedelta(value).to_pytimedelta())
    return pl.lit(value)


def _months(offset: pd.DateOffset) -> int:
    return int(offset.kwds.get("months", 0)) + 12 * int(offset.kwds.get("years", 0))


class PolarsLowering:
    """Builds the Polars expression for an IR tree; ``text`` and ``field`` word errors."""

    def __init__(
        self, text: str, field: str | None, schema: Mapping[str, str] | None = None, dtypes: Mapping[str, Any] | None = None,
        columns: Mapping[str, pl.Expr] | None = None, stored_dates: frozenset[str] = frozenset(),
    ) -> None:
        self.text = text
        self.field = field
        self.schema = schema or {}
        self.dtypes = dtypes or {}
        self.columns = columns or {}
        self.stored_dates = stored_dates  # columns whose ``columns`` entry casts a stored date to a datetime

    def integer(self, node: ir.Node) -> bool:
        """Whether ``node`` yields integers that int64 holds (signed ones, unsigned up to 32 bits), from the frame's column
        types (unknown ones: no): their arithmetic is int64's, checked for overflow, as on the Dask engine."""
        if isinstance(node, ir.Col):
            dtype = self.dtypes.get(node.name)
            return dtype is not None and dtype.is_integer() and (dtype.is_signed_integer() or dtype in (pl.UInt8, pl.UInt16, pl.UInt32))
        if isinstance(node, ir.Lit):
            return isinstance(node.value, int) and not isinstance(node.value, bool)
        if isinstance(node, ir.Unary):
            return self.integer(node.operand)
        if isinstance(node, ir.Binary):
            return node.op in ("+", "-", "*", "//", "%") and self.integer(node.left) and self.integer(node.right)
        if isinstance(node, ir.Call) and node.name in ("cast", "try_cast") and isinstance(node.args[1], ir.Lit):
            return node.args[1].value in ("int64", "int32")
        return isinstance(node, ir.Call) and node.name in INTEGER_CALLS

    def error(self, node: ir.Node, message: str) -> ExpressionError:
        return ExpressionError(f"'{self.text[node.start:node.end]}' at col {node.start}: {message}", field=self.field)

    def kind(self, node: ir.Node) -> str:
        return kind_of_node(node, self.text, self.schema)

    def condition(self, node: ir.Node) -> pl.Expr:
        """``node`` as plain booleans, null counting as false (conditions never come out null)."""
        expr = self.lower(node)
        return expr if ir.is_condition(node) else _false_if_null(expr)

    def lower(self, node: ir.Node) -> pl.Expr:
        if isinstance(node, ir.Lit):
            if isinstance(node.value, pd.DateOffset):
                raise self.error(node, "an interval of months or years can only be added to or subtracted from a datetime")
            return _literal(node.value)
        if isinstance(node, ir.Col):
            return self.columns.get(node.name, pl.col(node.name))
        if isinstance(node, ir.Unary):
            operand = self.lower(node.operand)
            if node.op == "-" and self.integer(node.operand):
                wide = operand.cast(pl.Int64)
                return -wide + _fails_where(wide == _INT64_MIN, INT64_OVERFLOW)  # -MIN is the one negation outside int64
            return -operand if node.op == "-" else operand
        if isinstance(node, ir.Not):
            return ~self.condition(node.operand)
        if isinstance(node, ir.Binary):
            return self.binary(node)
        if isinstance(node, ir.Compare):
            on_dates = self.on_stored_date(node.left, node.op, node.right)
            if on_dates is not None:
                return _false_if_null(on_dates)
            return _false_if_null(self.compare(node.op, node.left, node.right))
        if isinstance(node, ir.InList):
            operand = self.lower(node.operand)
            found = _false_if_null(operand.is_in([option.value for option in node.options]))
            return _false_if_null(~found & operand.is_not_null()) if node.negated else found
        if isinstance(node, ir.Logical):
            if node.op == "or":
                return pl.any_horizontal([self.condition(part) for part in node.parts])
            return pl.all_horizontal(self.guarded_parts(node.parts))
        if isinstance(node, ir.IfElse):
            if isinstance(node.cond, ir.Lit):  # a literal condition picks its branch now, as the Dask engine does
                return self.lower(node.then) if node.cond.value else self.lower(node.other)
            taken = self.condition(node.cond)
            rows = taken.fill_null(False)
            return pl.when(taken).then(self.reaching(rows, node.then)).otherwise(self.reaching(~rows, node.other))
        if isinstance(node, ir.Call):
            return self.call(node)
        raise TypeError(f"unknown IR node {type(node).__name__}")  # pragma: no cover - the IR is closed

    def reaching(self, rows: pl.Expr | None, node: ir.Node, *, condition: bool = False) -> pl.Expr:
        """``node`` lowered with its checks limited to ``rows`` (and the rows already reached): a branch of an ``if``
        or a ``case`` sees the rows that take it, as on the Dask engine. Polars' CPU engine evaluates a branch of
        when/then over its own rows anyway, but only as an optimisation, which cudf-polars need not share."""
        if rows is None:
            return self.condition(node) if condition else self.lower(node)
        outer = _REACHED.get()
        token = _REACHED.set(rows if outer is None else outer & rows)
        try:
            return self.condition(node) if condition else self.lower(node)
        finally:
            _REACHED.reset(token)

    def guarded_parts(self, parts: tuple[ir.Node, ...] | list[ir.Node]) -> list[pl.Expr]:
        """The parts of an ``and``, each lowered with its checks limited to the rows the parts before it keep."""
        outer = _REACHED.get()
        lowered: list[pl.Expr] = []
        for part in parts:
            kept = [outer, *lowered] if outer is not None else lowered
            token = _REACHED.set(pl.all_horizontal(kept) if kept else None)
            try:
                lowered.append(self.condition(part))
            finally:
                _REACHED.reset(token)
        return lowered

    def binary(self, node: ir.Binary) -> pl.Expr:
        left, right = node.left, node.right
        if node.op == "+" and isinstance(left, ir.Lit) and isinstance(left.value, (pd.DateOffset, timedelta)):
            left, right = right, left  # interval + datetime is datetime + interval
        if node.op in ("+", "-") and isinstance(right, ir.Lit) and isinstance(right.value, pd.DateOffset):
            months = _months(right.value) * (1 if node.op == "+" else -1)
            return self.lower(left).dt.offset_by(f"{months}mo")
        if node.op in ("+", "-", "*") and self.integer(left) and self.integer(right):
            # A result outside int64 fails the query (jobs.errors.IntegerOverflow, from the manager) instead of wrapping around.
            return _checked_int64(node.op, self.lower(left).cast(pl.Int64), self.lower(right).cast(pl.Int64))
        if node.op == "**" and ir.negative_integer(right):
            # An integer to a negative power is a float (2 ** -1 is 0.5); Polars takes an integer's exponent as unsigned.
            return self.lower(left).cast(pl.Float64).pow(self.lower(right))
        if node.op == "**" and self.integer(left) and self.integer(right):
            return _checked_power(self.lower(left), self.lower(right))
        return _BINARY[node.op](self.lower(left), self.lower(right))

    def compare(self, op: str, left: ir.Node, right: ir.Node) -> pl.Expr:
        """``left op right`` under NaN's total order, whichever engine runs it (jobs.nan_order)."""
        return total_order_compare(op, self.in_zone_of(left, right), self.in_zone_of(right, left),
                                   a_may_be_nan=self.may_be_nan(left), b_may_be_nan=self.may_be_nan(right))

    def in_zone_of(self, node: ir.Node, other: ir.Node) -> pl.Expr:
        """``node`` lowered; a datetime literal compared with a column that has a time zone (a zoned parquet
        timestamp) as that UTC instant in the column's zone, as jobs.lower_pandas reads it: Polars refuses to
        compare a zoned datetime with a naive one. The zone comes from the frame's types (:func:`orders_numbers`
        asks for them)."""
        dtype = self.dtypes.get(other.name) if isinstance(other, ir.Col) else None
        if isinstance(node, ir.Lit) and type(node.value) is int and node.value < 0 and dtype is not None and dtype.is_unsigned_integer():
            # As an untyped literal, Polars cast the unsigned column to the literal's type: a uint64 above int64's
            # range became null and the row was dropped, where the Dask engine kept it (it is above any negative).
            return pl.lit(node.value, dtype=pl.Int64)
        zone = dtype.time_zone if isinstance(dtype, pl.Datetime) else None
        if zone is None or not isinstance(node, ir.Lit) or not isinstance(node.value, pd.Timestamp) or node.value.tz is not None:
            return self.lower(node)
        return pl.lit(node.value.to_pydatetime(), dtype=pl.Datetime("us", "UTC")).dt.convert_time_zone(zone)

    def may_be_nan(self, node: ir.Node) -> bool:
        """Whether ``node`` can yield a NaN: a float column or a NaN literal, float arithmetic (an overflow to an
        infinity and then ``inf - inf`` or ``0 * inf`` is NaN; ``0 / 0`` of integers too), and casts, choices and calls
        that pass one on. From the frame's column types; a column of unknown type counts as one that cannot (Polars'
        CPU engine orders NaN as the language does anyway, and only cudf-polars needs the terms).
        """
        if isinstance(node, ir.Col):
            dtype = self.dtypes.get(node.name)
            return dtype is not None and dtype.is_float()
        if isinstance(node, ir.Lit):
            return _is_float(node.value) and node.value != node.value
        if isinstance(node, ir.Binary):
            return node.op == "/" or self.floating(node)
        if isinstance(node, ir.Unary):
            return self.may_be_nan(node.operand)
        if isinstance(node, ir.IfElse):
            return self.may_be_nan(node.then) or self.may_be_nan(node.other)
        if isinstance(node, ir.Call) and node.name in ("cast", "try_cast"):  # text 'NaN' casts to a NaN float
            target = node.args[1].value if isinstance(node.args[1], ir.Lit) else None
            return target in ("float64", "float32") and (self.may_be_nan(node.args[0]) or self.kind(node.args[0]) == "string")
        if isinstance(node, ir.Call) and node.name == "case":  # its conditions are booleans: only its values count
            return any(self.may_be_nan(value) for value in (*node.args[1:-1:2], node.args[-1]))
        if isinstance(node, ir.Call) and node.name in ("safe_divide", "divide"):
            return True  # inf / inf
        if isinstance(node, ir.Call) and node.name in _NUMBER_OF_ITS_ARGUMENTS:
            return any(self.may_be_nan(arg) for arg in node.args)
        return False  # comparisons, predicates, text and date functions: never a float

    def floating(self, node: ir.Node) -> bool:
        """Whether ``node`` may yield floats (not only integers or decimals): what float arithmetic starts from."""
        if isinstance(node, ir.Col):
            dtype = self.dtypes.get(node.name)
            return dtype is not None and dtype.is_float()
        if isinstance(node, ir.Lit):
            return _is_float(node.value)
        if isinstance(node, ir.Binary):
            return node.op == "/" or self.floating(node.left) or self.floating(node.right)
        if isinstance(node, ir.Call) and node.name in ("sqrt", "exp", "ln", "safe_divide", "divide"):
            return True
        return self.may_be_nan(node)

    def on_stored_date(self, left: ir.Node, op: str, right: ir.Node) -> pl.Expr | None:
        """``left op right`` over a stored date's own column, where one side is such a column and the other a
        datetime literal (jobs.date_bounds); else None."""
        for column, mirrored, constant in ((left, op, right), (right, MIRRORED.get(op, ""), left)):
            if isinstance(column, ir.Col) and column.name in self.stored_dates and isinstance(constant, ir.Lit):
                value = constant.value.to_pydatetime() if isinstance(constant.value, pd.Timestamp) else None  # as _literal lowers it
                bound = date_bound(mirrored, value)
                if bound is not None:
                    return IEEE_COMPARE[bound[0]](pl.col(column.name), pl.lit(bound[1]))
        return None

    def call(self, node: ir.Call) -> pl.Expr:
        name, args = node.name, node.args
        if name == "between" and isinstance(args[0], ir.Col) and args[0].name in self.stored_dates:
            low, high = self.on_stored_date(args[0], ">=", args[1]), self.on_stored_date(args[0], "<=", args[2])
            if low is not None and high is not None:
                return _false_if_null(low & high)
        if name == "between" and any(isinstance(arg, ir.Lit) and isinstance(arg.value, pd.Timestamp) for arg in args[1:]):
            # a bound may be a literal that a zoned column reads in its zone (in_zone_of)
            return _false_if_null(self.compare(">=", args[0], args[1]) & self.compare("<=", args[0], args[2]))
        if name == "between" and self.may_be_nan(args[2]):  # below any other bound, a NaN operand is out under both orders
            return _false_if_null(self.compare(">=", args[0], args[1]) & self.compare("<=", args[0], args[2]))
        if name in ("sqrt", "ln"):  # null outside the domain; NaN in, NaN out, also where comparisons follow IEEE
            x = self.lower(args[0])
            inside = total_order_compare(">=" if name == "sqrt" else ">", x, pl.lit(0), a_may_be_nan=self.may_be_nan(args[0]), b_may_be_nan=False)
            as_float = x.cast(pl.Float64)
            return pl.when(inside).then(as_float.sqrt() if name == "sqrt" else as_float.log())
        if name == "greatest" and any(map(self.may_be_nan, args)):
            return greatest_with_nan([self.lower(arg) for arg in args], [self.may_be_nan(arg) for arg in args])
        if name == "coalesce":
            return pl.coalesce([self.lower(arg) for arg in args])
        if name == "case":
            pairs = [(args[i], args[i + 1]) for i in range(0, len(args) - 1, 2)]
            chain: Any = pl
            left: pl.Expr | None = None  # the rows no earlier condition took
            for cond, value in pairs:
                taken = self.reaching(left, cond, condition=True)
                rows = taken.fill_null(False)
                chain = chain.when(taken).then(self.reaching(rows if left is None else left & rows, value))
                left = ~rows if left is None else left & ~rows
            result: pl.Expr = chain.otherwise(self.reaching(left, args[-1]))
            return result
        if name == "try_cast":
            return _try_cast(self.lower(args[0]), args[1].value, text=self.kind(args[0]) == "string")  # type: ignore[attr-defined]
        if name == "cast" and isinstance(args[1], ir.Lit) and args[1].value == _DATETIME_CAST and self.kind(args[0]) == "string":
            return self.lower(args[0]).str.to_datetime(time_unit="ns")  # parsed, as pandas' astype does
        if name == "cast" and isinstance(args[1], ir.Lit) and args[1].value == _DATETIME_CAST and self.kind(args[0]) == "datetime":
            value = self.lower(args[0])
            cast = value.cast(pl.Datetime("ns"))  # a value outside nanoseconds' range (9999-12-31) became null, silently
            return pl.when(_fails_where(value.is_not_null() & cast.is_null(), DATETIME_OUT_OF_RANGE) == 0).then(cast)
        if name == "date_trunc":  # the unit comes first, a literal
            return self.lower(args[1]).dt.truncate(_TRUNCATE[args[0].value])  # type: ignore[attr-defined]
        if name == "date_diff":
            return _date_diff(args[0].value, self.lower(args[1]), self.lower(args[2]))  # type: ignore[attr-defined]
        if name == "substr":  # start and length: literals, or expressions (an integer count each)
            text, *bounds = (self.lower(arg) if i == 0 or not isinstance(arg, ir.Lit) else arg.value for i, arg in enumerate(args))
            return slice_expr(text, *bounds)
        if name in _LITERAL_CALLS:
            values = [arg.value for arg in args[1:] if isinstance(arg, ir.Lit)]  # the parser checked they are literals
            return _LITERAL_CALLS[name](self.lower(args[0]), *values)
        return _CALLS[name](*(self.lower(arg) for arg in args))


def orders_numbers(node: ir.Node, kinds: Mapping[str, str]) -> bool:
    """Whether ``node`` orders values of which one may be a float (a comparison, ``between``, ``greatest``, or the domain
    guard of ``sqrt`` or ``ln``, over a column that is not text, a datetime or a bool, a ``/`` or a cast to a float):
    where one may be NaN, the lowering needs the column types (jobs.nan_order). Dates and text, most of TPC-H's
    comparisons, do not; but a datetime column compared with a datetime literal does (its time zone)."""
    if isinstance(node, ir.Compare):
        operands: tuple[ir.Node, ...] = (node.left, node.right)
    elif isinstance(node, ir.Call) and node.name in ("between", "greatest", "sqrt", "ln"):  # sqrt, ln: their domain guard
        operands = node.args
    else:
        operands = ()
    if any(_maybe_float(operand, kinds) for operand in operands) or _datetime_with_literal(operands, kinds):
        return True
    return any(orders_numbers(child, kinds) for child in ir.children(node))


def _datetime_with_literal(operands: tuple[ir.Node, ...], kinds: Mapping[str, str]) -> bool:
    """Whether a datetime column is ordered against a datetime literal: a zoned column needs its zone from the
    column types (PolarsLowering.in_zone_of)."""
    return any(isinstance(o, ir.Col) and kinds.get(o.name) == "datetime" for o in operands) and any(
        isinstance(o, ir.Lit) and isinstance(o.value, pd.Timestamp) for o in operands)


def _maybe_float(node: ir.Node, kinds: Mapping[str, str]) -> bool:
    if isinstance(node, ir.Col):
        return kinds.get(node.name) not in ("string", "datetime", "bool")
    if isinstance(node, ir.Lit):
        return _is_float(node.value)
    if isinstance(node, ir.Binary) and node.op == "/":
        return True
    if isinstance(node, ir.Call) and node.name in ("cast", "try_cast"):
        return isinstance(node.args[1], ir.Lit) and node.args[1].value in ("float64", "float32")
    return any(_maybe_float(child, kinds) for child in ir.children(node))


def has_integer_arithmetic(node: ir.Node) -> bool:
    """Whether ``node`` has a ``+``, ``-``, ``*``, ``**`` or unary ``-``: the operations checked for integer overflow."""
    if (isinstance(node, ir.Binary) and node.op in ("+", "-", "*", "**")) or (isinstance(node, ir.Unary) and node.op == "-"):
        return True
    return any(has_integer_arithmetic(child) for child in ir.children(node))


#: The sentinel in the error of a query whose checked integer result (see PolarsLowering.binary) is outside int64.
INT64_OVERFLOW = "spillway: integer overflow"

#: The type each sentinel's failing cast targets. cudf-polars' error names only the cast's types
#: ("Conversion from <type_id.STRING: 23> to <type_id.UINT16: 6> failed."), so each check has an
#: unsigned type of its own, which no user cast targets (casts are to signed integers, floats,
#: bool, text, datetimes and decimals): the type names the check.
SENTINEL_TYPES: dict[str, type[pl.DataType]] = {INT64_OVERFLOW: pl.UInt16, DIVISION_BY_ZERO: pl.UInt8, DATETIME_OUT_OF_RANGE: pl.UInt32}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _checked_int64(op: str, a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """int64 ``a op b`` (``+``, ``-``, ``*``), failing the query with :data:`INT64_OVERFLOW` where it leaves int64.

    The operations wrap around in int64, on Polars and on cudf-polars alike; whether they did is
    decided in int64 too (no 128-bit integers: cudf-polars has none), before the fact for a sum or
    a difference, after it for a product: a wrapped product divided by one factor is not the other.
    """
    result = _BINARY[op](a, b)
    if op == "+":
        overflowed = ((b > 0) & (a > _INT64_MAX - b)) | ((b < 0) & (a < _INT64_MIN - b))
    elif op == "-":
        overflowed = ((b < 0) & (a > _INT64_MAX + b)) | ((b > 0) & (a < _INT64_MIN + b))
    else:
        divisor = pl.when((a == 0) | (a == -1)).then(1).otherwise(a)  # neither divides a wrapped product safely
        overflowed = pl.when(a == 0).then(False).when(a == -1).then(b == _INT64_MIN).otherwise(result // divisor != b)
    return result + _fails_where(overflowed, INT64_OVERFLOW)


def _checked_power(base: pl.Expr, exponent: pl.Expr) -> pl.Expr:
    """Integer ``base ** exponent`` that fails as the other checked operations do where the result leaves int64.

    128 bits do not hold a power (``x ** 70``), so the int64 power, which wraps around, is compared
    with the same power in float64, which misses the exact one by rounding alone: a wrapped result
    is off by at least 2**63, a rounded one by at most about 2**11 (float64's own overflow, an
    infinity, is off by more than anything). There the query fails with :data:`INT64_OVERFLOW`.
    """
    wrapped = base.pow(exponent)
    approximate = base.cast(pl.Float64).pow(exponent.cast(pl.Float64))
    overflowed = (approximate - wrapped.cast(pl.Float64)).abs() > 2.0**62
    return wrapped.cast(pl.Int64) + _fails_where(overflowed, INT64_OVERFLOW)


def to_polars(
    node: ir.Node, text: str, field: str | None, schema: Mapping[str, str] | None = None, dtypes: Mapping[str, Any] | None = None,
    columns: Mapping[str, pl.Expr] | None = None, stored_dates: frozenset[str] = frozenset(),
) -> pl.Expr:
    """The Polars expression of an IR tree over columns of ``schema``'s kinds (and ``dtypes``' Polars types, when known:
    integer ``+``, ``-``, ``*`` are then checked for overflow). ``columns`` gives the expression a column reference
    stands for, where it is not the column itself (a cast of it); of those, ``stored_dates`` are casts of stored
    dates to datetimes, which a comparison with a datetime literal skips (jobs.date_bounds), and so does a
    comparison of two of them that is the whole expression (:func:`_two_stored_dates`)."""
    alone = _two_stored_dates(node, stored_dates)
    return alone if alone is not None else PolarsLowering(text, field, schema, dtypes, columns, stored_dates).lower(node)


def _two_stored_dates(node: ir.Node, stored_dates: frozenset[str]) -> pl.Expr | None:
    """A filter that only compares two stored dates, on the dates themselves; else None.

    They compare as their casts to datetimes do (a date to its midnight is exact and keeps the order),
    so neither is cast: TPC-H q04's and q21's ``l_commitdate < l_receiptdate`` (12 M casts at SF 1).
    Only as the whole predicate: in a conjunction with a selective bound (q12), Polars' scan first reads
    the bounded columns and the others only for the rows kept, while the casts' terms ran after it;
    pushed into the scan with the rest, the two dates were read for every row (q12: +50 % CPU).
    """
    if isinstance(node, ir.Compare) and isinstance(node.left, ir.Col) and isinstance(node.right, ir.Col) \
            and {node.left.name, node.right.name} <= stored_dates:
        return _false_if_null(IEEE_COMPARE[node.op](pl.col(node.left.name), pl.col(node.right.name)))
    return None
