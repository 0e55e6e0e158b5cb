"""``MAX`` and ``GREATEST`` of floats with NaN above every number, as PostgreSQL and DuckDB order it.

Polars' ``max`` and ``GREATEST`` skip a NaN (``MAX`` over 1.0 and NaN is 1.0, ``GREATEST(NaN, 1.5)`` 1.5) where
PostgreSQL and DuckDB give NaN; its ``MIN`` agrees already (NaN only where every value is). Where an argument is a
float, known when the query runs, each is written with an explicit NaN test:

- ``MAX(x)`` → ``CASE WHEN MAX(CASE WHEN x = NaN THEN 1 ELSE 0 END) = 1 THEN NaN ELSE MAX(x) END``; a window over
  whole partitions gets the same ``OVER`` on both (an ordered window's running ``max`` is the window step's, which
  gives NaN already);
- ``GREATEST(a, b, …)`` → ``CASE WHEN a = NaN OR … THEN NaN ELSE GREATEST(a, b, …) END`` over its float arguments.

``x = NaN`` is true on a NaN under Polars' total order; on cudf-polars, whose comparisons follow IEEE,
:func:`jobs.sql_nan.nan_aware` writes it out afterwards. The extremes an ``EXISTS`` was rewritten with
(:mod:`jobs.sql_exists`) are left alone: that rewrite counts a float group's values instead.
"""

from __future__ import annotations

from sqlglot import exp

from spillway.jobs.sql_exists import EXISTS_ALIAS
from spillway.jobs.sql_types import Schemas, polars_type, typed_twins, types_by_name


def _nan() -> exp.Expression:
    return exp.cast(exp.Literal.string("NaN"), exp.DataType.build("DOUBLE"))


def _is_nan(value: exp.Expression) -> exp.Expression:
    return exp.EQ(this=value.copy(), expression=_nan())


def _arguments(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Max):
        return node.this.expressions[:1] if isinstance(node.this, exp.Distinct) else [node.this]  # MAX(DISTINCT x): x
    return [node.this, *node.expressions]


def _candidates(tree: exp.Expression) -> list[exp.Expression]:
    """The ``MAX``es and ``GREATEST``s that may meet a NaN: neither an ordered window nor an ``EXISTS``'s extremes.
    Innermost first, so that one inside another is written before the outer one copies it."""
    found = []
    for node in reversed(list(tree.find_all(exp.Max, exp.Greatest, bfs=False))):
        window = node.parent if isinstance(node.parent, exp.Window) else None
        if window is not None and window.args.get("order") is not None and not _whole_partition(window):
            continue  # a running or sliding max: the window step's, NaN where one has been
        if any(subquery.alias_or_name.startswith(EXISTS_ALIAS) for subquery in _enclosing_subqueries(node)):
            continue
        found.append(node)
    return found


def _whole_partition(window: exp.Window) -> bool:
    """Whether an ordered window's frame is its whole partition (BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)."""
    spec = window.args.get("spec")
    return spec is not None and str(spec.args.get("start", "")).upper() == "UNBOUNDED" and str(spec.args.get("end", "")).upper() == "UNBOUNDED"


def _enclosing_subqueries(node: exp.Expression) -> list[exp.Subquery]:
    enclosing, parent = [], node.parent
    while parent is not None:
        if isinstance(parent, exp.Subquery):
            enclosing.append(parent)
        parent = parent.parent
    return enclosing


def _float_arguments(candidates: list[exp.Expression], tree: exp.Expression, schemas: Schemas) -> dict[int, list[bool]]:
    """By candidate: which of its arguments are floats. A column named for one type is read off its name; the query
    is typed only where some argument is anything else."""
    by_name = types_by_name(tree, schemas)
    floats: dict[int, list[bool]] = {}
    untyped = []
    for number, node in enumerate(candidates):
        flags = []
        for argument in _arguments(node):
            types = by_name.get(argument.name) if isinstance(argument, exp.Column) else None
            if types is None or len(types) != 1:
                untyped.append(number)
                break
            flags.append(next(iter(types)).is_float())
        else:
            floats[number] = flags
    twins = typed_twins(tree, schemas, [candidates[number] for number in untyped]) if untyped else []
    for number, twin in zip(untyped, twins, strict=True):
        if twin is not None:
            floats[number] = [(dtype := polars_type(argument.type)) is not None and dtype.is_float() for argument in _arguments(twin)]
    return floats


def nan_greatest(tree: exp.Expression, schemas: Schemas) -> bool:
    """Write each ``MAX`` and ``GREATEST`` of ``tree`` (a qualified query over ``schemas``: table → column → Polars
    type) that has a float argument with NaN as its greatest value. Changed in place; whether it was."""
    candidates = _candidates(tree)
    if not candidates:  # a float may be computed (CAST(s AS DOUBLE), 'NaN'): no float column is needed for a NaN
        return False
    floats = _float_arguments(candidates, tree, schemas)
    changed = False
    for number, node in enumerate(candidates):
        # A GREATEST's constant argument is not tested: a test of constants only is one value where Polars wants a
        # column ("length 1 doesn't match the DataFrame height"), so a constant NaN there is skipped, as Polars does.
        nan_arguments = [argument for argument, is_float in zip(_arguments(node), floats.get(number, []), strict=False)
                         if is_float and (isinstance(node, exp.Max) or argument.find(exp.Column) is not None)]
        if not nan_arguments:
            continue
        if isinstance(node, exp.Max):
            flag = exp.Max(this=exp.If(this=_is_nan(nan_arguments[0]), true=exp.Literal.number(1), false=exp.Literal.number(0)))
            whole = node.parent if isinstance(node.parent, exp.Window) else node
            if whole is not node:  # the same OVER on the flag's MAX
                window = whole.copy()
                window.set("this", flag)
                flag = window
            test = exp.EQ(this=flag, expression=exp.Literal.number(1))
        else:
            whole = node
            test = exp.or_(*(_is_nan(argument) for argument in nan_arguments))
        whole.replace(exp.Case(ifs=[exp.If(this=test, true=_nan())], default=whole.copy()))
        changed = True
    return changed


__all__ = ["nan_greatest"]
