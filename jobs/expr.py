"""Whitelisted expression language for job specs.

User text is parsed with :mod:`ast` and every node is checked against a whitelist;
nothing is ever handed to ``eval`` or ``exec``. A parsed :class:`Expression` evaluates
against a pandas, dask or cudf DataFrame using only operators and pandas-API methods
that all three share, so dask graphs hold only dask/pandas callables and workers need
no Spillway code installed. :meth:`Expression.infer_kind` works out, before any data is
read, the kind of value an expression yields from its columns' kinds, and refuses kinds
that cannot meet (a string compared with a number, the year of a string).
"""

from __future__ import annotations

import ast
import operator
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_object_dtype

from jobs.errors import ExpressionError, UnknownColumn

MAX_LENGTH = 2000
MAX_DEPTH = 32  # dask recurses per nested operation; this keeps deep graphs well inside its limit
_MAX_INT_BITS = 10_000  # caps constant integer powers such as 9 ** 9 ** 9
_EVAL_ERRORS = (ArithmeticError, AttributeError, NotImplementedError, TypeError, ValueError)
_SCALARS = (str, int, float, np.generic, datetime, timedelta, pd.DateOffset, type(pd.NaT), type(pd.NA))
# "string" -> str: the default string dtype on pandas, a plain string column on cudf.
_DTYPES: dict[str, Any] = {name: name for name in ("int64", "int32", "float64", "float32", "bool", "datetime64[ns]")}
_DTYPES["string"] = str
_CALENDAR_UNITS = ("month", "year")  # variable length, so pandas.DateOffset; the rest are Timedeltas
_UNITS = tuple(u + s for u in ("second", "minute", "hour", "day", "week", *_CALENDAR_UNITS) for s in ("", "s"))

_DATE = r"\d{4}-\d\d-\d\d"
_TIMESTAMP = _DATE + r"([ T]\d\d:\d\d(:\d\d(\.\d{1,9})?)?)?"

_Fn = Callable[[Any], Any]


@dataclass(frozen=True)
class Expression:
    """A validated expression; ``columns`` holds every column name it reads."""

    text: str
    columns: frozenset[str]
    _fn: _Fn = dataclass_field(repr=False, compare=False)
    _field: str | None = dataclass_field(default=None, repr=False, compare=False)

    def evaluate(self, frame: Any) -> Any:
        """Evaluate against a pandas, dask or cudf DataFrame; returns a Series-like or a scalar."""
        missing = sorted(self.columns - set(frame.columns))
        if missing:
            names = ", ".join(map(repr, missing))
            message = f"expression '{shorten(self.text)}' reads unknown column(s): {names}"
            raise UnknownColumn(message, field=self._field)
        return self._fn(frame)

    def infer_kind(self, schema: Mapping[str, str]) -> str:
        """The kind of what this expression yields where columns have ``schema``'s kinds.

        Kinds are those of :data:`jobs.sources.Schema`. A column missing from ``schema``
        counts as "unknown", and "unknown" or "other" never cause a rejection.

        Raises
        ------
        TypeMismatch
            Where kinds cannot meet, e.g. ``name > 5`` with ``name`` a string: the message
            quotes the parts and their kinds, and the column where the part starts.
        """
        from jobs.kinds import infer_kind  # jobs.kinds builds on this module's parser

        return infer_kind(self.text, self._field, schema)

    def __reduce__(self) -> tuple[Any, ...]:
        # The compiled closure cannot be pickled; the text re-parses to the same expression.
        return (_restore, (self.text, self._field))


def _restore(text: str, field: str | None) -> Expression:
    return parse_expression(text, field=field)


def shorten(text: str, limit: int = 40) -> str:
    """``text`` on one line, cut to ``limit`` characters for an error message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class _Const:
    """A value known at parse time, so operations on constants fold eagerly."""

    value: Any

    def __call__(self, frame: Any) -> Any:
        return self.value


# Runtime helpers: each takes scalars or pandas/dask/cudf Series alike.


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
        result = _cond(op(left, right))
        for side in (left, right) if op is operator.ne else ():
            result = result if _is_scalar(side) else result & side.notnull()
        return result

    return compare


_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: _compare(operator.eq), ast.NotEq: _compare(operator.ne), ast.Lt: _compare(operator.lt),
    ast.LtE: _compare(operator.le), ast.Gt: _compare(operator.gt), ast.GtE: _compare(operator.ge),
}


def _power(base: Any, exponent: Any) -> Any:
    if isinstance(base, int) and isinstance(exponent, int) and exponent * abs(base).bit_length() > _MAX_INT_BITS:
        raise OverflowError(f"integer result has more than {_MAX_INT_BITS} bits")
    result = base**exponent
    if isinstance(result, complex):
        raise ValueError("complex result")
    return result


def _widen(value: Any, other: Any) -> Any:
    """float64 for a numpy-int column whose other branch is float or null. pandas widens only
    the partitions that take that branch, so dask partitions would disagree with the meta."""
    dtype = None if _is_scalar(value) else value.dtype
    other_float = other is None or isinstance(other, float) or getattr(getattr(other, "dtype", None), "kind", "") == "f"
    return value.astype("float64") if isinstance(dtype, np.dtype) and dtype.kind in "iu" and other_float else value


def _broadcast(value: Any, like: Any) -> Any:
    """A Series of ``value`` on ``like``'s index; to_frame/assign work on dask and cudf too."""
    return like.to_frame(name="value").assign(value=value)["value"]


def _select(cond: Any, then: Any, other: Any) -> Any:
    """``then`` where ``cond`` (a _cond result) holds, else ``other``; scalar branches broadcast."""
    if _is_scalar(cond):
        return then if cond else other
    if _is_scalar(then) and _is_scalar(other):  # broadcast the non-null one, so its dtype leads
        then, other = (_broadcast(then, cond), other) if then is not None else (then, _broadcast(other, cond))
    then, other = _widen(then, other), _widen(other, then)
    return then.where(cond, other) if not _is_scalar(then) else other.where(~cond, then)


def _coalesce(value: Any, fallback: Any) -> Any:
    if _is_scalar(value):
        return fallback if pd.isna(value) else value
    if fallback is None:  # Series.fillna(None) is an error, and a no-op anyway
        return value
    return value.fillna(fallback) if _is_scalar(fallback) else value.where(value.notnull(), fallback)


def _between(value: Any, low: Any, high: Any) -> Any:
    return _COMPARE[ast.GtE](value, low) & _COMPARE[ast.LtE](value, high)


def _timestamp(text: str, pattern: str = _TIMESTAMP, shape: str = "YYYY-MM-DD hh:mm:ss") -> pd.Timestamp:
    # A strict pattern, because pandas also accepts words such as "now" and "today".
    if not re.fullmatch(pattern, text, flags=re.ASCII):
        raise ValueError(f"expected {shape!r}, got {text!r}")
    return pd.Timestamp(text)


def _interval(count: int, unit: str) -> Any:
    unit = unit.removesuffix("s")
    if unit in _CALENDAR_UNITS:  # years as months: cudf's DateOffset only takes months
        return pd.DateOffset(months=count * (12 if unit == "year" else 1))
    size: dict[str, Any] = {unit + "s": count}
    return pd.Timedelta(**size)


def _astype(value: Any, name: str) -> Any:
    if name == "string":  # pandas 2 would turn nulls into the text "nan"
        return value.astype(str).where(value.notnull())
    return value.astype(_DTYPES[name])


_REGEX_SPECIAL = frozenset(".^$*+?()[]{}|\\")


def _like_regex(pattern: str) -> str:
    """SQL LIKE as an anchored regex: ``%`` is any run of characters, ``_`` one; the rest is literal.

    Only ``.``, ``*``, anchors and escapes are emitted: the subset cuDF's regex engine shares with ``re``.
    """
    parts = {"%": ".*", "_": "."}
    return "^" + "".join(parts.get(char, "\\" + char if char in _REGEX_SPECIAL else char) for char in pattern) + "$"


def _substr(value: Any, start: int, length: int | None = None) -> Any:
    stop = None if length is None else start + length
    return value[start:stop] if _is_scalar(value) else value.str.slice(start, stop)


def _elementwise(on_series: Callable[..., Any], on_scalar: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Apply ``on_series`` to a column, ``on_scalar`` (default the same) to a non-null literal."""

    def impl(value: Any, *args: Any) -> Any:
        if not _is_scalar(value):
            return on_series(value, *args)
        return None if pd.isna(value) else (on_scalar or on_series)(value, *args)

    return impl


@dataclass(frozen=True)
class _Func:
    usage: str
    min_args: int
    max_args: int | None  # None: any number
    impl: Callable[..., Any] | None  # None: built by the compiler (col, case, coalesce)
    literals: dict[int, str] = dataclass_field(default_factory=dict)  # arg index -> _LITERALS key


_LITERALS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "text": ("a string literal", lambda v: isinstance(v, str)),
    "pattern": ("a LIKE pattern literal ('%' any run of characters, '_' one character)", lambda v: isinstance(v, str) and len(v) <= 200),
    "int": ("an integer literal", lambda v: type(v) is int),  # not bool
    "count": ("a non-negative integer literal", lambda v: type(v) is int and v >= 0),
    "dtype": ("one of " + ", ".join(map(repr, _DTYPES)), lambda v: isinstance(v, str) and v in _DTYPES),
    "unit": ("one of " + ", ".join(map(repr, _UNITS)), lambda v: isinstance(v, str) and v in _UNITS),
}
_STR = {1: "text"}
_FUNCS: dict[str, _Func] = {
    "col": _Func('col("column name")', 1, 1, None, {0: "text"}),
    "case": _Func("case(cond1, value1, cond2, value2, ..., default)", 3, 2 * MAX_DEPTH + 1, None),
    "isnull": _Func("isnull(x)", 1, 1, lambda x: pd.isna(x) if _is_scalar(x) else x.isna()),
    # dask Series has no .notna
    "notnull": _Func("notnull(x)", 1, 1, lambda x: not pd.isna(x) if _is_scalar(x) else x.notnull()),
    "fillna": _Func("fillna(x, value)", 2, 2, _coalesce),
    "coalesce": _Func("coalesce(x, y, ...)", 2, None, None),
    "abs": _Func("abs(x)", 1, 1, _elementwise(lambda s: s.abs(), abs)),
    "round": _Func("round(x[, ndigits])", 1, 2, _elementwise(lambda s, n=0: s.round(n), round), {1: "int"}),
    "cast": _Func('cast(x, "dtype")', 2, 2, _elementwise(_astype, lambda v, t: _astype(pd.Series([v]), t).iloc[0]),
                  {1: "dtype"}),
    "between": _Func("between(x, low, high)", 3, 3, _elementwise(_between)),
    "lower": _Func("lower(s)", 1, 1, _elementwise(lambda s: s.str.lower(), str.lower)),
    "upper": _Func("upper(s)", 1, 1, _elementwise(lambda s: s.str.upper(), str.upper)),
    "contains": _Func('contains(s, "text")', 2, 2, _elementwise(
        lambda s, t: _cond(s.str.contains(t, regex=False)), lambda v, t: t in v), _STR),
    "like": _Func('like(s, "pattern")', 2, 2, _elementwise(
        lambda s, p: _cond(s.str.contains(_like_regex(p), regex=True)), lambda v, p: re.match(_like_regex(p), v) is not None),
        {1: "pattern"}),
    "startswith": _Func(
        'startswith(s, "text")', 2, 2, _elementwise(lambda s, t: _cond(s.str.startswith(t)), str.startswith), _STR),
    "endswith": _Func(
        'endswith(s, "text")', 2, 2, _elementwise(lambda s, t: _cond(s.str.endswith(t)), str.endswith), _STR),
    "substr": _Func("substr(s, start[, length])", 2, 3, _elementwise(_substr), {1: "count", 2: "count"}),
    "length": _Func("length(s)", 1, 1, _elementwise(lambda s: s.str.len(), len)),
    "year": _Func("year(d)", 1, 1, _elementwise(lambda s: s.dt.year, operator.attrgetter("year"))),
    "month": _Func("month(d)", 1, 1, _elementwise(lambda s: s.dt.month, operator.attrgetter("month"))),
    "day": _Func("day(d)", 1, 1, _elementwise(lambda s: s.dt.day, operator.attrgetter("day"))),
    "date": _Func('date("YYYY-MM-DD")', 1, 1, lambda t: _timestamp(t, _DATE, "YYYY-MM-DD"), {0: "text"}),
    "timestamp": _Func('timestamp("YYYY-MM-DD hh:mm:ss")', 1, 1, _timestamp, {0: "text"}),
    "interval": _Func('interval(n, "days")', 2, 2, _interval, {0: "int", 1: "unit"}),
}
_ALLOWED = ", ".join(sorted(_FUNCS))

_BINOPS: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv), ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod), ast.Pow: ("**", _power),
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_PREDICATES = {"isnull", "notnull", "between", "contains", "like", "startswith", "endswith"}  # these return _cond results
_BITWISE = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@"}
_BITWISE_HINTS = {"&": ": use 'and' to combine conditions", "|": ": use 'or' to combine conditions"}
_LIST_HINT = "lists are only allowed on the right of 'in', e.g. x in (1, 2)"
_REJECTED: dict[type, tuple[str, str]] = {
    ast.Subscript: ("subscript", 'use col("name") for column names that are not identifiers'),
    ast.List: ("list", _LIST_HINT), ast.Tuple: ("tuple", _LIST_HINT),
    ast.Set: ("set literal", _LIST_HINT), ast.Dict: ("dict literal", ""),
    ast.Lambda: ("lambda", ""), ast.NamedExpr: ("assignment expression", ""),
    ast.ListComp: ("list comprehension", ""), ast.SetComp: ("set comprehension", ""),
    ast.DictComp: ("dict comprehension", ""), ast.GeneratorExp: ("generator expression", ""),
    ast.JoinedStr: ("f-string", "use + to join strings"), ast.Starred: ("starred argument", ""),
}


class _Source:
    """An expression's text and where its ``ast`` nodes lie in it, for error messages."""

    def __init__(self, text: str, field: str | None) -> None:
        self.text = text
        self.source = text.lstrip()  # eval-mode ast rejects leading whitespace as an indent
        self.shift = len(text) - len(self.source)
        self.field = field
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", self.source)]

    def offset(self, lineno: int, col_bytes: int) -> int:
        """Character offset in ``text`` of an ast position (1-based line, UTF-8 byte column)."""
        start = self.line_starts[lineno - 1]
        return self.shift + start + len(self.source[start:].encode()[:col_bytes].decode(errors="ignore"))

    def start(self, node: Any) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: Any) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def quote(self, node: ast.AST) -> str:
        return shorten(self.text[self.start(node) : self.end(node)])

    def at(self, node: ast.AST) -> str:
        return f"'{self.quote(node)}' at col {self.start(node)}"

    def find(self, symbol: str, left: ast.AST, right: ast.AST) -> int:
        """Column of an operator, which ast does not record: the first ``symbol`` between operands."""
        found = self.text.find(symbol, self.end(left), self.start(right))
        return found if found >= 0 else self.start(left)


class _Compiler(_Source):
    """Checks an ``ast`` tree against the whitelist and builds a closure over a frame."""

    def __init__(self, text: str, field: str | None) -> None:
        super().__init__(text, field)
        self.columns: set[str] = set()

    def error(self, message: str) -> ExpressionError:
        return ExpressionError(message, field=self.field)

    def syntax_error(self, exc: SyntaxError) -> ExpressionError:
        col = len(self.text)  # Python reports some errors (e.g. "a +") at offset 0: the end
        if exc.offset and exc.offset > 0:
            line = min(max(exc.lineno or 1, 1), len(self.line_starts))
            col = min(self.shift + self.line_starts[line - 1] + exc.offset - 1, col)
        near = self.text[col : col + 20].split("\n")[0].strip()
        return self.error(f"syntax error at col {col} {f'near {near!r}' if near else '(end of input)'}: {exc.msg}")

    def check_depth(self, root: ast.expr) -> None:
        stack = [(root, 1)]  # iterative, so hostile nesting cannot overflow the Python stack
        while stack:
            node, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise self.error(f"expression is nested too deeply at col {self.start(node)} (limit {MAX_DEPTH})")
            stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))

    def check_name(self, name: str, node: ast.AST) -> None:
        if name.startswith("__"):
            raise self.error(f"names starting with '__' are not allowed: '{name}' at col {self.start(node)}")

    def apply(self, fn: Callable[..., Any], args: list[_Fn], node: ast.AST) -> _Fn:
        """Call ``fn`` on the args' values: now if all are constants, else at evaluate time."""
        where, field = self.at(node), self.field

        def run(values: list[Any]) -> Any:
            try:
                result = fn(*values)
                if isinstance(result, int) and result.bit_length() > _MAX_INT_BITS:  # also keeps repr() safe
                    raise OverflowError(f"integer result has more than {_MAX_INT_BITS} bits")
                return result
            except _EVAL_ERRORS as exc:
                lines = str(exc).strip().splitlines() or [type(exc).__name__]
                raise ExpressionError(f"cannot evaluate {where}: {lines[0][:200]}", field=field) from exc

        if all(isinstance(arg, _Const) for arg in args):
            return _Const(run([arg(None) for arg in args]))
        return lambda frame: run([arg(frame) for arg in args])

    def condition(self, fn: _Fn, node: ast.expr) -> _Fn:
        """``fn`` as plain bools (see _cond), skipping nodes that already yield them: dask
        recurses once per nested operation, so chains must not pile up redundant ones."""
        if isinstance(node, ast.Call):
            done = getattr(node.func, "id", None) in _PREDICATES
        else:
            done = isinstance(node, (ast.Compare, ast.BoolOp)) or isinstance(getattr(node, "op", None), ast.Not)
        return fn if done else self.apply(_cond, [fn], node)

    def combine(self, fn: Callable[[Any, Any], Any], parts: list[_Fn], node: ast.AST) -> _Fn:
        """Join ``parts`` with ``fn`` as a balanced tree, keeping the dask graph shallow."""
        while len(parts) > 1:
            pairs = [parts[i : i + 2] for i in range(0, len(parts), 2)]
            parts = [self.apply(fn, pair, node) if len(pair) == 2 else pair[0] for pair in pairs]
        return parts[0]

    def choose(self, cond: _Fn, then: _Fn, other: _Fn, node: ast.AST) -> _Fn:
        if isinstance(cond, _Const):  # a literal condition picks its branch now
            return then if cond(None) else other
        return self.apply(_select, [cond, then, other], node)

    def compile(self, node: ast.expr) -> _Fn:
        visit = getattr(self, f"visit_{type(node).__name__}", None)
        if visit is None:
            kind, hint = _REJECTED.get(type(node), (type(node).__name__, ""))
            col = self.start(node)
            raise self.error(f"{kind} '{self.quote(node)}' is not allowed at col {col}" + (f": {hint}" if hint else ""))
        return visit(node)

    def visit_Constant(self, node: ast.Constant) -> _Fn:
        if node.value is None or type(node.value) in (bool, int, float, str):
            return _Const(node.value)
        kind = type(node.value).__name__
        raise self.error(f"{kind} literal '{self.quote(node)}' is not allowed at col {self.start(node)}")

    def visit_Name(self, node: ast.Name) -> _Fn:
        self.check_name(node.id, node)
        self.columns.add(node.id)
        return operator.itemgetter(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> _Fn:
        dot = self.text.find(".", self.end(node.value), self.end(node))
        raise self.error(f"attribute access '.{node.attr}' is not allowed at col {dot}: use functions such as lower(x)")

    def visit_UnaryOp(self, node: ast.UnaryOp) -> _Fn:
        if isinstance(node.op, ast.Invert):
            raise self.error(f"operator '~' is not allowed at col {self.start(node)}: use 'not' to negate a condition")
        if isinstance(node.op, ast.Not):
            return self.apply(_not, [self.condition(self.compile(node.operand), node.operand)], node)
        return self.apply(_UNARY[type(node.op)], [self.compile(node.operand)], node)

    def visit_BinOp(self, node: ast.BinOp) -> _Fn:
        symbol = _BITWISE.get(type(node.op))
        if symbol:
            col = self.find(symbol, node.left, node.right)
            raise self.error(f"operator '{symbol}' is not allowed at col {col}{_BITWISE_HINTS.get(symbol, '')}")
        symbol, fn = _BINOPS[type(node.op)]
        left, right = self.compile(node.left), self.compile(node.right)
        if symbol == "+" and isinstance(left(None) if isinstance(left, _Const) else None, (pd.DateOffset, timedelta)):
            left, right = right, left  # interval + column: column + interval is the form every backend takes
        if symbol in ("+", "-") and isinstance(right, _Const) and isinstance(right(None), pd.DateOffset):
            fn = _add_offset if symbol == "+" else _sub_offset
        if symbol != "+" and any(isinstance(a, _Const) and isinstance(a(None), str) for a in (left, right)):
            # rules out "%" formatting and huge repetition ("x" * 10 ** 9)
            col = self.find(symbol, node.left, node.right)
            raise self.error(f"operator '{symbol}' cannot be applied to a string literal at col {col}")
        return self.apply(fn, [left, right], node)

    def visit_BoolOp(self, node: ast.BoolOp) -> _Fn:
        parts = [self.condition(self.compile(value), value) for value in node.values]
        return self.combine(operator.and_ if isinstance(node.op, ast.And) else operator.or_, parts, node)

    def visit_Compare(self, node: ast.Compare) -> _Fn:
        parts: list[_Fn] = []
        left_node, left = node.left, self.compile(node.left)
        right: _Fn
        fn: Callable[[Any, Any], Any]
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Is, ast.IsNot)):
                col = self.find("is", left_node, right_node)
                raise self.error(f"'is' is not allowed at col {col}: use isnull(x) or notnull(x)")
            if isinstance(op, (ast.In, ast.NotIn)):
                if len(node.ops) > 1:
                    raise self.error(f"'in' cannot be chained with other comparisons: {self.at(node)}")
                right, fn = self.options(right_node), _isin if isinstance(op, ast.In) else _notin
            else:
                right, fn = self.compile(right_node), _COMPARE[type(op)]
            parts.append(self.apply(fn, [left, right], node))
            left_node, left = right_node, right
        return self.combine(operator.and_, parts, node)  # a < b < c means a < b and b < c

    def options(self, node: ast.expr) -> _Const:
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error(f"'in' needs a literal list on its right, e.g. x in (1, 2), got {self.at(node)}")
        values = [self.compile(element) for element in node.elts]
        for value, element in zip(values, node.elts, strict=True):
            if not isinstance(value, _Const):
                raise self.error(f"items of an 'in' list must be literals, got {self.at(element)}")
        return _Const(tuple(value(None) for value in values))

    def visit_IfExp(self, node: ast.IfExp) -> _Fn:
        test = self.condition(self.compile(node.test), node.test)
        return self.choose(test, self.compile(node.body), self.compile(node.orelse), node)

    def visit_Call(self, node: ast.Call) -> _Fn:
        if not isinstance(node.func, ast.Name):
            self.compile(node.func)  # rejects attribute access, lambdas... with their own message
            raise self.error(f"only whitelisted functions can be called, got {self.at(node)}")
        name = node.func.id
        self.check_name(name, node.func)
        spec = _FUNCS.get(name)
        if spec is None:
            col = self.start(node)
            raise self.error(f"function call '{name}(...)' is not allowed at col {col}: allowed functions are: "
                             + _ALLOWED)
        if node.keywords:
            keyword, col = node.keywords[0], self.start(node.keywords[0])
            label = f"'{keyword.arg}='" if keyword.arg else "'**'"
            raise self.error(f"keyword argument {label} is not allowed at col {col}: arguments are positional only")
        args = [self.compile(arg) for arg in node.args]
        self.check_args(name, spec, args, node)
        if spec.impl is not None:
            return self.apply(spec.impl, args, node)
        if name == "coalesce":
            return self.combine(_coalesce, args, node)  # associative, so it may be balanced
        if name == "col":
            self.columns.add(args[0](None))
            return operator.itemgetter(args[0](None))
        result = args[-1]  # case(): fold from the default backwards so the first true condition wins
        for index in range(len(args) - 3, -1, -2):
            result = self.choose(self.condition(args[index], node.args[index]), args[index + 1], result, node)
        return result

    def check_args(self, name: str, spec: _Func, args: list[_Fn], node: ast.Call) -> None:
        count, low, high = len(args), spec.min_args, spec.max_args
        if count < low or (high is not None and count > high) or (name == "case" and count % 2 == 0):
            expected = f"{low}" if low == high else f"{low} to {high}" if high else f"{low} or more"
            if name == "case":
                expected = f"condition/value pairs then a default, 3 to {high} in all"
            col = self.start(node)
            raise self.error(f"wrong number of arguments for {name}() at col {col}: expected {expected}, got {count}; "
                             f"usage: {spec.usage}")
        for index, kind in spec.literals.items():
            if index < count:
                description, accepts = _LITERALS[kind]
                arg, arg_node = args[index], node.args[index]
                if not (isinstance(arg, _Const) and accepts(arg(None))):
                    got = shorten(repr(arg(None))) if isinstance(arg, _Const) else f"'{self.quote(arg_node)}'"
                    col = self.start(arg_node)
                    raise self.error(f"argument {index + 1} of {name}() must be {description}, got {got} at col {col}")


def parse_expression(text: str, *, field: str | None = None) -> Expression:
    """Parse and validate ``text``; raises ExpressionError carrying ``field`` for anything not whitelisted."""
    if not isinstance(text, str):
        raise ExpressionError(f"expression must be a string, got {type(text).__name__}", field=field)
    if not text.strip():
        raise ExpressionError("expression is empty", field=field)
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression is too long: {len(text)} characters, the limit is {MAX_LENGTH}", field=field)
    for index, char in enumerate(text):
        if char not in "\t\n\r" and unicodedata.category(char) == "Cc":
            raise ExpressionError(f"control character U+{ord(char):04X} is not allowed at col {index}", field=field)
    compiler = _Compiler(text, field)
    try:
        tree = ast.parse(compiler.source, mode="eval")
    except SyntaxError as exc:
        raise compiler.syntax_error(exc) from None
    except (RecursionError, MemoryError):
        raise ExpressionError("expression is nested too deeply", field=field) from None
    compiler.check_depth(tree.body)
    fn = compiler.compile(tree.body)
    return Expression(text, frozenset(compiler.columns), fn, field)
