"""``x NOT IN (SELECT y FROM ...)`` in ``WHERE`` as two joins, with SQL's nulls.

Polars' SQL plans ``NOT IN (subquery)`` with list functions (``implode``, ``list.contains``,
``has_nulls``) that cudf-polars does not run (TPC-H Q16 on an H200). In SQL the condition is
true when the subquery has no rows; otherwise null for a null ``x``, false when ``x`` is among
the values, null when it is not but a value is null, and true else. In ``WHERE`` null drops the
row as false does, so the row is kept exactly when::

    c.rows = 0 OR (x IS NOT NULL AND m.k IS NULL AND c.nulls = 0)

over ``LEFT JOIN (SELECT DISTINCT y AS k FROM ... WHERE y IS NOT NULL) m ON m.k = x`` and
``CROSS JOIN (SELECT count(*) AS rows, count(*) - count(y) AS nulls FROM ...) c``. Only an
uncorrelated subquery of one column, as a conjunct of ``WHERE``, is rewritten.
"""

from __future__ import annotations

from sqlglot import exp

from spillway.jobs.sql_exists import and_all, rewrite_where_conjuncts


def _uncorrelated(query: exp.Select) -> bool:
    """Whether every column of ``query`` belongs to a table of ``query`` itself (or its subqueries)."""
    own = {table.alias_or_name for table in query.find_all(exp.Table)} | {sub.alias_or_name for sub in query.find_all(exp.Subquery)}
    return all(not column.table or column.table in own for column in query.find_all(exp.Column))


def _shape(part: exp.Expression) -> tuple[exp.Expression, exp.Select] | None:
    """(x, the subquery) of ``NOT x IN (SELECT one column ...)``, else None."""
    inner = part.this if isinstance(part, exp.Not) else None
    if inner is not None and isinstance(inner, exp.Paren):
        inner = inner.this
    if not isinstance(inner, exp.In) or inner.args.get("query") is None:
        return None
    query = inner.args["query"]
    query = query.this if isinstance(query, exp.Subquery) else query
    if not isinstance(query, exp.Select) or len(query.expressions) != 1 or not _uncorrelated(query):
        return None
    if any(query.args.get(arg) for arg in ("group", "having", "limit", "offset", "order", "with_")):
        return None  # the counts below are of the subquery's rows before any of these
    if query.expressions[0].find(exp.AggFunc, exp.Window) is not None:
        return None
    return inner.this, query


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
        distinct.set("expressions", [exp.alias_(value.copy(), "k", quoted=True)])
        distinct.set("distinct", exp.Distinct())
        distinct = distinct.where(exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())), copy=False)
        totals = query.copy()
        nulls = exp.Sub(this=exp.Count(this=exp.Star()), expression=exp.Count(this=value.copy()))
        totals.set("expressions", [exp.alias_(exp.Count(this=exp.Star()), "rows", quoted=True), exp.alias_(nulls, "nulls", quoted=True)])
        joins.append(exp.Join(this=exp.Subquery(this=distinct, alias=exp.TableAlias(this=exp.to_identifier(matches, quoted=True))),
                              side="LEFT", on=exp.EQ(this=exp.column("k", table=matches, quoted=True), expression=x.copy())))
        joins.append(exp.Join(this=exp.Subquery(this=totals, alias=exp.TableAlias(this=exp.to_identifier(counts, quoted=True))),
                              kind="CROSS"))
        no_rows = exp.EQ(this=exp.column("rows", table=counts, quoted=True), expression=exp.Literal.number(0))
        absent = and_all([exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null())),
                          exp.Is(this=exp.column("k", table=matches, quoted=True), expression=exp.Null()),
                          exp.EQ(this=exp.column("nulls", table=counts, quoted=True), expression=exp.Literal.number(0))])
        return exp.Paren(this=exp.or_(no_rows, exp.Paren(this=absent)))

    rewrite_where_conjuncts(select, rewrite)
