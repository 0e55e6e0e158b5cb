"""Expression IR → a function of a pandas, dask or cudf DataFrame (the Dask engine's lowering).

Every operation is an operator or a pandas-API method that all three share, so a dask graph
built from these functions holds only dask/pandas/cudf callables: workers need no Spillway
code. Each function also takes plain scalars, which is how the parser folds constants
(:func:`fold`). Null rules (docs/spec.md, "Nulls"): a comparison with a null is false,
``!=`` and ``not in`` included; a condition that is null counts as false.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
from pandas.api.types import is_bool_dtype, is_object_dtype

from spillway.jobs import ir
from spillway.jobs.decimal_cast import is_decimal_cast
from spillway.jobs.errors import ExpressionError, IntegerOverflow
from spillway.jobs.like_patterns import like_form, like_matches
from spillway.jobs.pandas_functions import FUNCTIONS, cast_values, whole_numbers
from spillway.jobs.pandas_numbers import NUMBER_FUNCTIONS, as_floats, floating, keeps, supertype
from spillway.jobs.polars_partitions import slice_by_rows, through_polars
from spillway.jobs.regex_functions import REGEX_FUNCTIONS, regex_expr
from spillway.jobs.time_functions import TIME_FUNCTIONS, time_expr

MAX_INT_BITS = 10_000  # caps constant integer powers such as 9 ** 9 ** 9
# Polars' errors too: functions the Dask engine runs through Polars (jobs/polars_partitions.py) raise them.
_EVAL_ERRORS = (ArithmeticError, AttributeError, NotImplementedError, TypeError, ValueError, pl.exceptions.PolarsError)
_SCALARS = (str, int, float, np.generic, datetime, timedelta, pd.DateOffset, type(pd.NaT), type(pd.NA))
# "string" -> str: the default string dtype on pandas, a plain string column on cudf.

Fn = Callable[[Any], Any]


def _calendar_offset(value: Any, offset: pd.DateOffset) -> Any:
    """cuDF shifts dates by its own DateOffset (months only); pandas and dask take pandas'."""
    meta = getattr(value, "_meta", value)
    if type(meta).__module__.split(".")[0] == "cudf":
        import cudf

        return cudf.DateOffset(months=offset.kwds.get("months", 0))
    return offset


def _add_offset(value: Any, offset: pd.DateOffset) -> Any:
    return value + _calendar_offset(value, offset)


def _sub_offset(value: Any, offset: pd.DateOffset) -> Any:
    return value - _calendar_offset(value, offset)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, _SCALARS)


def _cond(value: Any) -> Any:
    """A condition as plain booleans, null counting as false (as in a SQL WHERE)."""
    if _is_scalar(value):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if pd.isna(value):
            return False
        raise TypeError(f"expected a condition, got {value!r}")
    if is_object_dtype(value.dtype):  # pandas 2 string predicates give True/False/NaN objects
        return value.notnull() & value.astype(bool)
    if not is_bool_dtype(value.dtype):
        raise TypeError(f"expected a condition, got a column of dtype {value.dtype}")
    return value.fillna(False).astype(bool)  # dask strings and cudf give nullable booleans


def _not(value: Any) -> Any:
    return not value if isinstance(value, bool) else ~value


def _isin(value: Any, options: tuple[Any, ...]) -> Any:
    return value in options if _is_scalar(value) else _cond(value.isin(list(options)))


def _notin(value: Any, options: tuple[Any, ...]) -> Any:
    result = _not(_isin(value, options))
    return result if _is_scalar(value) else result & value.notnull()


def _compare(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``op`` giving plain bools, false where a column is null. Otherwise backends disagree:
    NaN != x is true in pandas, while dask strings and cudf give <NA>."""

    def compare(left: Any, right: Any) -> Any:
        left, right = _in_zone_of(left, right), _in_zone_of(right, left)
        result = _cond(op(left, right))
        for side in (left, right) if op is operator.ne else ():
            result = result if _is_scalar(side) else result & side.notnull()
        return result

    return compare


def _in_zone_of(value: Any, other: Any) -> Any:
    """``value``, a datetime literal without a zone, as that UTC instant in the zone of ``other``, a column with a
    time zone (a zoned parquet timestamp); else ``value`` as it is. pandas refuses to compare the two
    (docs/spec.md, "Time zones and parsing"), as Polars does; jobs.lower_polars reads the literal alike."""
    zone = getattr(getattr(other, "dtype", None), "tz", None)
    if zone is None or not isinstance(value, pd.Timestamp) or value.tz is not None:
        return value
    return value.tz_localize("UTC").tz_convert(zone)


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": _compare(operator.eq), "!=": _compare(operator.ne), "<": _compare(operator.lt),
    "<=": _compare(operator.le), ">": _compare(operator.gt), ">=": _compare(operator.ge),
}


def _power(base: Any, exponent: Any) -> Any:
    if isinstance(base, int) and isinstance(exponent, int) and exponent * abs(base).bit_length() > MAX_INT_BITS:
        raise OverflowError(f"integer result has more than {MAX_INT_BITS} bits")
    result = base**exponent
    if isinstance(result, complex):
        raise ValueError("complex result")
    return result


def _nullable(value: Any) -> Any:
    """A numpy integer column as pandas' nullable integers, so that a null keeps it an integer, as on Polars, in every
    dask partition (``where`` makes floats of only the partitions it puts a null in); cuDF's integers hold nulls already."""
    dtype = value.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iu" and isinstance(getattr(value, "_meta", value), pd.Series):
        return value.astype(dtype.name.replace("u", "U").replace("int", "Int", 1))
    return value


def _all_null(value: Any, divisor: Any) -> Any:
    """Nulls in the type of ``value // divisor``: an integer's when both are integers, else float64."""
    kept = _nullable(value) if _integers(value) and not floating(divisor) else value.astype("float64")
    return kept.where(value.isnull())


def _truncated(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """SQL's ``//`` or ``%`` from Python's floored one: the quotient is truncated toward zero and
    the remainder takes the dividend's sign (-7 // 2 is -3, -7 % 3 is -1); by zero, null."""

    def divide(left: Any, right: Any) -> Any:
        if _is_scalar(right) and (right is None or pd.isna(right) or right == 0):
            return None if _is_scalar(left) else _all_null(left, right)
        if _is_scalar(left) and _is_scalar(right):
            if left is None or pd.isna(left):
                return None
            quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
            return quotient if op is operator.floordiv else left - right * quotient
        zero = None if _is_scalar(right) else right == 0
        divisor = right if zero is None else right.where(~zero, 1)
        floored = op(left, divisor)
        if op is operator.floordiv:  # a negative inexact quotient was rounded down: one up
            result = floored.where(~((floored < 0) & (floored * divisor != left)), floored + 1)
        else:  # a remainder whose sign differs from the dividend's is one divisor off
            result = floored.where(~((floored != 0) & ((floored < 0) != (left < 0))), floored - divisor)
        # By a column, the rows divided by zero are null: integers stay integers (nullable), as on Polars.
        return result if zero is None else _nullable(result).where(~zero)

    return divide


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_CHECKED: dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "-": operator.sub, "*": operator.mul, "**": _power}


def _integers(value: Any) -> bool:
    """Whether ``value`` is a column of signed integers (numpy, pandas' nullable, cuDF, or dask's of them)."""
    return getattr(getattr(value, "dtype", None), "kind", "") == "i"


def _true_divide(left: Any, right: Any) -> Any:
    """``/`` in float64, as on Polars: pandas' nullable integers would give nullable floats (0 / 0 null, not NaN)."""
    return as_floats(left) / as_floats(right)


def _as_float(value: Any) -> Any:
    return float(value) if _is_scalar(value) else value.astype("float64")


#: The masks of the rows a check (``divide``'s zero divisor, an integer overflow) may fail on while a part of an ``and``
#: or a branch of an ``if`` or ``case`` is evaluated: a row every one keeps (none: every row). docs/spec.md: a check sees
#: the rows that reach it, at any depth, as on the Polars engine (jobs/lower_polars.py, _REACHED; Polars itself evaluates
#: an elementwise branch of when/then over the rows that take it). A check ands them in its partitions (keeps): and-ed
#: as dask columns, every ``&`` walked the whole graph (are_co_aligned): 50 nested checks planned 5 times slower.
_REACHED: ContextVar[tuple[Any, ...]] = ContextVar("spillway_pandas_reached_rows", default=())


def _reached_by(masks: list[Any], fn: Fn, frame: Any) -> Any:
    """``fn(frame)``, its checks limited to the rows reached now that every one of ``masks`` keeps."""
    if not masks:
        return fn(frame)
    token = _REACHED.set((*_REACHED.get(), *masks))
    try:
        return fn(frame)
    finally:
        _REACHED.reset(token)


def _in_turn(parts: list[Fn], frame: Any) -> list[Any]:
    """The masks of an ``and``'s parts over ``frame``, left to right, each part's checks limited to the rows the ones before it keep."""
    masks: list[Any] = []
    for part in parts:
        masks.append(_reached_by(masks, part, frame))
    return masks


def _checks(node: ir.Node) -> bool:
    """Whether ``node`` holds a check that fails the job on some rows: ``divide``, or arithmetic checked for integer overflow."""
    return any((isinstance(n, ir.Call) and n.name == "divide") or (isinstance(n, ir.Binary) and n.op in _CHECKED)
               or (isinstance(n, ir.Unary) and n.op == "-") for n in ir.walk(node))


def all_of(masks: list[Any]) -> Any:
    """The masks and-ed as a balanced tree: a left-deep chain of ``&`` overflows dask's recursion at about 200."""
    while len(masks) > 1:
        masks = [masks[i] & masks[i + 1] if i + 1 < len(masks) else masks[i] for i in range(0, len(masks), 2)]
    return masks[0]


def _raise_if(values: Any, overflowed: Any, message: str, field: str | None, *reached: Any) -> Any:
    """``values``, unless a row ``overflowed`` that ``reached`` keeps: then the job fails naming the expression."""
    if bool(keeps(overflowed, *reached).any()):
        raise IntegerOverflow(message, field=field)
    return values


def checked_integers(symbol: str, message: str, field: str | None) -> Callable[..., Any]:
    """``+``, ``-``, ``*``, ``**`` or unary ``-`` (``symbol`` ``neg``) that raise :class:`IntegerOverflow` where an
    integer result leaves int64 instead of wrapping around, as numpy would.

    A wrapped result differs from the exact one by a multiple of 2**64 (2**32 for int32), and by at
    least half of it; the same operation in float64 misses the exact result by rounding alone, at
    most 2**12 for int64 operands and results (``**`` too: float64's power is within an ulp or so).
    So a row overflowed where the two differ by more than a quarter of 2**64 (of 2**32), or where
    float64 itself overflows (``10 ** 400``: an infinity). Floats pass unchecked.
    """
    op = operator.neg if symbol == "neg" else _CHECKED[symbol]

    def run(*operands: Any) -> Any:
        operands = tuple(map(_as_int64, operands))
        result = op(*operands)
        if not _integers(result) or any(getattr(getattr(o, "dtype", None), "kind", "i") not in "if" for o in operands):
            return result  # floats, scalars (Python's ints do not wrap), bools and unsigned ints
        exact = op(*(_as_float(o) for o in operands))
        missed = exact - result.astype("float64")
        # A folded constant (cast('41', 'int64') + 1) is a numpy scalar, which has no .abs().
        overflowed = (missed.abs() if hasattr(missed, "abs") else np.abs(missed)) > 2.0 ** (8 * result.dtype.itemsize - 2)
        if hasattr(result, "map_partitions"):  # dask: checked as each partition is computed
            return result.map_partitions(_raise_if, overflowed, message, field, *_REACHED.get(), meta=result._meta, align_dataframes=False)
        return _raise_if(result, overflowed, message, field, *_REACHED.get())

    return run


def _as_int64(value: Any) -> Any:
    """A narrower integer column (a cast to int32) as int64, the language's integers: arithmetic on it then
    overflows only outside int64 (``cast(n, 'int32') * 3000000000`` is not an int32 overflow)."""
    dtype = getattr(value, "dtype", None)
    if not (getattr(dtype, "kind", "") in ("i", "u") and getattr(dtype, "itemsize", 8) < 8):
        return value
    return value.astype("int64" if isinstance(dtype, np.dtype) else "Int64")  # a nullable int stays nullable


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _true_divide,
    "//": _truncated(operator.floordiv), "%": _truncated(operator.mod), "**": _power,
}


def _widen(value: Any, other: Any) -> Any:
    """A numpy-int column whose other branch is null, widened before ``where``: pandas widens
    only the partitions that take that branch, so dask partitions would disagree with the
    meta. On pandas it becomes a nullable integer (an integer with nulls, as on Polars); on
    cuDF float64. (Against a float, :func:`supertype` made it float64 already.)"""
    dtype = None if _is_scalar(value) else value.dtype
    if other is not None or not (isinstance(dtype, np.dtype) and dtype.kind in "iu"):
        return value
    return _nullable(value) if isinstance(getattr(value, "_meta", value), pd.Series) else value.astype("float64")


def _float_power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` in float64: numpy refuses an integer to a negative integer power."""
    return (float(base) if _is_scalar(base) else cast_values(base, "float64")) ** exponent


def _in_supertype(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``op`` over its operands in their supertype: an integer and a float as floats, as on Polars (``n // 1.5``)."""
    return lambda left, right: op(*supertype(left, right))


def _broadcast(value: Any, like: Any) -> Any:
    """A Series of ``value`` on ``like``'s index; to_frame/assign work on dask and cudf too."""
    return like.to_frame(name="value").assign(value=value)["value"]


def _select(cond: Any, then: Any, other: Any) -> Any:
    """``then`` where ``cond`` (a _cond result) holds, else ``other``; scalar branches broadcast."""
    if _is_scalar(cond):
        return then if cond else other
    if _is_scalar(then) and _is_scalar(other):  # broadcast the non-null one, so its dtype leads
        then, other = (_broadcast(then, cond), other) if then is not None else (then, _broadcast(other, cond))
    then, other = supertype(then, other)
    then, other = _widen(then, other), _widen(other, then)
    return then.where(cond, other) if not _is_scalar(then) else other.where(~cond, then)


def _coalesce(value: Any, fallback: Any) -> Any:
    value, fallback = supertype(value, fallback)
    if _is_scalar(value):
        return fallback if pd.isna(value) else value
    if fallback is None:  # Series.fillna(None) is an error, and a no-op anyway
        return value
    return value.fillna(fallback) if _is_scalar(fallback) else value.where(value.notnull(), fallback)


def _between(value: Any, low: Any, high: Any) -> Any:
    return _COMPARE[">="](value, low) & _COMPARE["<="](value, high)


def _like(s: Any, pattern: str) -> Any:
    """``s LIKE pattern`` over a column, as its cheapest form (jobs/like_patterns.py)."""
    kind, text = like_form(pattern)
    if kind == "regex":
        return s.str.contains(text, regex=True)
    if kind == "equals":
        return s == text
    if kind == "contains":
        return s.str.contains(text, regex=False)
    return s.str.startswith(text) if kind == "startswith" else s.str.endswith(text)


def _substr(value: Any, start: Any, length: Any = None) -> Any:
    if not (_is_scalar(start) and _is_scalar(length)):  # a start or length from the rows: Polars' slice, row by row
        return slice_by_rows(value, start, length)
    stop = None if length is None else start + length
    return value[start:stop] if _is_scalar(value) else value.str.slice(start, stop)


def _elementwise(on_series: Callable[..., Any], on_scalar: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Apply ``on_series`` to a column, ``on_scalar`` (default the same) to a non-null literal."""

    def impl(value: Any, *args: Any) -> Any:
        if not _is_scalar(value):
            return on_series(value, *args)
        return None if pd.isna(value) else (on_scalar or on_series)(value, *args)

    return impl


#: Function name → implementation over values; col, case and coalesce are built by the lowering.
IMPLS: dict[str, Callable[..., Any]] = {
    "isnull": lambda x: pd.isna(x) if _is_scalar(x) else x.isna(),
    "notnull": lambda x: not pd.isna(x) if _is_scalar(x) else x.notnull(),  # dask Series has no .notna
    "fillna": _coalesce,
    "abs": _elementwise(lambda s: s.abs(), abs),
    "round": _elementwise(lambda s, n=0: s.round(n), round),
    "cast": _elementwise(cast_values, lambda v, t: cast_values(pd.Series([v]), t).iloc[0]),
    "between": _elementwise(_between),
    "lower": _elementwise(lambda s: s.str.lower(), str.lower),
    "upper": _elementwise(lambda s: s.str.upper(), str.upper),
    "contains": _elementwise(lambda s, t: _cond(s.str.contains(t, regex=False)), lambda v, t: t in v),
    "like": _elementwise(lambda s, p: _cond(_like(s, p)), like_matches),
    "startswith": _elementwise(lambda s, t: _cond(s.str.startswith(t)), str.startswith),
    "endswith": _elementwise(lambda s, t: _cond(s.str.endswith(t)), str.endswith),
    "substr": _elementwise(_substr),
    "length": _elementwise(lambda s: whole_numbers(s.str.len()), len),
    "year": _elementwise(lambda s: whole_numbers(s.dt.year), operator.attrgetter("year")),
    "month": _elementwise(lambda s: whole_numbers(s.dt.month), operator.attrgetter("month")),
    "day": _elementwise(lambda s: whole_numbers(s.dt.day), operator.attrgetter("day")),
    **FUNCTIONS,
    **NUMBER_FUNCTIONS,
    "divide": lambda left, right: NUMBER_FUNCTIONS["divide"](left, right, *_REACHED.get()),  # zeros only where rows reach it
    # The same Polars expressions as the Polars engine's, run on each partition (jobs/polars_partitions.py).
    **{name: through_polars(partial(regex_expr, name), null=False if name == "regexp_like" else None) for name in REGEX_FUNCTIONS},
    **{name: through_polars(partial(time_expr, name)) for name in TIME_FUNCTIONS},
}


class PandasLowering:
    """Builds the function of a frame for an IR tree; ``text`` and ``field`` word errors."""

    def __init__(self, text: str, field: str | None) -> None:
        self.text = text
        self.field = field

    def where(self, node: ir.Node) -> str:
        part = " ".join(self.text[node.start : node.end].split())
        part = part if len(part) <= 40 else part[:37] + "..."
        return f"'{part}' at col {node.start}"

    def apply(self, fn: Callable[..., Any], args: list[Fn], node: ir.Node) -> Fn:
        """Call ``fn`` on the args' values when the frame is given, wording errors at ``node``."""
        where, field = self.where(node), self.field

        def run(values: list[Any]) -> Any:
            try:
                result = fn(*values)
                if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:  # also keeps repr() safe
                    raise OverflowError(f"integer result has more than {MAX_INT_BITS} bits")
                return result
            except _EVAL_ERRORS as exc:
                lines = str(exc).strip().splitlines() or [type(exc).__name__]
                raise ExpressionError(f"cannot evaluate {where}: {lines[0][:200]}", field=field) from exc

        return lambda frame: run([arg(frame) for arg in args])

    def condition(self, node: ir.Node) -> Fn:
        """``node`` as plain bools (see _cond), skipping nodes that already yield them: dask
        recurses once per nested operation, so chains must not pile up redundant ones."""
        fn = self.lower(node)
        return fn if ir.is_condition(node) else self.apply(_cond, [fn], node)

    def combine(self, fn: Callable[[Any, Any], Any], parts: list[Fn], node: ir.Node) -> Fn:
        """Join ``parts`` with ``fn`` as a balanced tree, keeping the dask graph shallow."""
        while len(parts) > 1:
            pairs = [parts[i : i + 2] for i in range(0, len(parts), 2)]
            parts = [self.apply(fn, pair, node) if len(pair) == 2 else pair[0] for pair in pairs]
        return parts[0]

    def choose(self, cond_node: ir.Node, then: Fn, other: Fn, node: ir.Node, *, checked: bool) -> Fn:
        """``then`` where ``cond_node`` holds, else ``other``; where a branch holds a check (``checked``), it sees only
        the rows that take that branch."""
        cond = self.condition(cond_node)
        if isinstance(cond_node, ir.Lit):  # a literal condition picks its branch now
            return then if cond(None) else other
        if not checked:
            return self.apply(_select, [cond, then, other], node)

        def branches(frame: Any) -> list[Any]:
            chosen = cond(frame)
            return [chosen, _reached_by([chosen], then, frame), _reached_by([_not(chosen)], other, frame)]

        return self.apply(lambda values: _select(*values), [branches], node)

    def lower(self, node: ir.Node) -> Fn:
        if isinstance(node, ir.Lit):
            value = node.value
            return lambda frame: value
        if isinstance(node, ir.Col):
            return operator.itemgetter(node.name)
        if isinstance(node, ir.Unary):
            if node.op == "+":
                return self.lower(node.operand)
            return self.apply(checked_integers("neg", self.overflow_message(node), self.field), [self.lower(node.operand)], node)
        if isinstance(node, ir.Not):
            return self.apply(_not, [self.condition(node.operand)], node)
        if isinstance(node, ir.Binary):
            return self.binary(node)
        if isinstance(node, ir.Compare):
            return self.apply(_COMPARE[node.op], [self.lower(node.left), self.lower(node.right)], node)
        if isinstance(node, ir.InList):
            options = tuple(option.value for option in node.options)
            return self.apply(_notin if node.negated else _isin, [self.lower(node.operand), lambda frame: options], node)
        if isinstance(node, ir.Logical):
            parts = [self.condition(part) for part in node.parts]
            if node.op == "and" and any(map(_checks, node.parts[1:])):
                return self.apply(all_of, [partial(_in_turn, parts)], node)
            return self.combine(operator.and_ if node.op == "and" else operator.or_, parts, node)
        if isinstance(node, ir.IfElse):
            checked = _checks(node.then) or _checks(node.other)
            return self.choose(node.cond, self.lower(node.then), self.lower(node.other), node, checked=checked)
        if isinstance(node, ir.Call):
            return self.call(node)
        raise TypeError(f"unknown IR node {type(node).__name__}")  # pragma: no cover - the IR is closed

    def binary(self, node: ir.Binary) -> Fn:
        left, right, fn = node.left, node.right, _BINARY[node.op]
        if node.op == "+" and isinstance(left, ir.Lit) and isinstance(left.value, (pd.DateOffset, timedelta)):
            left, right = right, left  # interval + column: column + interval is the form every backend takes
        if node.op in ("+", "-") and isinstance(right, ir.Lit) and isinstance(right.value, pd.DateOffset):
            fn = _add_offset if node.op == "+" else _sub_offset
        elif node.op == "**" and ir.negative_integer(right):
            fn = _float_power  # an integer to a negative power is a float (2 ** -1 is 0.5), as on Polars
        elif node.op in _CHECKED:
            fn = _in_supertype(checked_integers(node.op, self.overflow_message(node), self.field))
        else:
            fn = _in_supertype(fn)
        return self.apply(fn, [self.lower(left), self.lower(right)], node)

    def overflow_message(self, node: ir.Node) -> str:
        return (f"integer overflow in {self.where(node)}: a result is outside int64 ({INT64_MIN} to {INT64_MAX}); "
                "compute in float64 instead, e.g. cast(x, 'float64')")

    def call(self, node: ir.Call) -> Fn:
        args = list(node.args)
        if node.name == "coalesce":
            return self.combine(_coalesce, [self.lower(arg) for arg in args], node)  # associative, so it may be balanced
        if node.name == "case":  # fold from the default backwards so the first true condition wins
            result, checked = self.lower(args[-1]), _checks(args[-1])
            for index in range(len(args) - 3, -1, -2):  # a later condition is in the branch of the rows the earlier ones leave
                checked = checked or _checks(args[index + 1])
                result = self.choose(args[index], self.lower(args[index + 1]), result, node, checked=checked)
                checked = checked or _checks(args[index])
            return result
        return self.apply(IMPLS[node.name], [self.lower(arg) for arg in args], node)


def fold(node: ir.Node, text: str, field: str | None) -> ir.Node:
    """``node`` as one literal when every operand is a literal (evaluated now), else ``node``.

    Raises
    ------
    ExpressionError
        When the constant cannot be evaluated, quoting the part (``1 / 0``, ``9 ** 9 ** 9``).
    """
    # -9223372036854775808 is a negated literal: its operand alone would not fit.
    for child in (node, *(() if isinstance(node, ir.Unary) else ir.children(node))):
        _within_int64(child, text, field)
    if isinstance(node, (ir.Lit, ir.Col)) or not all(isinstance(child, ir.Lit) for child in ir.children(node)):
        return node
    if is_decimal_cast(node):  # pandas has no exact decimal to fold it into; the Polars engine computes it
        return node
    folded = ir.Lit(node.start, node.end, PandasLowering(text, field).lower(node)(None))
    _within_int64(folded, text, field)
    return folded


def _within_int64(node: ir.Node, text: str, field: str | None) -> None:
    """An integer constant must fit int64, the columns' integers: a bigger one would wrap or turn float on one engine."""
    value = node.value if isinstance(node, ir.Lit) else None
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        where = PandasLowering(text, field).where(node)
        raise ExpressionError(f"{where}: the integer {value} is outside int64 ({INT64_MIN} to {INT64_MAX}); "
                              "write it as a float (e.g. 1e19) if that is meant", field=field)


def evaluate(node: ir.Node, frame: Any, text: str, field: str | None) -> Any:
    """The value of ``node`` over a pandas, dask or cudf DataFrame: a Series-like or a scalar."""
    return PandasLowering(text, field).lower(node)(frame)
