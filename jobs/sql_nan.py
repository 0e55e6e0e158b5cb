"""A SQL source's comparisons under NaN's total order, written so that an IEEE engine gives the same answer.

The language orders NaN as PostgreSQL, DuckDB and Polars' CPU engine do (docs/spec.md, "NaN is not
null"): NaN equals NaN and is above every number. cudf-polars 26.10 compares as IEEE does, and a
SQL source's comparisons are Polars' SQL lowering, not ours, so ``WHERE v >= 1`` dropped NaN rows on
the GPU. Polars' SQL has no ``isnan``; ``x <> x`` is one under IEEE (true for NaN alone) and false
everywhere under the total order. So each comparison that may meet a NaN gets the terms
:mod:`jobs.nan_order` gives steps, with ``x <> x`` for ``is_nan``: under IEEE they add the rows the
total order says, and under the total order they are false and change nothing. Either way the
answer is the language's, on whichever engine runs the text.

Which sides may be NaN comes from the frames' real column types (sqlglot's type annotation over
them): a float column, float arithmetic or a cast to a float; an integer, text, date or a number
literal never is, so most comparisons, and every one against a number literal in ``=``, ``<>``,
``<`` and ``<=``, stay as written and keep their pushdown into parquet statistics. Key equalities
in a join's ``ON`` stay too: join keys match NaN to NaN on both engines (tests/test_nan.py); a condition folded
into a key (``CASE WHEN u.w > 1 THEN u.k END``, jobs.sql_rewrite) is not one and gets its terms. So
does a comparison inside or against a subquery Polars' planner runs itself (a correlated ``EXISTS``,
``IN`` or scalar subquery that sqlglot could not make a join), which it takes only as written:
there cudf-polars still compares a NaN as IEEE does (docs/spec.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from spillway.jobs.sql_scopes import is_a_value

#: sqlglot's comparison node for each operator of :func:`jobs.nan_order.total_order_compare`.
_OPERATORS: dict[type[exp.Expression], str] = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLOAT_TYPES = frozenset({exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE})
#: How large the rewritten tree may grow, in nodes: a comparison of comparisons copies each side two or three
#: times, so nesting multiplies the text (seven nested CASEs took 1.7 s to build).
MAX_NODES = 20_000


class NanTermsTooLarge(ValueError):
    """The comparisons' NaN terms would make the query too large or too deeply nested for Polars' SQL."""


def sql_type(dtype: pl.DataType) -> str:
    """The SQL type sqlglot annotates a column of Polars type ``dtype`` with (only floats matter here)."""
    if dtype.is_float():
        return "DOUBLE"
    if dtype.is_integer():
        return "BIGINT"
    if dtype.is_decimal():
        return "DECIMAL"
    if dtype == pl.Boolean:
        return "BOOLEAN"
    if dtype == pl.Date:
        return "DATE"
    if dtype.is_temporal():
        return "TIMESTAMP"
    return "VARCHAR"


def constant_nan(node: exp.Expression) -> bool | None:
    """Whether ``node``, an expression of no column (``'NaN'::double``, ``0.0 / 0.0``), is NaN, as Polars works it
    out; None where ``node`` reads a column or a query, or Polars cannot evaluate it alone.

    Such a side's ``x <> x`` term cannot be written: Polars folds constants on the CPU, under the total order,
    before cudf-polars sees the plan (``'NaN'::double <> 'NaN'::double`` became ``false``, and
    ``v <= 'NaN'::double`` false on the H200, 2026-12-05), so it is decided here once.
    """
    if isinstance(node, exp.Literal) and not node.is_string:
        return False
    if node.find(exp.Column, exp.Query, exp.Subquery, exp.Star, exp.AggFunc, exp.Window) is not None:
        return None
    from spillway.jobs.sql_rewrite import polars_text

    try:
        value = pl.select(pl.sql_expr(polars_text(node.copy()))).item()
    except Exception:  # noqa: BLE001 -- any refusal of Polars' means "not known here"; the IEEE term is then written
        return None
    return isinstance(value, float) and math.isnan(value)


def _may_be_nan(node: exp.Expression) -> bool:
    if isinstance(node, exp.Paren):
        return _may_be_nan(node.this)
    if (known := constant_nan(node)) is not None:
        return known
    if isinstance(node, (exp.Literal, exp.Null, exp.Boolean, exp.Predicate, exp.Connector, exp.Not)):
        return False  # a truth value is never NaN (a literal, or a cast of one, is decided by constant_nan)
    if isinstance(node, exp.Div):
        return True  # 0 / 0 is NaN, of integers too
    if node.type is None or node.type.this == exp.DataType.Type.UNKNOWN:
        return True  # an extra term is never wrong, only slower
    return node.type.this in _FLOAT_TYPES


def _is_nan(node: exp.Expression) -> exp.Expression:
    if (known := constant_nan(node)) is not None:
        return exp.Boolean(this=known)
    return exp.paren(exp.NEQ(this=node.copy(), expression=node.copy()), copy=False)


def _all(*parts: exp.Expression) -> exp.Expression:
    """``parts`` joined by AND, with the truth values of constant sides (:func:`constant_nan`) folded away."""
    if any(isinstance(part, exp.Boolean) and not part.this for part in parts):
        return exp.false()
    kept = [part for part in parts if not isinstance(part, exp.Boolean)]
    if not kept:
        return exp.true()
    return kept[0] if len(kept) == 1 else exp.paren(exp.and_(*kept, copy=False), copy=False)


def _not(node: exp.Expression) -> exp.Expression:
    return exp.Boolean(this=not node.this) if isinstance(node, exp.Boolean) else exp.not_(node, copy=False)


def _any(plain: exp.Expression, term: exp.Expression) -> exp.Expression:
    """``plain OR term``, or ``plain`` where ``term`` is false."""
    if isinstance(term, exp.Boolean) and not term.this:
        return plain
    return exp.paren(exp.or_(plain, term, copy=False), copy=False)


def _not_null(node: exp.Expression) -> exp.Expression:
    return exp.not_(exp.Is(this=node.copy(), expression=exp.Null()), copy=False)


def _nan_above(nan: exp.Expression, other: exp.Expression, *, strict: bool) -> exp.Expression:
    """``nan`` is NaN and ``other`` a value below it (``strict``: not a NaN too), or any value (a number literal: always).

    The term must stay false wherever comparisons follow the total order: there ``x <> x`` is, so a term with
    ``_is_nan`` as a factor is. A NaN constant's factor is true, so "``other`` is no NaN" is written as
    ``other <= 'inf'`` then, which is what it says under both orders (``NOT other <> other`` is true for a NaN
    under the total order: ``v < 'NaN'::double`` was true for a NaN ``v`` on Polars' CPU engine).
    """
    if strict:
        if isinstance(nan_term := _is_nan(nan), exp.Boolean) and nan_term.this:
            return exp.LTE(this=other.copy(), expression=exp.cast(exp.Literal.string("inf"), exp.DataType.Type.DOUBLE))
        return _all(nan_term, _not(_is_nan(other)))
    return _is_nan(nan) if isinstance(other, exp.Literal) else _all(_is_nan(nan), _not_null(other))


def total_order(op: str, a: exp.Expression, b: exp.Expression, *, a_nan: bool, b_nan: bool) -> exp.Expression:
    """``a op b`` (``op`` one of ``= <> < <= > >=``) under NaN's total order on an engine that compares as IEEE
    does, and unchanged under the total order; a null on either side still gives null.

    The same terms as :func:`jobs.nan_order.total_order_compare`, with ``x <> x`` for ``is_nan(x)``.
    """
    node_type = next(t for t, name in _OPERATORS.items() if name == op)
    plain = node_type(this=a.copy(), expression=b.copy())
    if op == "=":
        if not (a_nan and b_nan):
            return plain
        if constant_nan(a) is None and constant_nan(b) is None:
            return _equal_pairs(a, b)
        return _any(plain, _all(_is_nan(a), _is_nan(b)))
    if op == "<>":
        return _all(plain, _not(_all(_is_nan(a), _is_nan(b)))) if a_nan and b_nan else plain
    if op in ("<", "<="):  # b NaN: every number a is below it, a NaN only under "<=" (equal)
        if not b_nan:
            return plain
        return _any(plain, _nan_above(b, a, strict=op == "<" and a_nan))
    if not a_nan:  # ">", ">=" mirror "<", "<="
        return plain
    return _any(plain, _nan_above(a, b, strict=op == ">" and b_nan))


def _nan_as_zero(node: exp.Expression) -> exp.Expression:
    return exp.Case(ifs=[exp.If(this=_is_nan(node), true=exp.Literal.number("0.0"))], default=node.copy())


def _equal_pairs(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """``a = b`` with NaN equal to NaN as two equalities, ``(a <> a) = (b <> b) AND nan_as_zero(a) = nan_as_zero(b)``.

    The same truth as ``a = b OR (a <> a AND b <> b)`` (null where either side is), but a conjunction of equalities
    of one side each, so Polars still plans it as a hash join where it joins two frames (a scalar subquery that
    sqlglot made a cross join: TPC-H Q15); the OR became a nested loop join, which cudf-polars refuses.
    """
    return exp.paren(exp.and_(exp.EQ(this=_is_nan(a), expression=_is_nan(b)),
                              exp.EQ(this=_nan_as_zero(a), expression=_nan_as_zero(b)), copy=False), copy=False)


def _in_a_subquery_polars_plans(node: exp.Expression) -> bool:
    """Whether ``node`` is inside, or compares against, a subquery of an expression (not a derived table of a FROM,
    JOIN or WITH): one sqlglot could not make a join (a correlated ``IN``, a scalar subquery correlated by ``<>``), which
    Polars' own planner takes only as written. With the terms it lost an outer column ("unable to find column 'v'")
    and answered a correlated scalar copied three times wrongly (a helper's hostile run, 2026-12-06)."""
    if any(is_a_value(sub) for sub in node.find_all(exp.Subquery)):
        return True
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.Exists) or (isinstance(parent, exp.Subquery) and is_a_value(parent)):
            return True
        if isinstance(parent, exp.Select) and isinstance(parent.parent, exp.In):
            return True  # x IN (SELECT …): sqlglot leaves the query bare in the IN
        parent = parent.parent
    return False


def _kept_as_written(node: exp.Expression) -> bool:
    """A key equality in a join's ``ON``, or a comparison in or against a subquery that Polars' own planner takes
    only in its plain form (a correlated ``EXISTS``, ``IN`` or scalar: ``p.cost > s.amount``; an uncorrelated one
    was made a join, jobs.sql_rewrite)."""
    if _in_a_subquery_polars_plans(node):
        return True
    parent = node.parent
    while parent is not None and not isinstance(parent, (exp.Join, exp.Select)):
        if isinstance(parent, exp.If):  # a condition folded into a key (CASE WHEN u.w > 1 THEN u.k END): not a key itself
            return False
        node, parent = parent, parent.parent
    return isinstance(parent, exp.Join) and node is parent.args.get("on")


def _sides(node: exp.Expression) -> list[exp.Expression]:
    return [node.this, node.args["low"], node.args["high"]] if isinstance(node, exp.Between) else [node.this, node.expression]


def nan_aware(tree: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]], dialect: str) -> exp.Expression:
    """``tree`` (a qualified query over ``schemas``: table → column → Polars type) with every comparison and
    ``BETWEEN`` that may meet a NaN written out under NaN's total order (:func:`total_order`). Changed in place."""
    # Innermost first, so that a comparison inside another is rewritten before the outer one copies it.
    comparisons = [node for node in reversed(list(tree.find_all(exp.Between, *_OPERATORS, bfs=False))) if not _kept_as_written(node)]
    for number, node in enumerate(comparisons):
        node.meta["spillway_comparison"] = number
    # Types are read off a copy: sqlglot's annotation also rewrites (a cast into ROUND's argument, for one).
    typed = annotate_types(tree.copy(), schema={table: {column: sql_type(dtype) for column, dtype in columns.items()}
                                                for table, columns in schemas.items()}, dialect=dialect)
    may_be_nan = {node.meta["spillway_comparison"]: [_may_be_nan(side) for side in _sides(node)]
                  for node in typed.find_all(exp.Between, *_OPERATORS) if "spillway_comparison" in node.meta}
    size = _size(tree)
    for number, node in enumerate(comparisons):
        nan = may_be_nan.get(number, [True] * len(_sides(node)))
        if not any(nan):
            continue
        if isinstance(node, exp.Between):
            x, low, high = _sides(node)
            written = exp.paren(exp.and_(total_order(">=", x, low, a_nan=nan[0], b_nan=nan[1]),
                                         total_order("<=", x, high, a_nan=nan[0], b_nan=nan[2])), copy=False)
        else:
            written = total_order(_OPERATORS[type(node)], node.this, node.expression, a_nan=nan[0], b_nan=nan[1])
        size += _size(written) - _size(node)
        if size > MAX_NODES:
            raise NanTermsTooLarge(f"its comparisons over floats, written to order NaN on the GPU, pass {MAX_NODES:,} "
                                   "parts (comparisons of comparisons copy their sides); split it with CTEs")
        node.replace(written)
    return tree


def _size(node: exp.Expression) -> int:
    return sum(1 for _ in node.walk())


__all__ = ["MAX_NODES", "NanTermsTooLarge", "constant_nan", "nan_aware", "sql_type", "total_order"]
