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
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from spillway.jobs.join_key_types import join_key_type
from spillway.jobs.sql_check import DIALECT

_UNITS = {"ms": 3, "us": 6, "ns": 9}
_INTEGERS = frozenset({exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT})
_FLOATS = frozenset({exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT})
_MARK = "spillway_key_equality"


def _sql_type(dtype: pl.DataType) -> str | None:
    """The SQL type sqlglot annotates a column of Polars type ``dtype`` with, where it matters to a key's type."""
    if dtype == pl.UInt64:
        return "UBIGINT"
    if dtype.is_integer():
        return "BIGINT"
    if dtype.is_float():
        return "DOUBLE"
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    if isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
        return f"TIMESTAMP({_UNITS[dtype.time_unit]})"
    return None


def _polars_type(sql_type: exp.DataType | None) -> pl.DataType | None:
    """The Polars type of an annotated expression, for the types :func:`_sql_type` writes; None for others."""
    if sql_type is None:
        return None
    if sql_type.sql() == "UBIGINT":  # no such type in PostgreSQL's dialect: sqlglot keeps it user-defined
        return pl.UInt64()
    if sql_type.this in _INTEGERS:
        return pl.Int64()
    if sql_type.this in _FLOATS:
        return pl.Float64()
    sizes = [int(size.name) for size in sql_type.expressions if size.name.isdigit()]
    if sql_type.this == exp.DataType.Type.DECIMAL and len(sizes) == 2:
        return pl.Decimal(sizes[0], sizes[1])
    if sql_type.this == exp.DataType.Type.TIMESTAMP:
        digits = sizes[0] if sizes else 6
        return pl.Datetime(next((unit for unit, n in _UNITS.items() if n == digits), "us"))
    return None


def _cast_type(dtype: pl.DataType) -> exp.DataType:
    if isinstance(dtype, pl.Decimal):
        return exp.DataType.build(f"DECIMAL({dtype.precision}, {dtype.scale})")
    if isinstance(dtype, pl.Datetime):
        return exp.DataType.build(f"TIMESTAMP({_UNITS[dtype.time_unit]})")
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


def _types_by_name(tree: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]]) -> dict[str, set[pl.DataType]]:
    """The types a column name may have in ``tree``: a source's column, and an alias of one (or of its ``MIN``/``MAX``,
    as the rewrites' derived tables name keys). A name also given to anything else is left out: its type is unknown."""
    by_name: dict[str, set[pl.DataType]] = {}
    for columns in schemas.values():
        for column, dtype in columns.items():
            by_name.setdefault(column, set()).add(dtype)
    unknown = {column.name for alias in tree.find_all(exp.TableAlias) for column in alias.columns}  # t(a, b) renames
    pending = []
    for alias in tree.find_all(exp.Alias):
        value = alias.this.this if isinstance(alias.this, (exp.Min, exp.Max)) else alias.this
        if isinstance(value, exp.Column):
            pending.append((alias.alias, value.name))
        else:
            unknown.add(alias.alias)
    while pending:  # an alias of an alias is known once the inner one is
        waiting = [(name, inner) for name, inner in pending if inner not in by_name and inner not in unknown]
        for name, inner in pending:
            if inner in unknown:
                unknown.add(name)
            elif inner in by_name:
                by_name.setdefault(name, set()).update(by_name[inner])
        if len(waiting) == len(pending):
            unknown.update(name for name, _ in waiting)
            break
        pending = waiting
    return {name: types for name, types in by_name.items() if name not in unknown}


def _may_differ(candidates: list[exp.Expression], by_name: Mapping[str, set[pl.DataType]]) -> bool:
    """Whether an equality of ``candidates`` may compare types Polars does not join. Without typing the query: where
    each side is a column whose name has one type (:func:`_types_by_name`), by those types (21 of the 22 TPC-H queries);
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
    if not _may_differ(candidates, _types_by_name(tree, schemas)):
        return False
    for number, node in enumerate(candidates):
        node.meta[_MARK] = number
    # Types are read off a copy, its stars expanded (a derived table's ``SELECT *``): qualifying and sqlglot's annotation
    # rewrite the tree they type. Columns of other types count as text: only numbers and timestamps are cast.
    known = {table: {column: _sql_type(dtype) or "VARCHAR" for column, dtype in columns.items()} for table, columns in schemas.items()}
    typed = annotate_types(qualify(tree.copy(), schema=known, dialect=DIALECT, validate_qualify_columns=False, quote_identifiers=False),
                           schema=known, dialect=DIALECT)
    # By equality: each side's cast, None for a side already of the common type (cast both, and Polars 1.44 loses a
    # key column of an outer join whose ON has a condition besides the keys: "unable to find column k:f").
    casts: dict[int, list[pl.DataType | None]] = {}
    for node in typed.find_all(exp.EQ, exp.In):
        sides = _compared(node) if _MARK in node.meta else None
        types = [_polars_type(side.type) for side in sides] if sides else [None, None]
        if None not in types and (to := join_key_type(*types)) is not None:
            casts[node.meta[_MARK]] = [None if dtype == to else to for dtype in types]
    for number, node in enumerate(candidates):
        for side, to in zip(_compared(node) or (), casts.get(number, ()), strict=False):
            if to is not None:
                _cast(side, to)
        node.meta.pop(_MARK, None)
    return bool(casts)


__all__ = ["cast_unlike_keys"]
