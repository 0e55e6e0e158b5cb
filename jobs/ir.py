"""The expression IR: what :func:`jobs.expr.parse_expression` makes of user text, once.

A small typed tree, engine-neutral: the kind checker (:mod:`jobs.kinds`) and each engine's
lowering (:mod:`jobs.lower_pandas` for the Dask engine on pandas or cuDF,
:mod:`jobs.lower_polars` for Polars) walk it; none of them reads the text again. Every
node keeps the span of text it came from, so errors can quote the part at fault.

Constants are folded by the parser: an operation whose operands are all literals is one
:class:`Lit` holding the value (a ``pd.Timestamp`` for ``date('1998-12-01') - interval(90,
'days')``), so engines only meet literals, columns and operations over columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BinarySymbol = Literal["+", "-", "*", "/", "//", "%", "**"]
CompareSymbol = Literal["==", "!=", "<", "<=", ">", ">="]

#: Functions whose result is already a condition (plain booleans, never null).
PREDICATES = frozenset({"isnull", "notnull", "between", "contains", "like", "startswith", "endswith"})


@dataclass(frozen=True)
class Node:
    """Base of every IR node: ``start`` and ``end`` are character offsets in the expression's text."""

    start: int
    end: int


@dataclass(frozen=True)
class Lit(Node):
    """A literal, or a folded constant: None, bool, int, float, str, or a pandas Timestamp,
    Timedelta or DateOffset (the last two from ``interval()``)."""

    value: Any


@dataclass(frozen=True)
class Col(Node):
    """A column, by name (``amount`` or ``col("unit price")``)."""

    name: str


@dataclass(frozen=True)
class Unary(Node):
    """``-x`` or ``+x``."""

    op: Literal["-", "+"]
    operand: Node


@dataclass(frozen=True)
class Not(Node):
    """``not cond``."""

    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    """Arithmetic (``+`` also joins strings and adds intervals to datetimes)."""

    op: BinarySymbol
    left: Node
    right: Node


@dataclass(frozen=True)
class Compare(Node):
    """One comparison; ``a < b < c`` is ``Logical("and", (a < b, b < c))``."""

    op: CompareSymbol
    left: Node
    right: Node


@dataclass(frozen=True)
class InList(Node):
    """``x in (1, 2)`` or ``x not in (...)``; the options are literals."""

    operand: Node
    options: tuple[Lit, ...]
    negated: bool


@dataclass(frozen=True)
class Logical(Node):
    """``and`` / ``or`` over two or more conditions."""

    op: Literal["and", "or"]
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class IfElse(Node):
    """``then if cond else other``."""

    cond: Node
    then: Node
    other: Node


@dataclass(frozen=True)
class Call(Node):
    """A whitelisted function, its arguments checked by the parser (count and literal kinds).

    ``case(c1, v1, ..., default)`` and ``coalesce(...)`` stay calls, so messages can name them.
    """

    name: str
    args: tuple[Node, ...]


def is_condition(node: Node) -> bool:
    """Whether ``node`` yields plain booleans already (a comparison, a predicate, a logical)."""
    if isinstance(node, Call):
        return node.name in PREDICATES
    return isinstance(node, (Compare, InList, Logical, Not))


def walk(node: Node) -> list[Node]:
    """``node`` and every node below it, parents first (iteratively: trees may be deep)."""
    found: list[Node] = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(reversed(children(current)))
    return found


def children(node: Node) -> tuple[Node, ...]:
    """The direct operands of ``node``."""
    if isinstance(node, (Unary, Not)):
        return (node.operand,)
    if isinstance(node, (Binary, Compare)):
        return (node.left, node.right)
    if isinstance(node, InList):
        return (node.operand, *node.options)
    if isinstance(node, Logical):
        return node.parts
    if isinstance(node, IfElse):
        return (node.cond, node.then, node.other)
    if isinstance(node, Call):
        return node.args
    return ()


def columns_of(node: Node) -> frozenset[str]:
    """Every column ``node`` reads."""
    return frozenset(n.name for n in walk(node) if isinstance(n, Col))


def negative_integer(node: Node) -> bool:
    """Whether ``node`` is a negative integer constant (an exponent that makes a power of integers a float)."""
    return isinstance(node, Lit) and type(node.value) is int and node.value < 0
