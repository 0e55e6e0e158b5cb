"""Static kinds: what an expression yields over columns of known kinds, checked before any work.

Kinds are those of :data:`jobs.sources.Schema` (numeric, string, datetime, bool, other,
unknown). The parser in :mod:`jobs.expr` has already whitelisted every node, so this walk
only decides kinds and refuses the ones that cannot meet, quoting the part and its column.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from jobs.errors import TypeMismatch
from jobs.expr import _BINOPS, _TIMESTAMP
from jobs.expr import _Source as SourceText


def infer_kind(text: str, field: str | None, schema: Mapping[str, str]) -> str:
    """The kind of what expression ``text`` yields where columns have ``schema``'s kinds."""
    checker = _KindChecker(text, field, schema)
    kind = checker.kind(ast.parse(checker.source, mode="eval").body)
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
    "lower": ("string", "string"), "upper": ("string", "string"), "substr": ("string", "string"),
    "contains": ("string", "bool"), "like": ("string", "bool"), "startswith": ("string", "bool"), "endswith": ("string", "bool"),
    "length": ("string", "numeric"),
    "year": ("datetime", "numeric"), "month": ("datetime", "numeric"), "day": ("datetime", "numeric"),
    "date": (None, "datetime"), "timestamp": (None, "datetime"), "interval": (None, _DURATION),
}


def kinds_compatible(left: str, right: str) -> bool:
    """Whether values of kinds ``left`` and ``right`` compare, join or share a column.

    Numbers and bools mix; any other pair must be equal. A loose kind ("unknown",
    "other") is compatible with everything, since the schema cannot tell.
    """
    return left in _LOOSE or right in _LOOSE or left == right or {left, right} <= _NUMBER


def _accepts(needed: str, kind: str) -> bool:
    return kind in _LOOSE or kind == needed or (needed == "numeric" and kind == "bool")


def _literal(node: ast.expr) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _is_date_text(node: ast.expr, kind: str, other: str) -> bool:
    """A date-shaped string literal against a datetime: pandas parses it to compare."""
    return (kind, other) == ("string", "datetime") and isinstance(node, ast.Constant) and bool(
        re.fullmatch(_TIMESTAMP, node.value, flags=re.ASCII))


class _KindChecker(SourceText):
    """Infers the kind of each node of a parsed expression, refusing kinds that cannot meet.

    The tree has passed :class:`_Compiler`, so every node and call here is whitelisted.
    """

    def __init__(self, text: str, field: str | None, schema: Mapping[str, str]) -> None:
        super().__init__(text, field)
        self.schema = schema

    def mismatch(self, message: str) -> TypeMismatch:
        return TypeMismatch(message, field=self.field)

    def show(self, node: ast.expr, kind: str) -> str:
        """A part and its kind for a message: a literal as written, anything else quoted."""
        part = self.quote(node) if isinstance(node, ast.Constant) else f"'{self.quote(node)}'"
        return f"{part} ({kind})"

    def kind(self, node: ast.expr) -> str:
        kind: str = getattr(self, f"kind_{type(node).__name__}")(node)
        return kind

    def condition(self, node: ast.expr, where: str) -> None:
        kind = self.kind(node)
        if kind != "bool" and kind not in _LOOSE:
            got = f"{self.show(node, kind)} at col {self.start(node)}"
            raise self.mismatch(f"{where} needs a condition (bool), got {got}")

    def comparable(
        self, left: ast.expr, left_kind: str, right: ast.expr, right_kind: str, *, dates_as_text: bool = True
    ) -> None:
        """Refuse comparing ``left`` with ``right``, unless their kinds are compatible or, where
        ``dates_as_text``, one is a date-shaped string literal the other's datetimes parse."""
        if kinds_compatible(left_kind, right_kind) or dates_as_text and (
                _is_date_text(left, left_kind, right_kind) or _is_date_text(right, right_kind, left_kind)):
            return
        hint = ': write dates as date("YYYY-MM-DD")' if {left_kind, right_kind} == {"datetime", "string"} else ""
        raise self.mismatch(f"cannot compare {self.show(left, left_kind)} with {self.show(right, right_kind)} "
                            f"at col {self.start(left)}{hint}")

    def common(self, nodes: list[ast.expr], where: str) -> str:
        """The kind of a value taken from any of ``nodes`` (branches, fallbacks); they must agree."""
        kinds = [self.kind(node) for node in nodes]
        known = [(node, kind) for node, kind in zip(nodes, kinds, strict=True) if kind not in _LOOSE]
        for node, kind in known[1:]:
            if not kinds_compatible(known[0][1], kind):
                raise self.mismatch(f"cannot mix {self.show(*known[0])} with {self.show(node, kind)} in {where} "
                                    f"at col {self.start(node)}")
        if not known or any(kind in ("unknown", "other") for kind in kinds):
            return "null" if set(kinds) == {"null"} else "unknown"
        return known[0][1] if len({kind for _, kind in known}) == 1 else "numeric"  # numbers mixed with bools

    def kind_Constant(self, node: ast.Constant) -> str:
        if node.value is None:
            return "null"
        if isinstance(node.value, bool):
            return "bool"
        return "string" if isinstance(node.value, str) else "numeric"

    def kind_Name(self, node: ast.Name) -> str:
        return self.schema.get(node.id, "unknown")

    def kind_UnaryOp(self, node: ast.UnaryOp) -> str:
        if isinstance(node.op, ast.Not):
            self.condition(node.operand, "'not'")
            return "bool"
        kind = self.kind(node.operand)
        if kind in _LOOSE or kind == "bool":  # numpy negates a bool column to a bool column
            return "unknown"
        if kind in ("numeric", _DURATION):
            return kind
        symbol = "-" if isinstance(node.op, ast.USub) else "+"
        raise self.mismatch(f"cannot apply '{symbol}' to {self.show(node.operand, kind)} at col {self.start(node)}")

    def kind_BinOp(self, node: ast.BinOp) -> str:
        symbol = _BINOPS[type(node.op)][0]
        left, right = self.kind(node.left), self.kind(node.right)
        if left in _LOOSE or right in _LOOSE or left == right == "bool":
            return "unknown"  # numpy keeps bool + bool a bool, and refuses bool - bool
        if left in _NUMBER and right in _NUMBER:
            return "numeric"
        result = _MIXED_ARITHMETIC.get((symbol, *("numeric" if k == "bool" else k for k in (left, right))))
        if result is None:
            raise self.mismatch(f"cannot apply '{symbol}' to {self.show(node.left, left)} and "
                                f"{self.show(node.right, right)} at col {self.start(node)}")
        return result

    def kind_BoolOp(self, node: ast.BoolOp) -> str:
        for value in node.values:
            self.condition(value, "'and'" if isinstance(node.op, ast.And) else "'or'")
        return "bool"

    def kind_Compare(self, node: ast.Compare) -> str:
        left_node, left = node.left, self.kind(node.left)
        for right_node in node.comparators:
            if isinstance(right_node, (ast.List, ast.Tuple)):  # after 'in', never chained
                for item in right_node.elts:  # isin() does not parse text: a date in it never matches
                    self.comparable(node.left, left, item, self.kind(item), dates_as_text=False)
                continue
            right = self.kind(right_node)
            self.comparable(left_node, left, right_node, right)
            left_node, left = right_node, right
        return "bool"

    def kind_IfExp(self, node: ast.IfExp) -> str:
        self.condition(node.test, "'if'")
        return self.common([node.body, node.orelse], "'if ... else'")

    def kind_Call(self, node: ast.Call) -> str:
        name, args = getattr(node.func, "id", ""), node.args
        if name == "col":
            return self.schema.get(_literal(args[0]), "unknown")
        if name == "case":
            for test in args[:-1:2]:
                self.condition(test, "case()")
            return self.common([*args[1::2], args[-1]], "case()")
        if name in ("coalesce", "fillna"):
            return self.common(list(args), f"{name}()")
        kinds = [self.kind(arg) for arg in args]
        if name == "between":
            for bound, kind in zip(args[1:], kinds[1:], strict=True):
                self.comparable(args[0], kinds[0], bound, kind)
            return "bool"
        if name == "cast":  # any kind may be cast: a bad value fails on the workers, naming it
            return _CAST_KINDS.get(_literal(args[1]), "unknown")
        if name == "abs" and kinds[0] in (_DURATION, "unknown", "other"):
            return _DURATION if kinds[0] == _DURATION else "unknown"  # durations stay durations
        needed, result = _SIGNATURES.get(name, (None, "unknown"))  # a function without one checks nothing
        if needed is not None and not _accepts(needed, kinds[0]):
            raise self.mismatch(f"argument 1 of {name}() must be of kind {needed}, got {self.show(args[0], kinds[0])} "
                                f"at col {self.start(args[0])}")
        return result
