"""``[NOT] EXISTS`` correlated by keys and one ``<>``, as a join with each key's smallest and largest value.

TPC-H Q21's shape: ``EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey AND
l2.l_suppkey <> l1.l_suppkey)``. sqlglot's decorrelation turns the ``<>`` into arrays, which Polars'
SQL lacks, and Polars' own planner runs it five times slower than a join. For each outer row the
subquery holds a value other than ``x`` exactly when, among the non-null values of its group (the
rows with the same keys, after its own conditions), the smallest or the largest is not ``x``:

    LEFT JOIN (SELECT k, min(c) AS lo, max(c) AS hi FROM t WHERE <its own conditions> GROUP BY k) e
      ON e.k = outer.k
    ... WHERE coalesce(e.lo <> outer.c OR e.hi <> outer.c, false)

A null ``c`` on either side compares as unknown in SQL, so it never makes the subquery true;
``min``/``max`` skip nulls and the ``coalesce`` makes an unmatched or null comparison false,
which is the same. ``NOT EXISTS`` is ``NOT`` of that. Works on a qualified tree (every column
names its table).

Polars' ``min`` and ``max`` skip a NaN too (unless the group holds nothing else), where the
language orders NaN as a value above all numbers: over a group of 1.0 and NaN, ``lo`` and ``hi``
are both 1.0. Where ``c`` is a float column (known when the query runs: :func:`nan_safe_exists`),
the test counts the group's distinct values instead (NaN is one, nulls none), which is dearer
than ``max``: ``coalesce((e.n > 1 AND outer.c IS NOT NULL) OR e.lo <> outer.c, false)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl
from sqlglot import exp

#: The alias of the grouped table that :func:`decorrelate_exists` joins: ``_spillway_e0``, ``_spillway_e1`` …
EXISTS_ALIAS = "_spillway_e"


def conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    """The parts of an ``AND`` chain (one part for anything else, none for nothing)."""
    return list(condition.flatten()) if isinstance(condition, exp.And) else [] if condition is None else [condition]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    """``parts`` joined by ``AND`` (None for none)."""
    return exp.and_(*parts, copy=False) if parts else None


def rewrite_where_conjuncts(
    select: exp.Select, rewrite: Callable[[exp.Expression, list[exp.Join]], exp.Expression | None]
) -> None:
    """Replace each conjunct of ``select``'s WHERE that ``rewrite`` returns a new part for.

    ``rewrite`` may append joins to the list it is given (the select's own); they and the new
    WHERE are written back only when a part changed.
    """
    where = select.args.get("where")
    if where is None or select.args.get("from_") is None:
        return
    parts = conjuncts(where.this)
    joins = list(select.args.get("joins") or [])
    changed = False
    for index, part in enumerate(parts):
        new = rewrite(part, joins)
        if new is not None:
            parts[index] = new
            changed = True
    if changed:
        select.set("joins", joins)
        select.set("where", exp.Where(this=and_all(parts)))


def _columns(node: exp.Expression) -> list[exp.Column]:
    return list(node.find_all(exp.Column))


def _correlation(condition: exp.Expression, inner: str) -> tuple[exp.Column, exp.Column] | None:
    """(inner column, outer column) of ``inner.a <op> outer.b`` (either way round), else None."""
    if not all(isinstance(side, exp.Column) for side in (condition.left, condition.right)):
        return None
    left, right = condition.left, condition.right
    if left.table == inner and right.table and right.table != inner:
        return left, right
    if right.table == inner and left.table and left.table != inner:
        return right, left
    return None


_Pair = tuple[exp.Column, exp.Column]  # (inner column, outer column)


def _plan(subquery: exp.Select) -> tuple[str, list[_Pair], _Pair, list[exp.Expression]] | None:
    """(inner alias, key pairs, the ``<>`` pair, the subquery's own conditions) when it has the shape."""
    from_ = subquery.args.get("from_")
    simple = from_ is not None and isinstance(from_.this, exp.Table) and not subquery.args.get("joins")
    if not simple or any(subquery.args.get(arg) for arg in ("group", "having", "limit", "offset", "with_", "distinct")):
        return None
    inner = from_.this.alias_or_name
    keys: list[_Pair] = []
    unequal: list[_Pair] = []
    local: list[exp.Expression] = []
    where = subquery.args.get("where")
    for condition in conjuncts(where.this if where else None):
        tables = {column.table for column in _columns(condition)}
        pair = _correlation(condition, inner) if isinstance(condition, (exp.EQ, exp.NEQ)) else None
        if pair is not None:
            (keys if isinstance(condition, exp.EQ) else unequal).append(pair)
        elif tables <= {inner} and not condition.find(exp.Subquery, exp.Exists):
            local.append(condition)
        else:
            return None
    return (inner, keys, unequal[0], local) if keys and len(unequal) == 1 else None


def _sources(select: exp.Select) -> set[str]:
    from_ = select.args.get("from_")
    return {part.alias_or_name for part in [from_.this if from_ else None, *(j.this for j in select.args.get("joins") or [])] if part}


def decorrelate_exists(select: exp.Select) -> None:
    """Rewrite each ``[NOT] EXISTS`` of that shape among the conjuncts of ``select``'s WHERE."""

    def rewrite(part: exp.Expression, joins: list[exp.Join]) -> exp.Expression | None:
        negated = isinstance(part, exp.Not)
        exists = part.this if negated else part
        if not isinstance(exists, exp.Exists) or not isinstance(exists.this, exp.Select):
            return None
        shape = _plan(exists.this)
        if shape is None:
            return None
        inner, keys, (value, outer_value), local = shape
        if not {outer.table for _, outer in [*keys, (value, outer_value)]} <= _sources(select):
            return None  # correlated with a query further out: the join would have nothing to join to here
        alias = f"{EXISTS_ALIAS}{len(joins)}"
        columns = [exp.alias_(key.copy(), f"k{n}", quoted=True) for n, (key, _) in enumerate(keys)]
        grouped = exp.select(*columns, exp.alias_(exp.Min(this=value.copy()), "lo", quoted=True),
                             exp.alias_(exp.Max(this=value.copy()), "hi", quoted=True))
        grouped = grouped.from_(exists.this.args["from_"].this.copy()).group_by(*(key.copy() for key, _ in keys))
        if local:
            grouped = grouped.where(and_all([condition.copy() for condition in local]))
        on = and_all([exp.EQ(this=exp.column(f"k{n}", table=alias, quoted=True), expression=outer.copy())
                      for n, (_, outer) in enumerate(keys)])
        joins.append(exp.Join(this=exp.Subquery(this=grouped, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))),
                              side="LEFT", on=on))
        bounds = (exp.column(bound, table=alias, quoted=True) for bound in ("lo", "hi"))
        differs = exp.or_(*(exp.NEQ(this=bound, expression=outer_value.copy()) for bound in bounds))
        found = exp.Coalesce(this=exp.Paren(this=differs), expressions=[exp.false()])
        return exp.Not(this=found) if negated else found

    rewrite_where_conjuncts(select, rewrite)


def nan_safe_exists(tree: exp.Expression, schemas: Mapping[str, Mapping[str, pl.DataType]]) -> exp.Expression:
    """``tree`` (regenerated text read back) with each of :func:`decorrelate_exists`' tests over a float column
    (``schemas``: table → column → Polars type) made to see a NaN: ``lo <> x OR hi <> x`` becomes
    ``(n > 1 AND x IS NOT NULL) OR lo <> x``, ``n`` the group's distinct non-null values. Changed in place."""
    for subquery in list(tree.find_all(exp.Subquery)):
        alias, select = subquery.alias_or_name, subquery.this
        if not alias.startswith(EXISTS_ALIAS) or not isinstance(select, exp.Select):
            continue
        lowest = next((e.this for e in select.expressions if e.alias_or_name == "lo" and isinstance(e.this, exp.Min)), None)
        from_ = select.args.get("from_")
        if lowest is None or not isinstance(lowest.this, exp.Column) or from_ is None or not isinstance(from_.this, exp.Table):
            continue
        # A known type that is not a float keeps min/max; a CTE's column (no frame's type) is counted as if it were one.
        dtype = schemas.get(from_.this.name, {}).get(lowest.this.name)
        if dtype is not None and not dtype.is_float():
            continue
        select.select(exp.alias_(exp.Count(this=exp.Distinct(expressions=[lowest.this.copy()])), "n", quoted=True), copy=False)
        outer_select = subquery.parent.parent if isinstance(subquery.parent, exp.Join) else None
        for unequal in list(outer_select.find_all(exp.NEQ)) if isinstance(outer_select, exp.Select) else []:
            bound = unequal.this
            # Only the test of the select that joins this table: a nested scope has its own _spillway_e0.
            if (isinstance(bound, exp.Column) and bound.table == alias and bound.name == "hi"
                    and unequal.find_ancestor(exp.Select) is outer_select):
                outer = unequal.expression
                distinct = exp.GT(this=exp.column("n", table=alias, quoted=True), expression=exp.Literal.number(1))
                unequal.replace(exp.paren(exp.and_(distinct, exp.not_(exp.Is(this=outer.copy(), expression=exp.Null()))), copy=False))
    return tree
