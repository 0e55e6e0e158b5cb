"""Types in a SQL source's tree, from its sources' real Polars types: for the passes that need them when the
query runs (jobs.sql_key_types, jobs.sql_nan_greatest). A column's type is read off its name where that is
unambiguous; otherwise a copy of the tree is typed by sqlglot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from spillway.jobs.sql_check import DIALECT

Schemas = Mapping[str, Mapping[str, pl.DataType]]
#: The digits of a second's fraction of each Polars time unit: TIMESTAMP(9) is nanoseconds.
TIME_DIGITS = {"ms": 3, "us": 6, "ns": 9}
_TWIN = "spillway_typed_twin"
_INTEGERS = frozenset({exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT})
_FLOATS = frozenset({exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT})


def sql_type(dtype: pl.DataType) -> str | None:
    """The SQL type sqlglot annotates a column of Polars type ``dtype`` with (numbers and timestamps; None for others)."""
    if dtype == pl.UInt64:
        return "UBIGINT"
    if dtype.is_integer():
        return "BIGINT"
    if dtype.is_float():
        return "DOUBLE"
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    if isinstance(dtype, pl.Datetime):
        return f"{'TIMESTAMP' if dtype.time_zone is None else 'TIMESTAMPTZ'}({TIME_DIGITS[dtype.time_unit]})"
    return None


def polars_type(annotated: exp.DataType | None) -> pl.DataType | None:
    """The Polars type of an annotated expression, for the types :func:`sql_type` writes; None for others."""
    if annotated is None:
        return None
    if annotated.sql() == "UBIGINT":  # no such type in PostgreSQL's dialect: sqlglot keeps it user-defined
        return pl.UInt64()
    if annotated.this in _INTEGERS:
        return pl.Int64()
    if annotated.this in _FLOATS:
        return pl.Float64()
    sizes = [int(size.name) for size in annotated.expressions if size.name.isdigit()]
    if annotated.this == exp.DataType.Type.DECIMAL and len(sizes) == 2:
        return pl.Decimal(sizes[0], sizes[1])
    if annotated.this in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ):
        digits = sizes[0] if sizes else 6
        unit = next((unit for unit, n in TIME_DIGITS.items() if n == digits), "us")
        # A zoned type's zone is not in sqlglot's types: UTC stands for any (a column's own is read off its name).
        return pl.Datetime(unit, "UTC" if annotated.this == exp.DataType.Type.TIMESTAMPTZ else None)
    return None


def types_by_name(tree: exp.Expression, schemas: Schemas) -> dict[str, set[pl.DataType]]:
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


def typed_copy(tree: exp.Expression, schemas: Schemas) -> exp.Expression:
    """A copy of ``tree`` with sqlglot's types on every node (``node.type``), its stars expanded first (a derived
    table's ``SELECT *``); the copy keeps each node's ``meta``, by which a pass finds its nodes again. A copy, since
    qualifying and sqlglot's annotation rewrite the tree they type. Columns of other types count as text."""
    known = {table: {column: sql_type(dtype) or "VARCHAR" for column, dtype in columns.items()} for table, columns in schemas.items()}
    qualified = qualify(tree.copy(), schema=known, dialect=DIALECT, validate_qualify_columns=False, quote_identifiers=False)
    for division in qualified.find_all(exp.Div):  # Polars' "/" divides integers as floats (PostgreSQL's: as integers)
        division.set("typed", False)
    return annotate_types(qualified, schema=known, dialect=DIALECT)


def typed_twins(tree: exp.Expression, schemas: Schemas, nodes: Sequence[exp.Expression]) -> list[exp.Expression | None]:
    """Each of ``nodes`` (nodes of ``tree``) as it stands in :func:`typed_copy`, sqlglot's type on it (``.type``);
    None for one that qualifying replaced. One typing for all of them: the passes that need types ask once."""
    for number, node in enumerate(nodes):
        node.meta[_TWIN] = number
    twins: list[exp.Expression | None] = [None] * len(nodes)
    try:
        for twin in typed_copy(tree, schemas).find_all(exp.Expression):
            if (number := twin.meta.get(_TWIN)) is not None:
                twins[number] = twin
    finally:
        for node in nodes:
            node.meta.pop(_TWIN, None)
    return twins


__all__ = ["TIME_DIGITS", "Schemas", "polars_type", "sql_type", "typed_copy", "typed_twins", "types_by_name"]
