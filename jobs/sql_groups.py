"""SQL's grouping rules, which Polars' SQL does not enforce, checked on a qualified query.

PostgreSQL and DuckDB refuse a column that is neither grouped nor aggregated beside an
aggregate, and an aggregate inside another. Polars' SQL answers some of these instead:
``SELECT a, sum(a) FROM t`` repeats the total on every row, ``sum(sum(a))`` sums once, and a
``HAVING`` on an ungrouped column fails only when the job runs. Each is refused at submit here,
naming the column or the aggregate. A ``HAVING`` condition on grouped columns alone moves to
``WHERE`` (:func:`key_conditions_to_where`), where Polars runs it.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from spillway.jobs.sql_exists import and_all, conjuncts

_SCOPES = (exp.Subquery, exp.Exists, exp.Select)  # a nested query has its own grouping


def _sources(select: exp.Select) -> set[str]:
    from_ = select.args.get("from_")
    parts = [from_.this if from_ else None, *(join.this for join in select.args.get("joins") or [])]
    return {part.alias_or_name for part in parts if part is not None}


def _aggregates(node: exp.Expression) -> Iterator[exp.AggFunc]:
    """The aggregates of ``node``'s own query level (not in subqueries, not windowed)."""
    for child in node.iter_expressions():
        if isinstance(child, _SCOPES):
            continue
        if isinstance(child, exp.AggFunc) and not isinstance(child.parent, exp.Window):
            yield child
        elif not isinstance(child, exp.Window):
            yield from _aggregates(child)


def _bare_columns(node: exp.Expression, keys: set[str], own: set[str]) -> Iterator[exp.Column]:
    """Columns of this level's tables in ``node`` outside aggregates, windows and grouped expressions."""
    if isinstance(node, exp.Column):
        if node.table in own and node.sql() not in keys:
            yield node
        return
    if node.sql() in keys or isinstance(node, (*_SCOPES, exp.AggFunc, exp.Window)):
        return
    for child in node.iter_expressions():
        yield from _bare_columns(child, keys, own)


def grouping_error(tree: exp.Expression) -> tuple[str, exp.Expression] | None:
    """(what is wrong, where) for the first SELECT of ``tree`` that breaks SQL's grouping rules, else None."""
    for select in tree.find_all(exp.Select):
        for aggregate in _aggregates(select):
            inner = next(iter(_aggregates(aggregate)), None)
            if inner is not None:
                return f"an aggregate inside an aggregate ('{aggregate.sql()[:80]}') is not SQL; aggregate in a subquery or CTE first", inner
        where = select.args.get("where")
        for aggregate in _aggregates(where) if where is not None else ():
            columns = list(aggregate.find_all(exp.Column))
            if not columns or any(column.table in _sources(select) for column in columns):  # else the outer query's
                return (f"an aggregate in WHERE ('{aggregate.sql()[:80]}') is not SQL (WHERE tests rows before they are "
                        "grouped); test it in HAVING"), aggregate
        group = select.args.get("group")
        having = select.args.get("having")
        grouped = group is not None or having is not None or any(
            next(iter(_aggregates(projection)), None) is not None for projection in select.expressions)
        if not grouped:
            continue
        keys = {key.sql() for key in (group.expressions if group is not None else [])}
        own = _sources(select)
        parts = [projection.this if isinstance(projection, exp.Alias) else projection for projection in select.expressions]
        for part in [*parts, *([having.this] if having is not None else [])]:
            column = next(_bare_columns(part, keys, own), None)
            if column is not None:
                return (f"column '{column.name}' must appear in GROUP BY or be used in an aggregate function "
                        "(as PostgreSQL and DuckDB require)"), column
            if (column := _ungrouped_in_subquery(part, keys, own)) is not None:
                return (f"a subquery reads column '{column.name}', which must appear in GROUP BY or be used in an aggregate "
                        "function (as PostgreSQL and DuckDB require)"), column
    return None


def _outer_columns(query: exp.Expression) -> Iterator[exp.Column]:
    """The columns the nested ``query`` reads of tables it does not name itself (after qualify, a column names its
    table): the outer query's."""
    named = {table.alias_or_name for table in query.find_all(exp.Table)} | {sub.alias for sub in query.find_all(exp.Subquery) if sub.alias}
    return (column for column in query.find_all(exp.Column) if column.table and column.table not in named)


def _correlated_by_keys_only(query: exp.Expression, keys: set[str]) -> bool:
    """Whether the nested ``query`` reads of the outer query only its group ``keys``, none inside an aggregate (which
    is the outer query's, a value per group): then it has one answer per group, and may test rows before grouping."""
    return all(column.sql() in keys and column.find_ancestor(exp.AggFunc) is None for column in _outer_columns(query))


def _ungrouped_in_subquery(part: exp.Expression, keys: set[str], own: set[str]) -> exp.Column | None:
    """A column of the grouped query that a query nested in ``part`` reads neither as a group key nor in an aggregate."""
    for query in part.find_all(*_SCOPES):
        for column in _outer_columns(query):
            if column.table in own and column.sql() not in keys and column.find_ancestor(exp.AggFunc) is None:
                return column
    return None


def _own_columns(node: exp.Expression) -> Iterator[exp.Column]:
    """The columns of ``node``'s own query level, not of the queries nested in it."""
    for child in node.iter_expressions():
        if isinstance(child, exp.Column):
            yield child
        elif not isinstance(child, _SCOPES):
            yield from _own_columns(child)


def key_conditions_to_where(select: exp.Select) -> None:
    """Move the ``HAVING`` conditions that read only grouped columns (subqueries included), and no aggregate, to
    ``WHERE``: the same groups in SQL, and Polars' SQL fails at run time on a group key in ``HAVING``
    (``HAVING k IN (SELECT …)`` too: "cannot cast List type"), where ``WHERE`` subqueries become joins."""
    group, having = select.args.get("group"), select.args.get("having")
    if group is None or having is None:
        return
    keys = {key.sql() for key in group.expressions}
    own = _sources(select)
    stay, move = [], []
    for part in conjuncts(having.this):
        nested = [node for node in part.find_all(*_SCOPES) if not isinstance(node.parent, _SCOPES)]
        plain = (next(iter(_aggregates(part)), None) is None and not part.find(exp.Window)
                 and all(_correlated_by_keys_only(query, keys) for query in nested))
        outer = [column for query in nested for column in query.find_all(exp.Column) if column.table in own and column.sql() in keys]
        columns = [column for column in _own_columns(part) if column.table in own] + outer
        (move if plain and columns and all(column.sql() in keys for column in columns) else stay).append(part)
    if not move:
        return
    where = select.args.get("where")
    select.set("where", exp.Where(this=and_all([*(conjuncts(where.this) if where else []), *move])))
    select.set("having", exp.Having(this=and_all(stay)) if stay else None)
