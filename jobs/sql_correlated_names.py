"""A correlated subquery's condition on a column whose name two joined tables share, given a name of its own.

Polars' SQL plans a correlated subquery it is left with (one sqlglot could not make a join: a scalar subquery in a
SELECT list, a ``<``) by joining on the condition's columns by their bare names. Where the table a condition reads
is joined to another with a column of the same name, it read the other one, silently (a helper's hostile run,
2026-12-06):

- ``(SELECT count(*) FROM u JOIN r ON r.m = u.k WHERE r.k = i.k)`` compared ``u.k`` with ``i.k``;
- ``SELECT (SELECT count(*) FROM r WHERE r.k < u.k) FROM i LEFT JOIN u ON i.k = u.k`` read ``i.k`` for ``u.k``.

Each such column becomes a column of its own name on its table (:func:`jobs.sql_scopes.add_column`), which the
condition reads instead. Run wherever the query is (:func:`jobs.sql_source.run_sql`), with the tables' columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlglot import exp

from spillway.jobs.sql_scopes import add_column, reads_enclosing, source_of, sources

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _columns_of(source: exp.Expression, tree: exp.Expression, tables: Mapping[str, Iterable[str]]) -> set[str] | None:
    """The column names ``source`` (a table, a CTE's name, a derived table) holds; None where they are not known."""
    if isinstance(source, exp.Table):
        if source.name in tables:
            return set(tables[source.name])
        cte = next((cte for cte in tree.find_all(exp.CTE) if cte.alias_or_name == source.name), None)
        query = cte.this if cte is not None else None
    else:
        query = source.this if isinstance(source, exp.Subquery) else None
    if isinstance(query, exp.Select) and not any(isinstance(e, exp.Star) for e in query.expressions):
        return {e.alias_or_name for e in query.expressions}
    return None


def _shared(column: exp.Column, source: exp.Expression, tree: exp.Expression, tables: Mapping[str, Iterable[str]]) -> bool:
    """Whether another table of the select that joins ``source`` holds a column of ``column``'s name (or may)."""
    select = source.find_ancestor(exp.Select)
    if select is None:
        return False
    for other in (s for s in sources(select) if s is not source):
        names = _columns_of(other, tree, tables)
        if names is None or column.name in names:
            return True
    return False


def unshared_correlated_names(tree: exp.Expression, tables: Mapping[str, Iterable[str]]) -> bool:
    """Give each column of a correlated comparison of two columns (``r.k = i.k`` with ``i`` outer) whose name another
    table joined beside its own holds a name of its own (in place). ``tables``: each source table's column names.
    Whether any was."""
    number = 0
    for node in list(tree.find_all(*_COMPARISONS)):
        pair = (node.this, node.expression)
        if not all(isinstance(side, exp.Column) for side in pair) or not any(reads_enclosing(side) for side in pair):
            continue
        for side in pair:
            source = source_of(side)
            if source is None or not _shared(side, source, tree, tables):
                continue
            name = f"_spillway_corr{number}_{side.name}"
            number += 1
            add_column(source, exp.column(side.name, source.alias_or_name, quoted=True), name)
            side.replace(exp.column(name, side.table, quoted=True))
    return number > 0


__all__ = ["unshared_correlated_names"]
