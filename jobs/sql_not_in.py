"""``x NOT IN (SELECT y FROM ...)`` in ``WHERE`` as two hash joins, with SQL's nulls.

Polars' SQL plans ``NOT IN (subquery)`` with list functions (``implode``, ``list.contains``,
``has_nulls``) that cudf-polars does not run (TPC-H Q16 on an H200). In SQL the condition is
true when the subquery has no rows; otherwise null for a null ``x``, false when ``x`` is among
the values, null when it is not but a value is null, and true else. In ``WHERE`` null drops the
row as false does, so the row is kept exactly when ``x`` matches no value, the subquery has no
null, and ``x`` is not null unless the subquery has no rows. As joins::

    LEFT JOIN (SELECT DISTINCT y AS k FROM ... WHERE y IS NOT NULL) m ON m.k = x
    JOIN (SELECT FALSE AS x_null FROM (counts) WHERE nulls = 0
          UNION ALL SELECT TRUE FROM (counts) WHERE rows = 0) c ON c.x_null = (x IS NULL)
    WHERE m.k IS NULL

where ``counts`` is ``SELECT count(*) AS rows, count(*) - count(y) AS nulls FROM ...``: ``c`` holds
the values of "``x`` is null" the subquery lets through (none, false, or both). Every condition is a
key equality, so both are hash joins; a filter over the counts of a cross join and the left join's
columns was planned by Polars as a nested loop join, which cudf-polars refuses (TPC-H Q16 on an H100,
2026-12-06). Only an uncorrelated subquery of one column, as a conjunct of ``WHERE``, is rewritten.
"""

from __future__ import annotations

from sqlglot import exp

from spillway.jobs.sql_exists import rewrite_where_conjuncts
from spillway.jobs.sql_scopes import reads_outer

#: The distinct values' column: a name no source has, so that the key pass (jobs.sql_key_types) types it rather than
#: take a source column's type by its name (``k`` of a table of integers, for a subquery's float ``y / 10``).
_KEY = "_spillway_k"


def _shape(part: exp.Expression) -> tuple[exp.Expression, exp.Select] | None:
    """(x, the subquery) of ``NOT x IN (SELECT one column ...)``, else None."""
    inner = part.this if isinstance(part, exp.Not) else None
    if inner is not None and isinstance(inner, exp.Paren):
        inner = inner.this
    if not isinstance(inner, exp.In) or inner.args.get("query") is None:
        return None
    query = inner.args["query"]
    query = query.this if isinstance(query, exp.Subquery) else query
    if not isinstance(query, exp.Select) or len(query.expressions) != 1 or reads_outer(query):
        return None
    if inner.this.find(exp.Column) is None or query.expressions[0].find(exp.Column) is None:
        return None  # a literal on either side (``4 NOT IN …``, ``SELECT NULL``) is no join key: Polars plans it
    if any(query.args.get(arg) for arg in ("group", "having", "limit", "offset", "order", "with_")):
        return None  # the counts below are of the subquery's rows before any of these
    if query.expressions[0].find(exp.AggFunc, exp.Window) is not None:
        return None
    return inner.this, query


def _null_x_allowed(query: exp.Select, value: exp.Expression) -> exp.Expression:
    """``SELECT FALSE AS x_null … WHERE nulls = 0 UNION ALL SELECT TRUE … WHERE rows = 0`` over ``query``'s counts."""

    def when(condition: str, x_null: bool) -> exp.Select:
        counts = query.copy()
        nulls = exp.Sub(this=exp.Count(this=exp.Star()), expression=exp.Count(this=value.copy()))
        counts.set("expressions", [exp.alias_(exp.Count(this=exp.Star()), "rows", quoted=True), exp.alias_(nulls, "nulls", quoted=True)])
        return (exp.select(exp.alias_(exp.Boolean(this=x_null), "x_null", quoted=True))
                .from_(exp.Subquery(this=counts, alias=exp.TableAlias(this=exp.to_identifier("_spillway_counts", quoted=True))))
                .where(exp.EQ(this=exp.column(condition, table="_spillway_counts", quoted=True), expression=exp.Literal.number(0))))

    return exp.union(when("nulls", False), when("rows", True), distinct=False)


def not_in_as_joins(select: exp.Select) -> None:
    """Rewrite each uncorrelated ``NOT x IN (subquery)`` among the conjuncts of ``select``'s WHERE."""

    def rewrite(part: exp.Expression, joins: list[exp.Join]) -> exp.Expression | None:
        found = _shape(part)
        if found is None:
            return None
        x, query = found
        value = query.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        matches, counts = f"_spillway_n{len(joins)}", f"_spillway_c{len(joins)}"
        distinct = query.copy()
        distinct.set("expressions", [exp.alias_(value.copy(), _KEY, quoted=True)])
        distinct.set("distinct", exp.Distinct())
        distinct = distinct.where(exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())), copy=False)
        joins.append(exp.Join(this=exp.Subquery(this=distinct, alias=exp.TableAlias(this=exp.to_identifier(matches, quoted=True))),
                              side="LEFT", on=exp.EQ(this=exp.column(_KEY, table=matches, quoted=True), expression=x.copy())))
        x_null = exp.paren(exp.Is(this=x.copy(), expression=exp.Null()), copy=False)
        allowed = exp.Subquery(this=_null_x_allowed(query, value), alias=exp.TableAlias(this=exp.to_identifier(counts, quoted=True)))
        joins.append(exp.Join(this=allowed, on=exp.EQ(this=exp.column("x_null", table=counts, quoted=True), expression=x_null)))
        return exp.Is(this=exp.column(_KEY, table=matches, quoted=True), expression=exp.Null())

    rewrite_where_conjuncts(select, rewrite)
