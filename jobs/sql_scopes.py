"""Scopes of a SQL tree: which tables a SELECT names, whether it reads an enclosing query's (a correlated subquery),
and whether a parenthesised query stands for a value or for a table."""

from __future__ import annotations

from sqlglot import exp


#: Where a parenthesised query is a table, not a value: a derived table, a CTE's body, a branch of a set operation.
TABLE_PLACES = (exp.From, exp.Join, exp.CTE, exp.Union, exp.Intersect, exp.Except)


def is_a_value(subquery: exp.Subquery) -> bool:
    """Whether ``subquery`` stands for a value of an expression (a scalar, an ``IN``'s list, an ``EXISTS``), not a table."""
    return subquery.parent is not None and not isinstance(subquery.parent, TABLE_PLACES)


def source_names(select: exp.Select) -> set[str]:
    """The names ``select``'s FROM and JOINs give their tables and derived tables (aliases, else table names)."""
    from_ = select.args.get("from_")
    sources = [from_.this if from_ is not None else None, *(join.this for join in select.args.get("joins") or [])]
    return {source.alias_or_name for source in sources if source is not None}


def reads_outer(select: exp.Select) -> bool:
    """Whether a column in ``select``, its subqueries included, reads a table that neither ``select`` nor a query
    inside it between the two defines: such a column belongs to an enclosing query, and ``select`` is correlated.

    A table named in a nested subquery does not count for ``select``'s own columns (``t.g`` in
    ``SELECT … FROM t t2 WHERE t2.g = t.g AND t2.x IN (SELECT x FROM t)`` is the outer ``t``'s).
    """
    for column in select.find_all(exp.Column):
        if not column.table:
            continue
        scope = column.find_ancestor(exp.Select)
        while scope is not None and column.table not in source_names(scope):
            if scope is select:
                return True
            scope = scope.find_ancestor(exp.Select)
    return False


__all__ = ["TABLE_PLACES", "is_a_value", "reads_outer", "source_names"]
