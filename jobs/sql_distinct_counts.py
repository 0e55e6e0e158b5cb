"""``COUNT(DISTINCT x)`` grouped as two groupings: by (keys, x) first, then by the keys with a plain ``COUNT``.

Polars' SQL plans ``COUNT(DISTINCT x)`` as ``n_unique(x) - has_nulls(x)``, and cudf-polars 26.10 runs no
``has_nulls`` in a group-by (TPC-H Q16 on an H100, 2026-12-06: the query was refused on the GPU). Where a
SELECT's aggregates are ``COUNT(DISTINCT x)`` of one expression and any of ``SUM``, ``MIN``, ``MAX``,
``COUNT(y)`` and ``COUNT(*)`` (each can be summed up from the partial groups)::

    SELECT g, COUNT(DISTINCT x) AS n, SUM(y) AS s FROM t WHERE w GROUP BY g HAVING COUNT(*) > 1 ORDER BY n

is the same as::

    SELECT d.g0 AS g, COUNT(d.x) AS n, SUM(d.p0) AS s
    FROM (SELECT g AS g0, x AS x, SUM(y) AS p0, COUNT(*) AS p1 FROM t WHERE w GROUP BY g, x) AS d
    GROUP BY d.g0 HAVING COALESCE(SUM(d.p1), 0) > 1 ORDER BY n

with SQL's nulls: ``COUNT`` skips the group of a null ``x`` as ``COUNT(DISTINCT)`` skips a null, a group of null
``x`` alone still has its row (a count of 0), a ``SUM`` of nulls alone stays null, and a count over no rows is 0.
(With no other aggregate the inner query is ``SELECT DISTINCT``.) Other SELECTs are left as written: ``AVG``,
two distinct counts, a subquery beside the aggregates. (A ``FILTER`` is a ``CASE`` by now: jobs/sql_filters.py.)
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from spillway.jobs.sql_scopes import reads_outer

#: The derived table's name and its columns' prefixes.
_DERIVED = "_spillway_distinct"
_GROUP_COLUMN = "_spillway_g"
_VALUE_COLUMN = "_spillway_x"
_PARTIAL_COLUMN = "_spillway_p"

#: Each aggregate that can be summed up from partial groups: how the outer query combines its partial column.
_COMBINE: dict[type[exp.Expression], Callable[[exp.Expression], exp.Expression]] = {
    exp.Sum: lambda partial: exp.Sum(this=partial),
    exp.Min: lambda partial: exp.Min(this=partial),
    exp.Max: lambda partial: exp.Max(this=partial),
    # A count of no rows (no GROUP BY, nothing read) is 0, where a SUM of no partials is null.
    exp.Count: lambda partial: exp.Coalesce(this=exp.Sum(this=partial), expressions=[exp.Literal.number(0)]),
}


def _own_aggregates(select: exp.Select) -> list[exp.AggFunc]:
    clauses = (*select.expressions, select.args.get("having"), select.args.get("order"))
    return [node for clause in clauses if clause is not None for node in clause.find_all(exp.AggFunc) if node.parent_select is select]


def _distinct_argument(aggregate: exp.Expression) -> exp.Expression | None:
    """``x`` of ``COUNT(DISTINCT x)``, else None."""
    distinct = aggregate.this if isinstance(aggregate, exp.Count) else None
    if isinstance(distinct, exp.Distinct) and len(distinct.expressions) == 1:
        return distinct.expressions[0]
    return None


def _counted(aggregates: list[exp.AggFunc]) -> exp.Expression | None:
    """The one ``x`` the aggregates count the distinct values of, where every other aggregate can be combined."""
    counted: exp.Expression | None = None
    for aggregate in aggregates:
        if any(inner is not aggregate for inner in aggregate.find_all(exp.AggFunc, exp.Window)):
            return None  # an aggregate inside an aggregate
        if (value := _distinct_argument(aggregate)) is not None:
            if counted is not None and value != counted:
                return None
            counted = value
        elif type(aggregate) not in _COMBINE or isinstance(aggregate.this, exp.Distinct) or aggregate.expressions:
            return None
    return counted


def _rewritable(select: exp.Select) -> bool:
    group = select.args.get("group")
    if select.args.get("distinct") or select.find(exp.Window) or select.args.get("from_") is None or reads_outer(select):
        return False  # a correlated SELECT: its outer columns would be read inside the derived table, as its own
    if any(clause.find(exp.Query) for clause in (*select.expressions, select.args.get("having"), select.args.get("order")) if clause):
        return False  # a subquery there may read the tables that move into the derived table
    return group is None or not any(group.args.get(arg) for arg in ("rollup", "cube", "grouping_sets"))


def _column(name: str) -> exp.Column:
    return exp.column(name, table=_DERIVED, quoted=True)


def distinct_counts_as_two_groupings(select: exp.Select) -> None:
    """Rewrite ``select`` (qualified) as the module says where its aggregates allow it; else leave it."""
    if not _rewritable(select) or (counted := _counted(_own_aggregates(select))) is None:
        return
    group = select.args.get("group")
    keys = list(group.expressions) if group is not None else []
    if any(key.find(exp.AggFunc, exp.Query) for key in keys):
        return
    outer = select.copy()
    partials: list[exp.Expression] = []  # the inner query's partial aggregates, one per distinct aggregate text
    for aggregate in _own_aggregates(outer):
        if _distinct_argument(aggregate) is not None:
            aggregate.replace(exp.Count(this=_column(_VALUE_COLUMN)))
            continue
        number = next((n for n, partial in enumerate(partials) if partial == aggregate), None)
        if number is None:
            number = len(partials)
            partials.append(aggregate.copy())
        aggregate.replace(_COMBINE[type(aggregate)](_column(f"{_PARTIAL_COLUMN}{number}")))
    replacements = {key: _column(f"{_GROUP_COLUMN}{number}") for number, key in enumerate(keys)}
    for clause in [*outer.expressions, outer.args.get("having"), outer.args.get("order")]:
        if clause is None:
            continue
        for node in list(clause.walk(bfs=True)):
            match = next((name for key, name in replacements.items() if node == key), None)
            if match is not None and node.parent is not None:
                node.replace(match.copy())
        if any(c.table and c.table != _DERIVED for c in clause.find_all(exp.Column) if c.parent_select is outer):
            return  # a column the groups do not fix (PostgreSQL would refuse it; left for Polars to say so)
    inner = exp.Select(expressions=[*(exp.alias_(key.copy(), f"{_GROUP_COLUMN}{n}", quoted=True) for n, key in enumerate(keys)),
                                    exp.alias_(counted.copy(), _VALUE_COLUMN, quoted=True),
                                    *(exp.alias_(partial, f"{_PARTIAL_COLUMN}{n}", quoted=True) for n, partial in enumerate(partials))])
    if partials:  # by the output names: a key of x itself (abs(x)) and x would both be named "x" by Polars
        names = [*(f"{_GROUP_COLUMN}{n}" for n in range(len(keys))), _VALUE_COLUMN]
        inner.set("group", exp.Group(expressions=[exp.column(name, quoted=True) for name in names]))
    else:
        inner.set("distinct", exp.Distinct())
    for arg in ("from_", "joins", "where"):  # moved, not copied: later passes rewrite the subqueries of the WHERE in place
        if (part := select.args.get(arg)) is not None:
            select.set(arg, None)
            inner.set(arg, part)
    outer.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(_DERIVED, quoted=True)))))
    outer.set("group", exp.Group(expressions=list(replacements.values())) if keys else None)
    for arg in ("expressions", "from_", "group", "having", "order"):
        select.set(arg, outer.args.get(arg))
    select.set("joins", None)


__all__ = ["distinct_counts_as_two_groupings"]
