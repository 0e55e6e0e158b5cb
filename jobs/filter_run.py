"""Filters on the Dask engine: which may fail the job, how such a one keeps to its step's rows, and a run of the others as one mask.

Dask's optimizer merges nested filters and moves them below joins. For a filter over plain
comparisons that changes nothing but planning time, which grew with the square of a chain of
them (jobs.pipeline builds a run of them as one filter instead). For one that can fail the job
it changes the answer: ``divide(x, y)`` after ``y != 0`` met the zero divisors that filter had
removed. Such a filter stands behind :func:`kept_in_place`.
"""

from __future__ import annotations

from typing import Any

import dask.dataframe as dd

from spillway.jobs import ir
from spillway.jobs.lower_polars import INTEGER_CALLS, has_integer_arithmetic

#: Calls that fail the job on some values: a zero divisor, a text that is no date, no number.
_FAILING_CALLS = frozenset({"divide", "strptime", "cast"})


def may_fail(node: ir.Node, frame: dd.DataFrame) -> bool:
    """Whether a filter's expression can fail the job on some rows: a failing call, or integer
    arithmetic (checked for overflow) over an integer column."""
    nodes = ir.walk(node)
    if any(isinstance(n, ir.Call) and n.name in _FAILING_CALLS for n in nodes):
        return True
    integers = frozenset(name for name, dtype in frame.dtypes.items() if getattr(dtype, "kind", "?") in "iu")
    integer_calls = any(isinstance(n, ir.Call) and n.name in INTEGER_CALLS for n in nodes)  # year(ts), length(s)
    if not has_integer_arithmetic(node) or not (ir.columns_of(node) & integers or integer_calls):
        return False
    checked = [n for n in nodes if (isinstance(n, ir.Binary) and n.op in ("+", "-", "*", "**")) or (isinstance(n, ir.Unary) and n.op == "-")]
    return any(_integer(n, integers) for n in checked)


def _integer(node: ir.Node, integers: frozenset[str]) -> bool:
    """Whether ``node`` gives integers, from the frame's integer columns, integer literals and integer functions."""
    if isinstance(node, ir.Col):
        return node.name in integers
    if isinstance(node, ir.Lit):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ir.Call):
        return node.name in INTEGER_CALLS
    if isinstance(node, ir.Unary):
        return _integer(node.operand, integers)
    if isinstance(node, ir.Binary):
        return node.op in ("+", "-", "*", "**", "//", "%") and _integer(node.left, integers) and _integer(node.right, integers)
    return False


def kept_in_place(frame: dd.DataFrame) -> dd.DataFrame:
    """``frame`` behind a step dask's optimizer cannot see through (each partition as it is).

    The optimizer merges a filter with the filters before it and moves it below joins, where its
    expression meets rows those remove: a filter whose expression can fail (``divide`` by a zero
    that an earlier filter ruled out) would fail the job. Behind this, it sees its step's rows only.
    """
    return frame.map_partitions(_same, meta=frame._meta)


def _same(part: Any) -> Any:
    return part


def conjunct_groups(node: ir.Node, frame: dd.DataFrame) -> list[list[ir.Node]]:
    """A filter's condition as groups to filter by in turn: its ``and``-ed parts, a new group before each
    part after the first that can fail, so that such a part sees only the rows the parts before it keep
    (left to right, as Polars' plan evaluates them). Anything but an ``and`` of conditions is one group."""
    if not (isinstance(node, ir.Logical) and node.op == "and" and all(ir.is_condition(part) for part in node.parts)):
        return [[node]]
    groups: list[list[ir.Node]] = [[]]
    for part in node.parts:
        if groups[-1] and may_fail(part, frame):
            groups.append([])
        groups[-1].append(part)
    return groups
