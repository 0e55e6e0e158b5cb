"""Equalities of unlike types in a SQL source, written with the casts Polars needs to join on them.

Polars joins keys only of one type: ``ON s.amount = p.product_id`` with a float and an integer fails
as the job runs ("datatypes of join keys don't match"), and so do a decimal with an integer, ``uint64``
with a signed integer and timestamps of two units, where PostgreSQL and DuckDB compare them. Run
wherever the query is (:func:`jobs.sql_source.run_sql`): at submit, over empty frames of coarse kinds
(every number an int64, so only a computed key, ``k * 1.0``, differs there), and when the job runs, over
the sources' real types. Each equality of two expressions whose types (sqlglot's, over those types)
Polars would not join is compared in the type the step language's ``join`` compares such keys in
(:func:`jobs.join_key_types.join_key_type`: an integer with a float as floats, a decimal with an integer
exactly, the finer of two time units), each side not of that type cast to it; so is ``x IN (SELECT y
...)``, which Polars runs as a semi-join. Only equalities are cast: they are what Polars may make a join
of, and comparing both sides in the common type keeps their answer.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from sqlglot import exp

from spillway.jobs.join_key_types import join_key_type
from spillway.jobs.sql_types import TIME_DIGITS, polars_type, typed_copy, types_by_name

_MARK = "spillway_key_equality"


def _cast_type(dtype: pl.DataType) -> exp.DataType:
    if isinstance(dtype, pl.Decimal):
        return exp.DataType.build(f"DECIMAL({dtype.precision}, {dtype.scale})")
    if isinstance(dtype, pl.Datetime):
        return exp.DataType.build(f"TIMESTAMP({TIME_DIGITS[dtype.time_unit]})")
    return exp.DataType.build("DOUBLE")  # join_key_type's only other answer


def _compared(node: exp.Expression) -> tuple[exp.Expression, exp.Expression] | None:
    """The two sides of an equality, or of ``x IN (SELECT y ...)`` its ``x`` and ``y``; None for anything else."""
    if isinstance(node, exp.EQ):
        sides = node.this, node.expression
        return None if any(isinstance(side, (exp.Literal, exp.Null)) for side in sides) else sides
    query = node.args.get("query") if isinstance(node, exp.In) else None
    select = query.this if isinstance(query, exp.Subquery) else query
    if isinstance(select, exp.Select) and len(select.expressions) == 1:
        return node.this, select.expressions[0]
    return None


def _cast(side: exp.Expression, to: pl.DataType) -> None:
    """Replace ``side`` by its cast to ``to``; a projection keeps its output name."""
    value = side.this if isinstance(side, exp.Alias) else side
    cast = exp.cast(value.copy(), _cast_type(to))
    name = side.alias_or_name if isinstance(side, (exp.Alias, exp.Column)) else None
    if side.parent is not None and isinstance(side.parent, exp.Select) and side in side.parent.expressions and name:
        side.replace(exp.alias_(cast, name, quoted=True))
    else:
        side.replace(cast)


def _may_differ(candidates: list[exp.Expression], by_name: Mapping[str, set[pl.DataType]]) -> bool:
    """Whether an equality of ``candidates`` may compare types Polars does not join. Without typing the query: where
    each side is a column whose name has one type (:func:`jobs.sql_types.types_by_name`), by those types (21 of the 22 TPC-H queries);
    anything else may."""
    for node in candidates:
        types = []
        for side in _compared(node) or ():
            column = side.this if isinstance(side, exp.Alias) else side
            if not isinstance(column, exp.Column) or len(by_name.get(column.name, ())) != 1:
                return True  # an expression, or a name of several or unknown types: typed below
            types.extend(by_name[column.name])
        if join_key_type(*types) is not None:
            return True
    return False


def cast_unlike_keys(tree: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]]) -> bool:
    """Cast each equality (and ``IN (SELECT …)``) of ``tree``, a qualified query over ``schemas`` (table → column →
    Polars type), that compares types Polars does not join: the sides not of their common type, to it. Changed in
    place; whether it was."""
    candidates = [node for node in tree.find_all(exp.EQ, exp.In) if _compared(node) is not None]
    if not _may_differ(candidates, types_by_name(tree, schemas)):
        return False
    for number, node in enumerate(candidates):
        node.meta[_MARK] = number
    typed = typed_copy(tree, schemas)
    # By equality: each side's cast, None for a side already of the common type (cast both, and Polars 1.44 loses a
    # key column of an outer join whose ON has a condition besides the keys: "unable to find column k:f").
    casts: dict[int, list[pl.DataType | None]] = {}
    for node in typed.find_all(exp.EQ, exp.In):
        sides = _compared(node) if _MARK in node.meta else None
        types = [polars_type(side.type) for side in sides] if sides else [None, None]
        if None not in types and (to := join_key_type(*types)) is not None:
            casts[node.meta[_MARK]] = [None if dtype == to else to for dtype in types]
    for number, node in enumerate(candidates):
        for side, to in zip(_compared(node) or (), casts.get(number, ()), strict=False):
            if to is not None:
                _cast(side, to)
        node.meta.pop(_MARK, None)
    return bool(casts)


__all__ = ["cast_unlike_keys"]
