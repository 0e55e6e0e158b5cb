"""Aggregates over a value that reads no column, which Polars' SQL answers wrongly: refused with what to write.

Polars' SQL takes an aggregate's argument that reads no column, other than a bare number, as one value
per group rather than one per row (polars 1.44, against DuckDB and PostgreSQL):

- ``SUM(CAST(1 AS BIGINT))``, ``SUM(1+1)``, ``SUM(ABS(-1))`` and ``COUNT(CAST(1 AS INT))`` give the value
  once (1, not the group's rows), and under ``OVER (…)`` so does even ``SUM(1)``;
- ``STRING_AGG('a', ',')`` gives ``'a'`` for a group of two rows (``'a,a'``);
- ``STDDEV(1)`` and ``VARIANCE(2)`` give null where there are two rows (0), ``COVAR_SAMP(x, 2)`` 0 where
  there is one pair (null);
- ``COUNT(-3)`` is 1 a group;
- over no rows, ``MIN(2)``, ``MAX('x')``, ``AVG(1)`` and ``MEDIAN(3)`` give the value, ``COUNT(DISTINCT 1)`` 1 (SQL: null, 0).

A bare number, ``NULL`` or ``*`` in ``SUM``/``COUNT`` it counts per row (``SUM(1)``, ``SUM(-1)``,
``COUNT(1)``; in a window only in ``COUNT``): these run. The rest is a silent wrong answer, so the
submit refuses it (``invalid_sql``).
"""

from __future__ import annotations

from sqlglot import exp

#: Aggregates whose answer depends on how many rows the value is taken for.
_PER_ROW = (exp.Sum, exp.Count)
#: Aggregates that are the value itself over one row or more, and that Polars' SQL also gives over none.
_OF_THE_VALUE = (exp.Min, exp.Max, exp.Avg, exp.Median)
_EVERY_ARGUMENT = (exp.Stddev, exp.StddevSamp, exp.Variance, exp.CovarSamp, exp.CovarPop)


def _reads_a_column(node: exp.Expression) -> bool:
    """Whether ``node`` has a value per row: it reads a column, or an aggregate (``SUM(COUNT(*)) OVER (…)``)."""
    return node.find(exp.Column, exp.AggFunc) is not None


def _bare(node: exp.Expression, counted: bool) -> bool:
    """What Polars' SQL takes per row: a number, NULL or ``*``, in parentheses; in ``SUM`` maybe signed, in ``COUNT`` any
    literal but a signed one (``COUNT(-3)`` is 1 a group)."""
    while isinstance(node, exp.Paren) or isinstance(node, exp.Neg) and not counted:
        node = node.this
    return isinstance(node, (exp.Null, exp.Star)) or isinstance(node, exp.Literal) and (counted or not node.is_string)


def constant_aggregate(node: exp.Expression) -> str | None:
    """Why ``node`` (any node of a checked query) would be answered wrongly, with what to write; None if it would not."""
    if isinstance(node, _PER_ROW + _OF_THE_VALUE):
        value = node.this
        if value is None or _reads_a_column(value):
            return None
        if isinstance(value, exp.Distinct) or isinstance(node, _OF_THE_VALUE):  # right on rows, wrong over none
            return (": Polars' SQL gives the value itself over no rows (SQL: null, or 0 for a count); "
                    "aggregate a column, or write the constant outside the aggregate")
        if isinstance(node, exp.Sum) and isinstance(node.parent, exp.Window):  # even SUM(1) OVER (…) is 1 on every row
            return (": Polars' SQL takes a value that reads no column once per window, not once per row (a wrong answer); "
                    "write COUNT(*) OVER (…) * value")
        if _bare(value, isinstance(node, exp.Count)):
            return None
        return (": Polars' SQL takes a value that reads no column once per group, not once per row (a wrong answer); "
                "write a bare number (SUM(1), COUNT(*)), or COUNT(*) * value")
    if isinstance(node, exp.GroupConcat):
        value = node.this
        if value is None or isinstance(value, exp.Distinct) or _reads_a_column(value):
            return None
        return ": Polars' SQL joins a value that reads no column once per group, not once per row (a wrong answer); aggregate a column"
    if isinstance(node, _EVERY_ARGUMENT):
        arguments = [argument for argument in (node.this, node.args.get("expression")) if argument is not None]
        if all(isinstance(argument, exp.Distinct) or _reads_a_column(argument) for argument in arguments):
            return None
        return (": Polars' SQL takes a value that reads no column once per group, not once per row, so the spread is wrong; "
                "every argument must read a column")
    return None
