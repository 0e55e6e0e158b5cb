"""``COUNT(DISTINCT x)`` grouped as two groupings: the distinct (keys, x) first, then a plain ``COUNT``.

Polars' SQL plans ``COUNT(DISTINCT x)`` as ``n_unique(x) - has_nulls(x)``, and cudf-polars 26.10 runs no
``has_nulls`` in a group-by (TPC-H Q16 on an H100, 2026-12-06: the query was refused on the GPU). Where
every aggregate of a SELECT counts the distinct values of one expression::

    SELECT g, COUNT(DISTINCT x) AS n FROM t WHERE w GROUP BY g HAVING COUNT(DISTINCT x) > 1 ORDER BY n

is the same as::

    SELECT d.g0 AS g, COUNT(d.x) AS n
    FROM (SELECT DISTINCT g AS g0, x AS x FROM t WHERE w) AS d
    GROUP BY d.g0 HAVING COUNT(d.x) > 1 ORDER BY n

with SQL's nulls: ``COUNT`` skips a null ``x`` as ``COUNT(DISTINCT)`` does, and a group of null ``x`` alone
still has its row (a count of 0). Other SELECTs are left as written.
"""

from __future__ import annotations

from sqlglot import exp

#: The derived table's name and its columns' prefix.
_DERIVED = "_spillway_distinct"
_GROUP_COLUMN = "_spillway_g"
_VALUE_COLUMN = "_spillway_x"


def _counted(select: exp.Select) -> exp.Expression | None:
    """The one expression every aggregate of ``select`` counts the distinct values of, else None."""
    counted: exp.Expression | None = None
    for clause in (*select.expressions, select.args.get("having"), select.args.get("order")):
        if clause is None:
            continue
        for aggregate in clause.find_all(exp.AggFunc):
            if aggregate.parent_select is not select:
                continue
            distinct = aggregate.this if isinstance(aggregate, exp.Count) else None
            if not isinstance(distinct, exp.Distinct) or len(distinct.expressions) != 1:
                return None
            if counted is not None and distinct.expressions[0] != counted:
                return None
            counted = distinct.expressions[0]
    return counted


def _rewritable(select: exp.Select) -> bool:
    group = select.args.get("group")
    if select.args.get("distinct") or select.find(exp.Window) or select.args.get("from_") is None:
        return False
    if any(clause.find(exp.Query) for clause in (*select.expressions, select.args.get("having"), select.args.get("order")) if clause):
        return False  # a subquery there may read the tables that move into the derived table
    return group is None or not any(group.args.get(arg) for arg in ("rollup", "cube", "grouping_sets"))


def distinct_counts_as_two_groupings(select: exp.Select) -> None:
    """Rewrite ``select`` (qualified) as the module says where every aggregate is one ``COUNT(DISTINCT x)``."""
    if not _rewritable(select) or (counted := _counted(select)) is None:
        return
    group = select.args.get("group")
    keys = list(group.expressions) if group is not None else []
    if any(key.find(exp.AggFunc, exp.Query) for key in keys):
        return
    outer = select.copy()

    def column(name: str) -> exp.Column:
        return exp.column(name, table=_DERIVED, quoted=True)

    replacements = {key: column(f"{_GROUP_COLUMN}{number}") for number, key in enumerate(keys)}
    for clause in [*outer.expressions, outer.args.get("having"), outer.args.get("order")]:
        if clause is None:
            continue
        for count in list(clause.find_all(exp.Count)):
            if count.parent_select is outer and isinstance(count.this, exp.Distinct):
                count.set("this", column(_VALUE_COLUMN))
        for node in list(clause.walk(bfs=True)):
            match = next((name for key, name in replacements.items() if node == key), None)
            if match is not None and node.parent is not None:
                node.replace(match.copy())
        if any(c.table and c.table != _DERIVED for c in clause.find_all(exp.Column) if c.parent_select is outer):
            return  # a column the groups do not fix (PostgreSQL would refuse it; left for Polars to say so)
    inner = exp.Select(expressions=[*(exp.alias_(key.copy(), f"{_GROUP_COLUMN}{n}", quoted=True) for n, key in enumerate(keys)),
                                    exp.alias_(counted.copy(), _VALUE_COLUMN, quoted=True)], distinct=exp.Distinct())
    for arg in ("from_", "joins", "where"):  # moved, not copied: later passes rewrite the subqueries of the WHERE in place
        if (part := select.args.get(arg)) is not None:
            select.set(arg, None)
            inner.set(arg, part)
    outer.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(_DERIVED, quoted=True)))))
    outer.set("joins", None)
    outer.set("where", None)
    if keys:
        outer.set("group", exp.Group(expressions=list(replacements.values())))
    for arg in ("expressions", "from_", "group", "having", "order"):
        select.set(arg, outer.args.get(arg))
    select.set("joins", None)


__all__ = ["distinct_counts_as_two_groupings"]
