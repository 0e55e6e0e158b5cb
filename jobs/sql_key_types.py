"""Equalities of unlike types in a SQL source, written with the casts Polars needs to join on them.

Polars joins keys only of one type: ``ON s.amount = p.product_id`` with a float and an integer fails
as the job runs ("datatypes of join keys don't match"), and so do a decimal with an integer, ``uint64``
with a signed integer, timestamps of two units or zones, where PostgreSQL and DuckDB compare them. Run
wherever the query is (:func:`jobs.sql_source.run_sql`): at submit, over empty frames of coarse kinds
(every number an int64, so only a computed key, ``k * 1.0``, differs there), and when the job runs, over
the sources' real types. Each equality Polars would not take, ``x IN (SELECT y ...)`` (a semi-join to
Polars) and each column pair of ``INTERSECT``/``EXCEPT`` is compared in one type (:func:`key_type`: the
``join`` step's, :func:`jobs.join_key_types.join_key_type`, except ``uint64`` with a signed integer
exactly and zoned times as instants), each side not of that type cast to it: inside a subquery's derived
table, so that its grouping is of the compared values; through a derived table over a table joined
before, or over either table of a correlated subquery's condition, whose columns Polars takes only bare;
else where it stands. Comparisons of two values
(``<``, ``<>`` … as well as ``=``) are cast alike: they are what Polars makes joins and ``join_where``
conditions of, and comparing both sides in the common type keeps their answer.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from sqlglot import exp

from spillway.jobs.join_key_types import join_key_type
from spillway.jobs.sql_exists import EXISTS_ALIAS
from spillway.jobs.sql_scopes import add_column, reads_enclosing, source_of, sources
from spillway.jobs.sql_types import TIME_DIGITS, polars_type, typed_twins, types_by_name

#: The prefixes of the derived tables a subquery is rewritten into (sqlglot's unnest_subqueries, jobs.sql_exists): grouped
#: by the key they are compared on, where SQL compares every matching row (a JOIN of a user's grouped table must not).
_SUBQUERY_TABLES = ("_u_", EXISTS_ALIAS)
_ORDERINGS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_EQUALITIES = (exp.EQ, exp.In, exp.Intersect, exp.Except)
_COMPARED = (*_ORDERINGS, *_EQUALITIES[1:])
#: The decimal places an ordering of a decimal with an integer keeps at most (:func:`_ordering_type`).
_ORDERING_SCALE = 18


def _cast_type(dtype: pl.DataType) -> exp.DataType:
    if isinstance(dtype, pl.Decimal):
        return exp.DataType.build(f"DECIMAL({dtype.precision}, {dtype.scale})")
    if isinstance(dtype, pl.Datetime):
        return exp.DataType.build(f"TIMESTAMP({TIME_DIGITS[dtype.time_unit]})")
    return exp.DataType.build("DOUBLE")  # key_type's only other answer


def _branch(query: exp.Expression) -> exp.Select | None:
    while isinstance(query, exp.Subquery):
        query = query.this
    return query if isinstance(query, exp.Select) else None


def _pairs(node: exp.Expression) -> list[tuple[exp.Expression, exp.Expression]]:
    """What ``node`` compares, pair by pair: a comparison's two sides (a literal's are not keys; ``<`` and the others
    become ``join_where`` conditions of a correlated subquery or a FROM list, which Polars takes of one type only:
    "'join_where' cannot compare Float64 with Int64"), ``x`` and ``y`` of ``x IN (SELECT y ...)``, and the columns of
    ``INTERSECT`` and ``EXCEPT`` (Polars joins them as keys)."""
    if isinstance(node, _ORDERINGS):
        sides = node.this, node.expression
        return [] if any(isinstance(side, (exp.Literal, exp.Null)) for side in sides) else [sides]
    if isinstance(node, exp.In):
        select = _branch(node.args.get("query"))
        return [(node.this, select.expressions[0])] if select is not None and len(select.expressions) == 1 else []
    if isinstance(node, (exp.Intersect, exp.Except)):
        left, right = _branch(node.this), _branch(node.expression)
        if left is None or right is None or len(left.expressions) != len(right.expressions) or any(
                isinstance(e, exp.Star) for e in [*left.expressions, *right.expressions]):
            return []
        return list(zip(left.expressions, right.expressions, strict=True))
    return []


def _timestamp_literal(node: exp.Expression) -> bool:
    """``TIMESTAMP '…'`` (a cast of a text literal to a naive timestamp)."""
    return (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.this == exp.DataType.Type.TIMESTAMP)


def _literal_pairs(node: exp.Expression) -> list[tuple[exp.Expression, exp.Expression]]:
    """A comparison's (or ``BETWEEN``'s) pairs of a value and a ``TIMESTAMP '…'`` literal: a zoned value is compared
    with one as its UTC instant (PostgreSQL reads the literal in the session's zone, UTC here), where Polars fails
    as it prunes parquet row groups ("could not evaluate '<' comparison between … Datetime('ms', 'UTC') and … Datetime('μs')")."""
    if isinstance(node, exp.Between):
        return [(node.this, bound) for bound in (node.args["low"], node.args["high"]) if _timestamp_literal(bound)]
    if isinstance(node, _ORDERINGS):
        if _timestamp_literal(node.expression):
            return [(node.this, node.expression)]
        if _timestamp_literal(node.this):
            return [(node.expression, node.this)]
    return []


def key_type(left: pl.DataType, right: pl.DataType) -> pl.DataType | None:
    """:func:`jobs.join_key_types.join_key_type`, but ``uint64`` with a signed integer exactly, as a 38-digit decimal
    (PostgreSQL and DuckDB compare them exactly; as floats 2**63 - 1 equalled 2**63), and timestamps of two zones or
    units as instants, in the finer unit (a naive one with a zoned one: None, as the ``join`` step refuses them)."""
    integers = left.is_integer() and right.is_integer()
    if integers and pl.UInt64() in (left, right) and (left.is_signed_integer() or right.is_signed_integer()):
        return pl.Decimal(38, 0)
    if isinstance(left, pl.Datetime) and isinstance(right, pl.Datetime) and None not in (left.time_zone, right.time_zone):
        # Two zones or units: Polars' SQL casts to no zoned type, but a zoned time cast to a naive one is its UTC instant.
        return None if left == right else pl.Datetime(max(left.time_unit, right.time_unit, key=list(TIME_DIGITS).index))
    common = join_key_type(left, right)
    # Only what a SQL cast here can write (a column of nulls only, text with a dictionary: left as Polars finds them).
    return common if common is not None and (common.is_float() or isinstance(common, (pl.Decimal, pl.Datetime))) else None


def _references(tree: exp.Expression, column: exp.Column) -> int:
    """How often ``tree`` reads ``column`` other than in an ``IS NULL`` test (which its type does not change: an
    unnested ``IN`` or ``EXISTS`` tests its derived table's key so)."""
    return sum(1 for other in tree.find_all(exp.Column) if other.name == column.name and other.table == column.table
               and not (isinstance(other.parent, exp.Is) and isinstance(other.parent.expression, exp.Null)))


def _derived_projection(column: exp.Column, tree: exp.Expression) -> tuple[exp.Select, exp.Expression] | None:
    """The select and projection of a subquery's derived table (in the FROM or a JOIN of the column's own select) that
    ``column`` reads, where it is read nowhere else but in ``IS NULL`` tests; None otherwise."""
    select = column.find_ancestor(exp.Select)
    if select is None or _references(tree, column) != 1:
        return None
    for source in sources(select):
        if (isinstance(source, exp.Subquery) and source.alias_or_name == column.table and isinstance(source.this, exp.Select)
                and source.alias_or_name.startswith(_SUBQUERY_TABLES)):
            projection = next((e for e in source.this.expressions if e.alias_or_name == column.name), None)
            return (source.this, projection) if isinstance(projection, exp.Alias) else None
    return None


def _joined_before(column: exp.Column) -> exp.Expression | None:
    """The table or derived table ``column`` reads where an earlier JOIN of the select whose later JOIN's ``ON`` holds
    it joined it: Polars takes no expression over such a column as a key ("'alias' is not allowed in a join key")."""
    join = column.find_ancestor(exp.Join)
    select = join.parent if join is not None else None
    if not isinstance(select, exp.Select) or join.args.get("on") is None:
        return None
    joins = select.args.get("joins") or []
    for earlier in joins[:joins.index(join)] if join in joins else []:
        if isinstance(earlier.this, (exp.Table, exp.Subquery)) and earlier.this.alias_or_name == column.table:
            return earlier.this
    return None


def _joined_with_conditions(column: exp.Column) -> exp.Expression | None:
    """The table or derived table ``column`` reads where the JOIN whose ``ON`` holds it joins that table on more than
    key equalities (a nested loop join): Polars 1.44 loses a cast column of it there ("unable to find column "k:x""
    for ``LEFT JOIN x ON x.k = i.k AND x.k > i.a`` with a uint64 ``x.k``, a helper's hostile run, 2026-12-06)."""
    join = column.find_ancestor(exp.Join)
    on = join.args.get("on") if join is not None else None
    if on is None or not isinstance(join.this, (exp.Table, exp.Subquery)) or join.this.alias_or_name != column.table:
        return None
    conditions = list(on.flatten()) if isinstance(on, exp.And) else [on]
    return None if all(isinstance(condition, exp.EQ) for condition in conditions) else join.this


def _correlated_pair(pair: tuple[exp.Expression, exp.Expression]) -> bool:
    """Whether ``pair`` is a correlated subquery's condition (a side reads an enclosing select's column)."""
    return any(reads_enclosing(side) for side in pair)


def _cast_to(value: exp.Expression, cast_type: exp.DataType) -> exp.Cast:
    """``CAST(value AS cast_type)``, always a new cast: sqlglot's ``exp.cast`` keeps a cast to a type it deems the same,
    and ``DECIMAL(38, 30)`` is the same as ``DECIMAL(38, 18)`` to it."""
    return exp.Cast(this=value.copy(), to=cast_type.copy())


def _cast(side: exp.Expression, to: pl.DataType, tree: exp.Expression, number: int, *, correlated: bool = False) -> None:
    """Compare ``side`` in ``to``: cast inside the subquery's derived table it reads, where it reads one (so that the
    table's grouping is of the cast values: two integers one float apart must not both match), through a derived
    table over a table joined before, over a table joined on more than keys, or over either table of a ``correlated``
    condition, or where it is; a projection keeps its output name."""
    cast_type = _cast_type(to)
    if isinstance(side, exp.Column) and (derived := _derived_projection(side, tree)) is not None:
        select, projection = derived
        value = projection.this
        for key in (select.args.get("group") or exp.Group()).expressions:
            if key == value:
                key.replace(_cast_to(key, cast_type))
        projection.set("this", _cast_to(value, cast_type))
        return
    # Polars takes a correlated subquery's condition only of two bare columns ("no table or struct column named 'i'"
    # under a cast): either side is cast through a derived table over its table, the outer one included.
    source = (_joined_before(side) or _joined_with_conditions(side)) if isinstance(side, exp.Column) else None
    if source is None and correlated and isinstance(side, exp.Column):
        source = source_of(side)
    if isinstance(side, exp.Column) and source is not None:
        name = f"_spillway_key{number}_{side.name}"
        add_column(source, exp.cast(exp.column(side.name, source.alias_or_name, quoted=True), cast_type), name)
        side.replace(exp.column(name, side.table, quoted=True))
        return
    value = side.this if isinstance(side, exp.Alias) else side
    cast = _cast_to(value, cast_type)
    name = side.alias_or_name if isinstance(side, (exp.Alias, exp.Column)) else None
    if side.parent is not None and isinstance(side.parent, exp.Select) and side in side.parent.expressions and name:
        side.replace(exp.alias_(cast, name, quoted=True))
    else:
        side.replace(cast)


def _may_differ(candidates: list[exp.Expression], by_name: Mapping[str, set[pl.DataType]]) -> bool:
    """Whether a pair of ``candidates`` may compare types Polars does not join. Without typing the query: where each
    side is a column whose name has one type (:func:`jobs.sql_types.types_by_name`), by those types (21 of the 22
    TPC-H queries); anything else may."""
    for node in candidates:
        for pair in _pairs(node):
            types = []
            for side in pair:
                column = side.this if isinstance(side, exp.Alias) else side
                if not isinstance(column, exp.Column) or len(by_name.get(column.name, ())) != 1:
                    return True  # an expression, or a name of several or unknown types: typed below
                types.extend(by_name[column.name])
            if key_type(*types) is not None:
                return True
    return False


def _tables_by_alias(tree: exp.Expression) -> dict[str, str]:
    """Each alias of a source table in ``tree`` that names one table only (an alias used twice is left out)."""
    named: dict[str, set[str]] = {}
    for table in tree.find_all(exp.Table):
        named.setdefault(table.alias_or_name, set()).add(table.name)
    return {alias: next(iter(names)) for alias, names in named.items() if len(names) == 1}


def _side_type(side: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]], tables: Mapping[str, str],
               by_name: Mapping[str, set[pl.DataType]]) -> tuple[pl.DataType | None, bool]:
    """A typed side's Polars type, and whether it is exact: a source column's own, by its table's alias or else by its
    name where that has one type; else sqlglot's, which hold no time zone (a zoned one stands for any zone)."""
    column = side.this if isinstance(side, exp.Alias) else side
    if isinstance(column, exp.Column):
        if (dtype := schemas.get(tables.get(column.table, ""), {}).get(column.name)) is not None:
            return dtype, True
        if len(types := by_name.get(column.name, set())) == 1:
            return next(iter(types)), True
    return polars_type(side.type), False


def _common(typed: list[tuple[pl.DataType | None, bool]]) -> pl.DataType | None:
    """The type a pair is compared in (:func:`key_type`), None where it is compared as it is. Zoned times whose zone is
    not known are compared as instants all the same (their zones may differ)."""
    (left, left_exact), (right, right_exact) = typed
    if left is None or right is None:
        return None
    zoned = all(isinstance(dtype, pl.Datetime) and dtype.time_zone is not None for dtype in (left, right))
    if zoned and not (left_exact and right_exact):
        return pl.Datetime(max(left.time_unit, right.time_unit, key=list(TIME_DIGITS).index))  # type: ignore[union-attr]
    return key_type(left, right)


def _ordering_type(to: pl.DataType, typed: list[tuple[pl.DataType | None, bool]]) -> pl.DataType:
    """The type an ordering (``<``, ``<>`` …) compares a pair in: ``to``, but microseconds where ``to`` is nanoseconds
    and a side is coarser. Nanoseconds hold only the years 1677–2262: a cast of 9999-12-31 from milliseconds was
    null, and ``ts < valid_to`` silently false (a helper's hostile run, 2026-12-06); microseconds hold both and lose
    only a nanosecond side's digits below a microsecond. An equality keeps the finer unit: a date beyond it equals no
    value of it, as its null matches none."""
    if isinstance(to, pl.Datetime) and to.time_unit == "ns" and any(
            isinstance(dtype, pl.Datetime) and dtype.time_unit != "ns" for dtype, _ in typed):
        return pl.Datetime("us", to.time_zone)
    if isinstance(to, pl.Decimal) and (to.scale or 0) > _ORDERING_SCALE:
        # DECIMAL(38, 30) keeps 8 integer digits: an integer cast to it overflowed (an error, and in Polars' own
        # comparison a null, so CAST(s AS DECIMAL(38, 30)) < 10^12 was false); 18 places leave 20 for any integer.
        return pl.Decimal(38, _ORDERING_SCALE)
    return to


def cast_unlike_keys(tree: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]]) -> bool:
    """Cast each comparison of two values (``IN (SELECT …)``, ``INTERSECT`` and ``EXCEPT`` columns too) of ``tree``, a
    qualified query over ``schemas`` (table → column → Polars type), that compares types Polars does not join: the
    sides not of their common type, to it (an ordering's: :func:`_ordering_type`). A correlated condition is cast
    only between two columns (each through a derived table over its table). Changed in place; whether it was."""
    # A correlated condition is cast only between two columns: Polars refuses any other (tests/test_sql_key_types.py).
    candidates = [node for node in tree.find_all(*_COMPARED) if (pairs := _pairs(node)) and all(
        all(isinstance(side, exp.Column) for side in pair) for pair in pairs if _correlated_pair(pair))]
    by_name = types_by_name(tree, schemas)
    zoned = _zoned_against_literals(tree, schemas, by_name)
    if not _may_differ(candidates, by_name):
        return zoned
    tables = _tables_by_alias(tree)
    # By pair: each side's cast, None for a side already of the common type (cast both, and Polars 1.44 loses a key
    # column of an outer join whose ON has a condition besides the keys: "unable to find column k:f").
    casts: dict[tuple[int, int], list[pl.DataType | None]] = {}
    for number, twin in enumerate(typed_twins(tree, schemas, candidates)):
        for position, pair in enumerate(_pairs(twin) if twin is not None else []):
            typed_sides = [_side_type(side, schemas, tables, by_name) for side in pair]
            if (to := _common(typed_sides)) is not None:
                if not isinstance(candidates[number], _EQUALITIES):
                    to = _ordering_type(to, typed_sides)
                casts[number, position] = [None if dtype == to else to for dtype, _ in typed_sides]
    for number, node in enumerate(candidates):
        for position, pair in enumerate(_pairs(node)):
            correlated = _correlated_pair(pair)
            for side, to in zip(pair, casts.get((number, position), ()), strict=False):
                if to is not None:
                    _cast(side, to, tree, number, correlated=correlated)
    return bool(casts) or zoned


def _zoned_against_literals(tree: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]],
                            by_name: Mapping[str, set[pl.DataType]]) -> bool:
    """Cast each zoned value compared with a ``TIMESTAMP '…'`` literal (:func:`_literal_pairs`) to a naive timestamp of
    its unit, its UTC instant. A column is judged by its name; anything else by typing the query. Whether any was."""
    pairs = [pair for node in tree.find_all(exp.Between, *_ORDERINGS) for pair in _literal_pairs(node)]
    if not pairs:
        return False
    values: list[tuple[exp.Expression, pl.DataType | None]] = []
    untyped = []
    for value, _ in pairs:
        types = by_name.get(value.name, set()) if isinstance(value, exp.Column) else set()
        if len(types) == 1:
            values.append((value, next(iter(types))))
        elif not isinstance(value, exp.Column) or types:  # an expression, or a name of several types
            untyped.append(value)
    if untyped:
        values += [(value, polars_type(twin.type) if twin is not None else None)
                   for value, twin in zip(untyped, typed_twins(tree, schemas, untyped), strict=True)]
    values = [(value, dtype) for value, dtype in values if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None]
    for value, dtype in values:
        value.replace(exp.cast(value.copy(), _cast_type(pl.Datetime(dtype.time_unit))))
    return bool(values)


__all__ = ["cast_unlike_keys", "key_type"]
