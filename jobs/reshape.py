"""Pivot as the steps it stands for, so both engines run it with what they already have.

A pivot is SQL's ``GROUP BY index`` with one filtered aggregate per listed value,
``agg(values) FILTER (WHERE columns = v)``: here a ``groupby`` whose aggregations read
``values if columns == v else None``, written in the expression language and parsed by its
whitelisted parser like any user expression (the values are literals the spec model checked,
column names are quoted with ``col("...")``). A sum also counts its cell's values, so that a
cell with none is null, as SQL's is, not the 0 a groupby's sum gives.
"""

from __future__ import annotations

import keyword

from spillway.jobs.spec import Aggregation, AssignStep, GroupByStep, PivotStep, PivotValue, SelectStep, Step

_COUNT = "__spillway_pivot_n"


def column_ref(name: str) -> str:
    """``name`` as the expression language reads a column: bare if an identifier, else ``col("...")``."""
    if name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__"):
        return name
    return f"col({name!r})"


def literal(value: PivotValue) -> str:
    """A spec value as an expression literal (``repr`` of a str, int, bool or finite float is one)."""
    return repr(value)


def cell_expression(step: PivotStep, value: PivotValue) -> str:
    """The value one cell aggregates: ``values`` where ``columns`` equals ``value``, else null."""
    return f"{column_ref(step.values)} if {column_ref(step.columns)} == {literal(value)} else None"


def pivot_steps(step: PivotStep) -> list[Step]:
    """The steps ``step`` stands for: a groupby, and for a sum the nulling of empty cells."""
    cells = {name: cell_expression(step, value) for name, value in step.output_columns.items()}
    aggs = {name: Aggregation(func=step.agg, expr=expr) for name, expr in cells.items()}
    if step.agg != "sum":
        return [GroupByStep(op="groupby", by=list(step.index), aggs=aggs)]
    counts = {f"{_COUNT}{i}": Aggregation(func="count", expr=expr) for i, expr in enumerate(cells.values())}
    nulled: list[Step] = [
        AssignStep(op="assign", column=name, expr=f"None if col({_COUNT + str(i)!r}) == 0 else {column_ref(name)}")
        for i, name in enumerate(cells)
    ]
    return [
        GroupByStep(op="groupby", by=list(step.index), aggs={**aggs, **counts}),
        *nulled,
        SelectStep(op="select", columns=[*step.index, *cells]),
    ]
