"""Whether a SELECT reads a table of an enclosing query: the outer references of a correlated subquery."""

from __future__ import annotations

from sqlglot import exp


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


__all__ = ["reads_outer", "source_names"]
