"""An aggregate's ``FILTER (WHERE …)`` clause, written as the ``CASE`` it stands for.

``COUNT(*) FILTER (WHERE status = 'late')`` is PostgreSQL's (and DuckDB's, SQL:2003's) way to aggregate a subset of a
group's rows beside the whole group. Polars' SQL has no FILTER, and every aggregate the whitelist allows skips nulls,
so the clause is the aggregate of its argument where the condition holds and null elsewhere:
``COUNT(CASE WHEN status = 'late' THEN 1 END)``, ``SUM(CASE WHEN c THEN x END)``, ``COUNT(DISTINCT CASE WHEN c THEN x
END)``. A row whose condition is null or false is left out, as FILTER leaves it. The rewrite runs before the
whitelist, so the condition and the aggregate are checked as any other expression is.
"""

from __future__ import annotations

from sqlglot import exp



class FilterRefused(ValueError):
    """A FILTER clause that is not SQL's: ``node`` is where, ``part`` what, ``why`` what to write instead."""

    def __init__(self, node: exp.Expression, part: str, why: str) -> None:
        super().__init__(part)
        self.node, self.part, self.why = node, part, why


def _only_where(value: exp.Expression, condition: exp.Expression) -> exp.Expression:
    """``CASE WHEN condition THEN value END``: ``value`` where ``condition`` holds, null elsewhere."""
    return exp.Case(ifs=[exp.If(this=condition.copy(), true=value)])


def _filtered_distinct(distinct: exp.Distinct, condition: exp.Expression, order: exp.Order | None = None) -> None:
    """``DISTINCT x`` as the distinct values of the rows where ``condition`` holds; an ``order`` of those values
    (SQL's rule for an aggregate with DISTINCT) orders them as filtered too."""
    values = list(distinct.expressions)
    for ordered in order.expressions if order is not None else []:
        if any(ordered.this == value for value in values):
            ordered.set("this", _only_where(ordered.this.copy(), condition))
    distinct.set("expressions", [_only_where(value, condition) for value in values])


def _filtered(aggregate: exp.Expression, condition: exp.Expression) -> None:
    """Make ``aggregate``'s arguments null where ``condition`` does not hold (in place)."""
    argument = aggregate.this
    if isinstance(argument, exp.Star):  # COUNT(*): the rows where it holds
        aggregate.set("this", _only_where(exp.Literal.number(1), condition))
        return
    if isinstance(argument, exp.Distinct):  # COUNT(DISTINCT x)
        _filtered_distinct(argument, condition)
        return
    if isinstance(argument, exp.Order):  # STRING_AGG([DISTINCT] s, ',' ORDER BY …): the value, not its order
        if isinstance(argument.this, exp.Distinct):
            _filtered_distinct(argument.this, condition, argument)
        else:
            argument.set("this", _only_where(argument.this, condition))
        return
    aggregate.set("this", _only_where(argument, condition))
    if isinstance(aggregate, (exp.CovarSamp, exp.CovarPop)):  # a pair counts only where both are not null
        aggregate.set("expression", _only_where(aggregate.expression, condition))


def filters_as_cases(tree: exp.Expression) -> None:
    """Rewrite every ``aggregate FILTER (WHERE condition)`` in ``tree`` as the aggregate over ``CASE`` (in place).

    Raises
    ------
    FilterRefused
        A FILTER after anything but an aggregate, or a condition holding an aggregate or a window (PostgreSQL refuses
        both).
    """
    # Innermost first: a condition is copied into each CASE, so a FILTER inside it (in a subquery) goes first.
    for node in reversed(list(tree.find_all(exp.Filter))):
        aggregate, where = node.this, node.expression
        if not isinstance(aggregate, exp.AggFunc):  # the whitelist then checks which aggregate it is
            raise FilterRefused(node, f"FILTER after {aggregate.sql(dialect='postgres')[:60]}", ": FILTER (WHERE …) follows an aggregate only "
                                      "(COUNT, SUM, AVG, MIN, MAX, …)")
        condition = where.this if isinstance(where, exp.Where) else where
        own = condition.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select)))  # a subquery's aggregates are its own
        if (inner := next((n for n in own if isinstance(n, (exp.AggFunc, exp.Window))), None)) is not None:
            raise FilterRefused(inner, f"{inner.sql(dialect='postgres')[:60]} in FILTER", ": a FILTER condition is of each row; aggregates "
                                       "and windows are not allowed in it")
        if condition.find(exp.Column, exp.Subquery, exp.Exists) is None:  # COUNT(CASE WHEN TRUE THEN 1 END) is a constant's count
            raise FilterRefused(node, f"FILTER (WHERE {condition.sql(dialect='postgres')[:40]}) reads no column",
                                ": it keeps every row or none; drop the FILTER, or the aggregate")
        _filtered(aggregate, condition)
        node.replace(aggregate)


__all__ = ["FilterRefused", "filters_as_cases"]
