"""Static kinds: what an expression yields over columns of known kinds, checked before any work.

Kinds are those of :data:`jobs.sources.Schema` (numeric, string, datetime, bool, other,
unknown). The parser in :mod:`jobs.expr` has already whitelisted every node and built the IR
(:mod:`jobs.ir`); this walk over it only decides kinds and refuses the ones that cannot
meet, quoting the part (from the node's span) and its column.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

import pandas as pd

from spillway.jobs import ir
from spillway.jobs.decimal_cast import decimal_type
from spillway.jobs.errors import TypeMismatch
from spillway.jobs.expr import TIMESTAMP_PATTERN

if TYPE_CHECKING:
    from spillway.jobs.expr import Expression


def infer_kind(expression: Expression, schema: Mapping[str, str]) -> str:
    """The kind of what ``expression`` yields where columns have ``schema``'s kinds."""
    checker = _KindChecker(expression.text, expression.field, schema)
    kind = checker.kind(expression.node)
    # A file's duration column is "other", which numeric aggregations refuse; a
    # computed one stays unknown, so that a sum of datetime differences passes.
    return "unknown" if kind in ("null", _DURATION) else kind


_NUMBER = frozenset({"numeric", "bool"})  # numpy and pandas compute with bools as 0 and 1
# Never a reason to reject: "other" covers durations and all-null columns, "null" is None.
_LOOSE = frozenset({"unknown", "other", "null"})
_DURATION = "duration"  # interval() and datetime differences; "unknown" outside this module
_CAST_KINDS = {"int64": "numeric", "int32": "numeric", "float64": "numeric", "float32": "numeric", "bool": "bool",
               "datetime64[ns]": "datetime", "string": "string"}
# (operator, left kind, right kind) → result kind, beyond number ⊕ number; bools count as numeric.
_MIXED_ARITHMETIC: dict[tuple[str, str, str], str] = {
    ("+", "string", "string"): "string",
    ("+", "datetime", _DURATION): "datetime", ("+", _DURATION, "datetime"): "datetime",
    ("-", "datetime", _DURATION): "datetime", ("-", "datetime", "datetime"): _DURATION,
    ("+", _DURATION, _DURATION): _DURATION, ("-", _DURATION, _DURATION): _DURATION,
    ("*", _DURATION, "numeric"): _DURATION, ("*", "numeric", _DURATION): _DURATION,
    ("/", _DURATION, "numeric"): _DURATION, ("/", _DURATION, _DURATION): "numeric",
}
# Function → (the kind its first argument must have, the kind of its result). col, case,
# coalesce, fillna, between and cast are checked by _KindChecker.kind_Call itself.
_SIGNATURES: dict[str, tuple[str | None, str]] = {
    "isnull": (None, "bool"), "notnull": (None, "bool"), "abs": ("numeric", "numeric"), "round": ("numeric", "numeric"),
    "floor": ("numeric", "numeric"), "ceil": ("numeric", "numeric"), "sign": ("numeric", "numeric"),
    "sqrt": ("numeric", "numeric"), "exp": ("numeric", "numeric"), "ln": ("numeric", "numeric"),
    "lower": ("string", "string"), "upper": ("string", "string"),
    "contains": ("string", "bool"), "like": ("string", "bool"), "startswith": ("string", "bool"), "endswith": ("string", "bool"),
    "length": ("string", "numeric"),
    "year": ("datetime", "numeric"), "month": ("datetime", "numeric"), "day": ("datetime", "numeric"),
    "date": (None, "datetime"), "timestamp": (None, "datetime"), "interval": (None, _DURATION),
    "strftime": ("datetime", "string"), "day_of_week": ("datetime", "numeric"), "day_of_year": ("datetime", "numeric"),
    "quarter": ("datetime", "numeric"), "week": ("datetime", "numeric"),
    "split_part": ("string", "string"), "strpos": ("string", "numeric"), "replace": ("string", "string"),
    "trim": ("string", "string"), "ltrim": ("string", "string"), "rtrim": ("string", "string"),
    "lpad": ("string", "string"), "rpad": ("string", "string"),
    "strptime": ("string", "datetime"), "convert_tz": ("datetime", "datetime"),
    "regexp_like": ("string", "bool"), "regexp_extract": ("string", "string"), "regexp_replace": ("string", "string"),
}
#: try_cast reads text, numbers and bools; its result is a number.
_TRY_CAST_INPUTS = frozenset({"string", "numeric", "bool"})
# Functions whose later arguments are checked too: the kind each argument needs (None: any;
# the last one repeats), and the kind of the result.
_ARGUMENTS: dict[str, tuple[tuple[str | None, ...], str]] = {
    "date_trunc": ((None, "datetime"), "datetime"),
    "date_diff": ((None, "datetime", "datetime"), "numeric"),
    "safe_divide": (("numeric",), "numeric"), "divide": (("numeric",), "numeric"),
    "concat": (("string",), "string"),
    "substr": (("string", "numeric"), "string"),
}


def kind_of_node(node: ir.Node, text: str, schema: Mapping[str, str]) -> str:
    """The kind of one node of a checked expression (its text gives the node's spans)."""
    return _KindChecker(text, None, schema).kind(node)


def kinds_compatible(left: str, right: str) -> bool:
    """Whether values of kinds ``left`` and ``right`` compare or share a column (join keys are stricter:
    jobs.validate._check_key_pair).

    Numbers and bools mix; any other pair must be equal. A loose kind ("unknown",
    "other") is compatible with everything, since the schema cannot tell.
    """
    return left in _LOOSE or right in _LOOSE or left == right or {left, right} <= _NUMBER


def _accepts(needed: str, kind: str) -> bool:
    return kind in _LOOSE or kind == needed or (needed == "numeric" and kind == "bool")


def _is_date_text(node: ir.Node, kind: str, other: str) -> bool:
    """A date-shaped string literal against a datetime: pandas parses it to compare."""
    return (kind, other) == ("string", "datetime") and isinstance(node, ir.Lit) and bool(
        re.fullmatch(TIMESTAMP_PATTERN, node.value, flags=re.ASCII))


class _KindChecker:
    """Infers the kind of each IR node, refusing kinds that cannot meet."""

    def __init__(self, text: str, field: str | None, schema: Mapping[str, str]) -> None:
        self.text = text
        self.field = field
        self.schema = schema

    def mismatch(self, message: str) -> TypeMismatch:
        return TypeMismatch(message, field=self.field)

    def quote(self, node: ir.Node) -> str:
        part = " ".join(self.text[node.start : node.end].split())
        return part if len(part) <= 40 else part[:37] + "..."

    def show(self, node: ir.Node, kind: str) -> str:
        """A part and its kind for a message: a literal as written, anything else quoted."""
        part = self.quote(node) if self.written_literal(node) else f"'{self.quote(node)}'"
        return f"{part} ({kind})"

    def written_literal(self, node: ir.Node) -> bool:
        """Whether ``node`` is a literal as the user wrote it (not one folded from an expression)."""
        if not isinstance(node, ir.Lit):
            return False
        try:
            return isinstance(ast.parse(self.text[node.start : node.end].strip(), mode="eval").body, ast.Constant)
        except SyntaxError:
            return False

    def kind(self, node: ir.Node) -> str:
        kind: str = getattr(self, f"kind_{type(node).__name__}")(node)
        return kind

    def condition(self, node: ir.Node, where: str) -> None:
        kind = self.kind(node)
        if kind != "bool" and kind not in _LOOSE:
            got = f"{self.show(node, kind)} at col {node.start}"
            raise self.mismatch(f"{where} needs a condition (bool), got {got}")

    def comparable(self, left: ir.Node, left_kind: str, right: ir.Node, right_kind: str, *, dates_as_text: bool = True) -> None:
        """Refuse comparing ``left`` with ``right``, unless their kinds are compatible or, where
        ``dates_as_text``, one is a date-shaped string literal the other's datetimes parse."""
        if kinds_compatible(left_kind, right_kind) or dates_as_text and (
                _is_date_text(left, left_kind, right_kind) or _is_date_text(right, right_kind, left_kind)):
            return
        hint = ': write dates as date("YYYY-MM-DD")' if {left_kind, right_kind} == {"datetime", "string"} else ""
        raise self.mismatch(f"cannot compare {self.show(left, left_kind)} with {self.show(right, right_kind)} "
                            f"at col {left.start}{hint}")

    def common(self, nodes: list[ir.Node], where: str) -> str:
        """The kind of a value taken from any of ``nodes`` (branches, fallbacks); they must agree."""
        kinds = [self.kind(node) for node in nodes]
        known = [(node, kind) for node, kind in zip(nodes, kinds, strict=True) if kind not in _LOOSE]
        for node, kind in known[1:]:
            if not kinds_compatible(known[0][1], kind):
                raise self.mismatch(f"cannot mix {self.show(*known[0])} with {self.show(node, kind)} in {where} "
                                    f"at col {node.start}")
        if not known or any(kind in ("unknown", "other") for kind in kinds):
            return "null" if set(kinds) == {"null"} else "unknown"
        return known[0][1] if len({kind for _, kind in known}) == 1 else "numeric"  # numbers mixed with bools

    def kind_Lit(self, node: ir.Lit) -> str:
        value = node.value
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "bool"
        if isinstance(value, str):
            return "string"
        if isinstance(value, pd.Timestamp):
            return "datetime"
        if isinstance(value, (pd.DateOffset, timedelta)):
            return _DURATION
        return "numeric"

    def kind_Col(self, node: ir.Col) -> str:
        return self.schema.get(node.name, "unknown")

    def kind_Not(self, node: ir.Not) -> str:
        self.condition(node.operand, "'not'")
        return "bool"

    def kind_Unary(self, node: ir.Unary) -> str:
        kind = self.kind(node.operand)
        if kind in _LOOSE or kind == "bool":  # numpy negates a bool column to a bool column
            return "unknown"
        if kind in ("numeric", _DURATION):
            return kind
        raise self.mismatch(f"cannot apply '{node.op}' to {self.show(node.operand, kind)} at col {node.start}")

    def kind_Binary(self, node: ir.Binary) -> str:
        left, right = self.kind(node.left), self.kind(node.right)
        if left in _LOOSE or right in _LOOSE or left == right == "bool":
            return "unknown"  # numpy keeps bool + bool a bool, and refuses bool - bool
        if left in _NUMBER and right in _NUMBER:
            return "numeric"
        result = _MIXED_ARITHMETIC.get((node.op, *("numeric" if k == "bool" else k for k in (left, right))))
        if result is None:
            raise self.mismatch(f"cannot apply '{node.op}' to {self.show(node.left, left)} and "
                                f"{self.show(node.right, right)} at col {node.start}")
        return result

    def kind_Logical(self, node: ir.Logical) -> str:
        for part in node.parts:
            self.condition(part, f"'{node.op}'")
        return "bool"

    def kind_Compare(self, node: ir.Compare) -> str:
        self.comparable(node.left, self.kind(node.left), node.right, self.kind(node.right))
        return "bool"

    def kind_InList(self, node: ir.InList) -> str:
        kind = self.kind(node.operand)
        for option in node.options:  # isin() does not parse text: a date in it never matches
            self.comparable(node.operand, kind, option, self.kind(option), dates_as_text=False)
        return "bool"

    def kind_IfElse(self, node: ir.IfElse) -> str:
        self.condition(node.cond, "'if'")
        return self.common([node.then, node.other], "'if ... else'")

    def kind_Call(self, node: ir.Call) -> str:
        name, args = node.name, node.args
        if name == "case":
            for test in args[:-1:2]:
                self.condition(test, "case()")
            return self.common([*args[1::2], args[-1]], "case()")
        if name in ("coalesce", "fillna", "greatest", "least"):
            return self.common(list(args), f"{name}()")
        kinds = [self.kind(arg) for arg in args]
        if name == "between":
            for bound, kind in zip(args[1:], kinds[1:], strict=True):
                self.comparable(args[0], kinds[0], bound, kind)
            return "bool"
        if name == "cast":  # any kind may be cast: a bad value fails on the workers, naming it
            target = args[1].value if isinstance(args[1], ir.Lit) else None
            if decimal_type(target) is not None:  # from numbers only: Polars would cut text's extra digits off, not round them
                if kinds[0] not in ("numeric", *_LOOSE):
                    raise self.mismatch(f"cast to '{target}' takes a number, got {self.show(args[0], kinds[0])} at col {args[0].start}"
                                        "; for text, cast it to 'float64' first")
                return "numeric"
            return _CAST_KINDS.get(target, "unknown")
        if name == "try_cast":
            if kinds[0] not in _TRY_CAST_INPUTS and kinds[0] not in _LOOSE:
                raise self.mismatch(f"argument 1 of try_cast() must be text, a number or a bool, got {self.show(args[0], kinds[0])} "
                                    f"at col {args[0].start}")
            return "numeric"
        if name == "abs" and kinds[0] in (_DURATION, "unknown", "other"):
            return _DURATION if kinds[0] == _DURATION else "unknown"  # durations stay durations
        if name in _ARGUMENTS:
            wanted, result = _ARGUMENTS[name]
            for index, (arg, kind) in enumerate(zip(args, kinds, strict=True)):
                needed = wanted[min(index, len(wanted) - 1)]
                if needed is not None and not _accepts(needed, kind):
                    raise self.mismatch(f"argument {index + 1} of {name}() must be of kind {needed}, got {self.show(arg, kind)} "
                                        f"at col {arg.start}")
            return result
        needed, result = _SIGNATURES.get(name, (None, "unknown"))  # a function without one checks nothing
        if needed is not None and not _accepts(needed, kinds[0]):
            raise self.mismatch(f"argument 1 of {name}() must be of kind {needed}, got {self.show(args[0], kinds[0])} "
                                f"at col {args[0].start}")
        return result
