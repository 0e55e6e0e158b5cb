"""Whitelisted expression language for job specs: user text → the IR of :mod:`jobs.ir`.

User text is parsed with :mod:`ast` and every node is checked against a whitelist;
nothing is ever handed to ``eval`` or ``exec``. The result is an :class:`Expression`
holding a small typed tree, parsed once: :meth:`Expression.infer_kind` works out from
it, before any data is read, the kind of value the expression yields (:mod:`jobs.kinds`),
and each engine lowers the same tree — :mod:`jobs.lower_pandas` for the Dask engine
(pandas, dask or cudf frames), :mod:`jobs.lower_polars` for Polars.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import pandas as pd

from spillway.jobs import ir
from spillway.jobs.regex_functions import MAX_PATTERN, valid_pattern, valid_replacement
from spillway.jobs.time_functions import valid_zone
from spillway.jobs.errors import ExpressionError, UnknownColumn
from spillway.jobs.decimal_cast import MAX_PRECISION, decimal_type
from spillway.jobs.lower_pandas import evaluate, fold

MAX_LENGTH = 2000
MAX_DEPTH = 32  # dask recurses per nested operation; this keeps deep graphs well inside its limit
#: The type names ``cast(x, "...")`` takes.
CAST_TYPES = ("int64", "int32", "float64", "float32", "bool", "datetime64[ns]", "string")
#: What try_cast converts to: numbers, from text or other numbers, with a null where cast would fail.
TRY_CAST_TYPES = ("int64", "int32", "float64", "float32")
_CALENDAR_UNITS = ("month", "year")  # variable length, so pandas.DateOffset; the rest are Timedeltas
_UNITS = tuple(u + s for u in ("second", "minute", "hour", "day", "week", *_CALENDAR_UNITS) for s in ("", "s"))

#: The units of ``date_trunc`` and ``date_diff``.
DATE_PARTS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")
#: ``strftime`` format codes: numeric fields only, so output never depends on the locale.
FORMAT_CODES = "YmdHMSjy%"
_FORMAT = re.compile(f"(?:%[{FORMAT_CODES}]|[^%])*")
MAX_PAD = 10_000

_DATE = r"\d{4}-\d\d-\d\d"
TIMESTAMP_PATTERN = _DATE + r"([ T]\d\d:\d\d(:\d\d(\.\d{1,9})?)?)?"


@dataclass(frozen=True)
class Expression:
    """A validated expression: its text, the columns it reads and its IR ``node``."""

    text: str
    columns: frozenset[str]
    node: ir.Node = dataclass_field(repr=False, compare=False)
    field: str | None = dataclass_field(default=None, repr=False, compare=False)

    def evaluate(self, frame: Any) -> Any:
        """Evaluate against a pandas, dask or cudf DataFrame; returns a Series-like or a scalar."""
        missing = sorted(self.columns - set(frame.columns))
        if missing:
            names = ", ".join(map(repr, missing))
            message = f"expression '{shorten(self.text)}' reads unknown column(s): {names}"
            raise UnknownColumn(message, field=self.field)
        return evaluate(self.node, frame, self.text, self.field)

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
        from spillway.jobs.kinds import infer_kind  # jobs.kinds builds on this module's text positions

        return infer_kind(self, schema)


def shorten(text: str, limit: int = 40) -> str:
    """``text`` on one line, cut to ``limit`` characters for an error message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _timestamp(text: str, pattern: str = TIMESTAMP_PATTERN, shape: str = "YYYY-MM-DD hh:mm:ss") -> pd.Timestamp:
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


@dataclass(frozen=True)
class _Func:
    usage: str
    min_args: int
    max_args: int | None  # None: any number
    literals: dict[int, str] = dataclass_field(default_factory=dict)  # arg index -> _LITERALS key


_LITERALS: dict[str, tuple[str, Any]] = {
    "text": ("a string literal", lambda v: isinstance(v, str)),
    "pattern": ("a LIKE pattern literal ('%' any run of characters, '_' one character)", lambda v: isinstance(v, str) and len(v) <= 200),
    "int": ("an integer literal", lambda v: type(v) is int),  # not bool
    "count": ("a non-negative integer literal", lambda v: type(v) is int and v >= 0),
    # A column or expression, or (a literal) a non-negative integer: substr's start and length.
    "count_or_column": ("a non-negative integer literal or a numeric expression", lambda v: type(v) is int and v >= 0),
    "dtype": ("one of " + ", ".join(map(repr, CAST_TYPES)) + f", or 'decimal(p, s)' (p from 1 to {MAX_PRECISION}, s from 0 to p)",
              lambda v: isinstance(v, str) and (v in CAST_TYPES or decimal_type(v) is not None)),
    "number_type": ("one of " + ", ".join(map(repr, TRY_CAST_TYPES)), lambda v: isinstance(v, str) and v in TRY_CAST_TYPES),
    "unit": ("one of " + ", ".join(map(repr, _UNITS)), lambda v: isinstance(v, str) and v in _UNITS),
    "part": ("one of " + ", ".join(map(repr, DATE_PARTS)), lambda v: isinstance(v, str) and v in DATE_PARTS),
    "format": (f"a format literal of %-codes {', '.join('%' + c for c in FORMAT_CODES)} and plain characters",
               lambda v: isinstance(v, str) and len(v) <= 200 and _FORMAT.fullmatch(v) is not None),
    "needle": ("a non-empty string literal", lambda v: isinstance(v, str) and 0 < len(v) <= 200),
    "index": ("an integer literal of 1 or more (parts count from 1)", lambda v: type(v) is int and v >= 1),
    "width": (f"an integer literal from 0 to {MAX_PAD}", lambda v: type(v) is int and 0 <= v <= MAX_PAD),
    "char": ("a one-character string literal", lambda v: isinstance(v, str) and len(v) == 1),
    "regex": (f"a regular expression literal of at most {MAX_PATTERN} characters in Rust's regex syntax (no look-around, "
              "no back-references)", valid_pattern),
    "group": ("an integer literal from 0 (the whole match) to 99", lambda v: type(v) is int and 0 <= v <= 99),
    "replacement": (f"a string literal of at most {MAX_PATTERN} characters ($1 or ${{name}} name the groups, $$ is a dollar)",
                    valid_replacement),
    "flags": ("'g' (every match; without it the first)", lambda v: v == "g"),
    "zone": ("a time zone literal of the IANA database, such as 'UTC' or 'Europe/Paris'", valid_zone),
}
_STR = {1: "text"}
#: Literal kinds whose argument may also be an expression (checked as a literal only when it is one).
_EXPRESSIONS_ALLOWED = frozenset({"count_or_column"})
_FUNCS: dict[str, _Func] = {
    "col": _Func('col("column name")', 1, 1, {0: "text"}),
    "case": _Func("case(cond1, value1, cond2, value2, ..., default)", 3, 2 * MAX_DEPTH + 1),
    "isnull": _Func("isnull(x)", 1, 1),
    "notnull": _Func("notnull(x)", 1, 1),
    "fillna": _Func("fillna(x, value)", 2, 2),
    "coalesce": _Func("coalesce(x, y, ...)", 2, None),
    "abs": _Func("abs(x)", 1, 1),
    "round": _Func("round(x[, ndigits])", 1, 2, {1: "int"}),
    "floor": _Func("floor(x)", 1, 1),
    "ceil": _Func("ceil(x)", 1, 1),
    "sign": _Func("sign(x)", 1, 1),
    "sqrt": _Func("sqrt(x)", 1, 1),
    "exp": _Func("exp(x)", 1, 1),
    "ln": _Func("ln(x)", 1, 1),
    "pow": _Func("pow(x, y)", 2, 2),
    "safe_divide": _Func("safe_divide(x, y)", 2, 2),
    "divide": _Func("divide(x, y)", 2, 2),
    "greatest": _Func("greatest(x, y, ...)", 2, None),
    "least": _Func("least(x, y, ...)", 2, None),
    "cast": _Func('cast(x, "dtype")', 2, 2, {1: "dtype"}),
    "try_cast": _Func('try_cast(x, "int64" | "int32" | "float64" | "float32")', 2, 2, {1: "number_type"}),
    "between": _Func("between(x, low, high)", 3, 3),
    "lower": _Func("lower(s)", 1, 1),
    "upper": _Func("upper(s)", 1, 1),
    "contains": _Func('contains(s, "text")', 2, 2, _STR),
    "like": _Func('like(s, "pattern")', 2, 2, {1: "pattern"}),
    "startswith": _Func('startswith(s, "text")', 2, 2, _STR),
    "endswith": _Func('endswith(s, "text")', 2, 2, _STR),
    "substr": _Func("substr(s, start[, length])", 2, 3, {1: "count_or_column", 2: "count_or_column"}),
    "length": _Func("length(s)", 1, 1),
    "year": _Func("year(d)", 1, 1),
    "month": _Func("month(d)", 1, 1),
    "day": _Func("day(d)", 1, 1),
    "date": _Func('date("YYYY-MM-DD")', 1, 1, {0: "text"}),
    "timestamp": _Func('timestamp("YYYY-MM-DD hh:mm:ss")', 1, 1, {0: "text"}),
    "interval": _Func('interval(n, "days")', 2, 2, {0: "int", 1: "unit"}),
    "date_trunc": _Func('date_trunc("unit", d)', 2, 2, {0: "part"}),
    "date_diff": _Func('date_diff("unit", start, end)', 3, 3, {0: "part"}),
    "strftime": _Func('strftime(d, "%Y-%m-%d")', 2, 2, {1: "format"}),
    "strptime": _Func('strptime(s, "%Y-%m-%d")', 2, 2, {1: "format"}),
    "convert_tz": _Func('convert_tz(d, "from zone", "to zone")', 3, 3, {1: "zone", 2: "zone"}),
    "day_of_week": _Func("day_of_week(d)", 1, 1),
    "day_of_year": _Func("day_of_year(d)", 1, 1),
    "quarter": _Func("quarter(d)", 1, 1),
    "week": _Func("week(d)", 1, 1),
    "split_part": _Func('split_part(s, "delimiter", n)', 3, 3, {1: "needle", 2: "index"}),
    "strpos": _Func('strpos(s, "text")', 2, 2, {1: "needle"}),
    "replace": _Func('replace(s, "old", "new")', 3, 3, {1: "needle", 2: "text"}),
    "trim": _Func("trim(s)", 1, 1),
    "ltrim": _Func("ltrim(s)", 1, 1),
    "rtrim": _Func("rtrim(s)", 1, 1),
    "lpad": _Func('lpad(s, n[, "c"])', 2, 3, {1: "width", 2: "char"}),
    "rpad": _Func('rpad(s, n[, "c"])', 2, 3, {1: "width", 2: "char"}),
    "concat": _Func("concat(s1, s2, ...)", 2, None),
    "regexp_like": _Func('regexp_like(s, "pattern")', 2, 2, {1: "regex"}),
    "regexp_extract": _Func('regexp_extract(s, "pattern"[, group])', 2, 3, {1: "regex", 2: "group"}),
    "regexp_replace": _Func('regexp_replace(s, "pattern", "replacement"[, "g"])', 3, 4, {1: "regex", 2: "replacement", 3: "flags"}),
}
#: Functions that build a literal from literal arguments, evaluated by the parser.
_CONSTRUCTORS: dict[str, Any] = {
    "date": lambda t: _timestamp(t, _DATE, "YYYY-MM-DD"),
    "timestamp": _timestamp,
    "interval": _interval,
}
_ALLOWED = ", ".join(sorted(_FUNCS))

_BINOPS: dict[type, ir.BinarySymbol] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
}
_UNARY: dict[type, str] = {ast.USub: "-", ast.UAdd: "+"}
_COMPARE: dict[type, ir.CompareSymbol] = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
}
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


class _Parser(_Source):
    """Checks an ``ast`` tree against the whitelist and builds its IR, folding constants."""

    def __init__(self, text: str, field: str | None) -> None:
        super().__init__(text, field)

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

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.start(node), self.end(node)

    def fold(self, node: ir.Node) -> ir.Node:
        return fold(node, self.text, self.field)

    def chain(self, op: Any, parts: list[ir.Node], node: ast.AST) -> ir.Node:
        return parts[0] if len(parts) == 1 else self.fold(ir.Logical(*self.span(node), op, tuple(parts)))

    def parse(self, node: ast.expr) -> ir.Node:
        visit = getattr(self, f"visit_{type(node).__name__}", None)
        if visit is None:
            kind, hint = _REJECTED.get(type(node), (type(node).__name__, ""))
            col = self.start(node)
            raise self.error(f"{kind} '{self.quote(node)}' is not allowed at col {col}" + (f": {hint}" if hint else ""))
        result: ir.Node = visit(node)
        return result

    def visit_Constant(self, node: ast.Constant) -> ir.Node:
        if node.value is None or type(node.value) in (bool, int, float, str):
            return ir.Lit(*self.span(node), node.value)
        kind = type(node.value).__name__
        raise self.error(f"{kind} literal '{self.quote(node)}' is not allowed at col {self.start(node)}")

    def visit_Name(self, node: ast.Name) -> ir.Node:
        self.check_name(node.id, node)
        return ir.Col(*self.span(node), node.id)

    def visit_Attribute(self, node: ast.Attribute) -> ir.Node:
        dot = self.text.find(".", self.end(node.value), self.end(node))
        raise self.error(f"attribute access '.{node.attr}' is not allowed at col {dot}: use functions such as lower(x)")

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ir.Node:
        if isinstance(node.op, ast.Invert):
            raise self.error(f"operator '~' is not allowed at col {self.start(node)}: use 'not' to negate a condition")
        operand = self.parse(node.operand)
        if isinstance(node.op, ast.Not):
            return self.fold(ir.Not(*self.span(node), operand))
        return self.fold(ir.Unary(*self.span(node), _UNARY[type(node.op)], operand))  # type: ignore[arg-type]

    def visit_BinOp(self, node: ast.BinOp) -> ir.Node:
        symbol = _BITWISE.get(type(node.op))
        if symbol:
            col = self.find(symbol, node.left, node.right)
            raise self.error(f"operator '{symbol}' is not allowed at col {col}{_BITWISE_HINTS.get(symbol, '')}")
        op = _BINOPS[type(node.op)]
        left, right = self.parse(node.left), self.parse(node.right)
        if op != "+" and any(isinstance(side, ir.Lit) and isinstance(side.value, str) for side in (left, right)):
            # rules out "%" formatting and huge repetition ("x" * 10 ** 9)
            col = self.find(op, node.left, node.right)
            raise self.error(f"operator '{op}' cannot be applied to a string literal at col {col}")
        return self.fold(ir.Binary(*self.span(node), op, left, right))

    def visit_BoolOp(self, node: ast.BoolOp) -> ir.Node:
        parts = tuple(self.parse(value) for value in node.values)
        return self.fold(ir.Logical(*self.span(node), "and" if isinstance(node.op, ast.And) else "or", parts))

    def visit_Compare(self, node: ast.Compare) -> ir.Node:
        parts: list[ir.Node] = []
        left_node, left = node.left, self.parse(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Is, ast.IsNot)):
                col = self.find("is", left_node, right_node)
                raise self.error(f"'is' is not allowed at col {col}: use isnull(x) or notnull(x)")
            if isinstance(op, (ast.In, ast.NotIn)):
                if len(node.ops) > 1:
                    raise self.error(f"'in' cannot be chained with other comparisons: {self.at(node)}")
                options = self.options(right_node)
                parts.append(self.fold(ir.InList(*self.span(node), left, options, isinstance(op, ast.NotIn))))
                continue
            right = self.parse(right_node)
            parts.append(self.fold(ir.Compare(*self.span(node), _COMPARE[type(op)], left, right)))
            left_node, left = right_node, right
        return self.chain("and", parts, node)  # a < b < c means a < b and b < c

    def options(self, node: ast.expr) -> tuple[ir.Lit, ...]:
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error(f"'in' needs a literal list on its right, e.g. x in (1, 2), got {self.at(node)}")
        values = [self.parse(element) for element in node.elts]
        for value, element in zip(values, node.elts, strict=True):
            if not isinstance(value, ir.Lit):
                raise self.error(f"items of an 'in' list must be literals, got {self.at(element)}")
        return tuple(value for value in values if isinstance(value, ir.Lit))

    def visit_IfExp(self, node: ast.IfExp) -> ir.Node:
        cond, then, other = self.parse(node.test), self.parse(node.body), self.parse(node.orelse)
        return self.fold(ir.IfElse(*self.span(node), cond, then, other))

    def visit_Call(self, node: ast.Call) -> ir.Node:
        if not isinstance(node.func, ast.Name):
            self.parse(node.func)  # rejects attribute access, lambdas... with their own message
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
        args = [self.parse(arg) for arg in node.args]
        self.check_args(name, spec, args, node)
        if name == "col":
            return ir.Col(*self.span(node), args[0].value)  # type: ignore[attr-defined]  # checked: a text literal
        if name == "pow":  # x ** y, with its rules (integer overflow, float exponents) on both engines
            return self.fold(ir.Binary(*self.span(node), "**", args[0], args[1]))
        if name in _CONSTRUCTORS:
            try:
                value = _CONSTRUCTORS[name](*(arg.value for arg in args))  # type: ignore[attr-defined]
            except (ArithmeticError, ValueError) as exc:
                raise self.error(f"cannot evaluate {self.at(node)}: {str(exc)[:200]}") from exc
            return ir.Lit(*self.span(node), value)
        return self.fold(ir.Call(*self.span(node), name, tuple(args)))

    def check_args(self, name: str, spec: _Func, args: list[ir.Node], node: ast.Call) -> None:
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
                if kind in _EXPRESSIONS_ALLOWED and not isinstance(arg, ir.Lit):
                    continue  # its kind is checked with the others'
                if not (isinstance(arg, ir.Lit) and accepts(arg.value)):
                    got = shorten(repr(arg.value)) if isinstance(arg, ir.Lit) else f"'{self.quote(arg_node)}'"
                    col = self.start(arg_node)
                    raise self.error(f"argument {index + 1} of {name}() must be {description}, got {got} at col {col}")


def parse_expression(text: str, *, field: str | None = None) -> Expression:
    """Parse and validate ``text`` into its IR; raises ExpressionError carrying ``field`` for anything not whitelisted."""
    if not isinstance(text, str):
        raise ExpressionError(f"expression must be a string, got {type(text).__name__}", field=field)
    if not text.strip():
        raise ExpressionError("expression is empty", field=field)
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression is too long: {len(text)} characters, the limit is {MAX_LENGTH}", field=field)
    for index, char in enumerate(text):
        if char not in "\t\n\r" and unicodedata.category(char) == "Cc":
            raise ExpressionError(f"control character U+{ord(char):04X} is not allowed at col {index}", field=field)
    parser = _Parser(text, field)
    try:
        tree = ast.parse(parser.source, mode="eval")
    except SyntaxError as exc:
        raise parser.syntax_error(exc) from None
    except (RecursionError, MemoryError):
        raise ExpressionError("expression is nested too deeply", field=field) from None
    parser.check_depth(tree.body)
    node = parser.parse(tree.body)
    return Expression(text, ir.columns_of(node), node, field)
