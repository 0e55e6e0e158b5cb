"""Scopes of a SQL tree: which tables a SELECT names, which table a column reads, whether a SELECT reads an enclosing
query's (a correlated subquery), whether a parenthesised query stands for a value or for a table; and a column added
to a joined table through a derived table over it."""

from __future__ import annotations

from sqlglot import exp


#: Where a parenthesised query is a table, not a value: a derived table, a CTE's body, a branch of a set operation.
TABLE_PLACES = (exp.From, exp.Join, exp.CTE, exp.Union, exp.Intersect, exp.Except)
#: The mark of a derived table :func:`add_column` wrapped a source in.
_WRAPPER = "spillway_column_wrapper"


def is_a_value(subquery: exp.Subquery) -> bool:
    """Whether ``subquery`` stands for a value of an expression (a scalar, an ``IN``'s list, an ``EXISTS``), not a table."""
    return subquery.parent is not None and not isinstance(subquery.parent, TABLE_PLACES)


def sources(select: exp.Select) -> list[exp.Expression]:
    """The tables and derived tables of ``select``'s FROM and JOINs, in order."""
    from_ = select.args.get("from_")
    found = [from_.this if from_ is not None else None, *(join.this for join in select.args.get("joins") or [])]
    return [source for source in found if source is not None]


def source_names(select: exp.Select) -> set[str]:
    """The names ``select``'s FROM and JOINs give their tables and derived tables (aliases, else table names)."""
    return {source.alias_or_name for source in sources(select)}


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


def reads_enclosing(node: exp.Expression) -> bool:
    """Whether ``node`` reads a column of an enclosing select (a correlated subquery's condition, one sqlglot could not
    make a join: with ``<`` say)."""
    for column in node.find_all(exp.Column):
        select = column.find_ancestor(exp.Select)
        if select is not None and column.table and column.table not in source_names(select):
            return True
    return False


def source_of(column: exp.Column) -> exp.Expression | None:
    """The table or derived table of the FROM or a JOIN that ``column`` reads: of its own select, else of the nearest
    enclosing one that names its table (a correlated subquery's outer column)."""
    select = column.find_ancestor(exp.Select)
    while select is not None:
        for source in sources(select):
            if isinstance(source, (exp.Table, exp.Subquery)) and source.alias_or_name == column.table:
                return source
        select = select.find_ancestor(exp.Select)
    return None


def add_column(source: exp.Expression, value: exp.Expression, name: str) -> None:
    """Give the joined ``source`` (a table, a derived table, or the wrapper an earlier call made) a column ``name``
    holding ``value`` (over the source's alias), through a derived table over it that keeps its alias. Polars takes
    a join key, or a correlated subquery's condition, only of bare columns: this is how a cast or a renamed column
    becomes one. The query's ``*`` are expanded by then (sqlglot's qualify), so the column shows nowhere else."""
    alias = source.alias_or_name
    column = exp.alias_(value, name, quoted=True)
    if source.meta.get(_WRAPPER):  # a second column of the same table: one wrapper, one more column
        source.this.select(column, copy=False)
        return
    wrapper = exp.Subquery(this=exp.select(exp.Star(), column).from_(source.copy()),
                           alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    wrapper.meta[_WRAPPER] = True
    source.replace(wrapper)


__all__ = ["TABLE_PLACES", "add_column", "is_a_value", "reads_enclosing", "reads_outer", "source_names", "source_of", "sources"]
