"""Comparisons under NaN's total order, written so that an IEEE engine gives the same answer.

The language orders NaN as PostgreSQL, DuckDB and Polars' CPU engine do (docs/spec.md, "NaN is
not null"): NaN equals NaN and is above every number, +inf included. cudf-polars 26.10 compares
as IEEE does (``NaN > 1``, ``NaN == NaN`` false; found on the H200, tests/test_nan.py), so a
comparison that may meet a NaN is spelt out with ``is_nan`` terms, which both engines evaluate
alike. A side that cannot be NaN (an integer, a number literal) needs no term, so most
comparisons, and every one against a number literal in ``==``, ``!=``, ``<`` and ``<=``, stay as
they were and keep their pushdown into parquet statistics.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl


def total_order_compare(op: str, a: pl.Expr, b: pl.Expr, *, a_may_be_nan: bool, b_may_be_nan: bool) -> pl.Expr:
    """``a op b`` with NaN equal to itself and above every number; a null on either side still gives null.

    Only the terms a NaN side needs are added: under IEEE every comparison with a NaN is false
    (``!=`` true), so a term adds the rows where the total order says otherwise.
    """
    plain = IEEE_COMPARE[op](a, b)
    both = a_may_be_nan and b_may_be_nan
    if op == "==":
        return plain | (a.is_nan() & b.is_nan()) if both else plain
    if op == "!=":
        return plain & ~(a.is_nan() & b.is_nan()) if both else plain
    # b NaN: every number a is below it, a NaN only under "<=" (equal); ">", ">=" mirror it. ``is_nan`` only on a
    # side that may be NaN: Polars refuses it on decimals and bools, which are never NaN.
    if op in ("<", "<="):
        if not b_may_be_nan:
            return plain
        return plain | (b.is_nan() & (~a.is_nan() if op == "<" and a_may_be_nan else a.is_not_null()))
    if not a_may_be_nan:
        return plain
    return plain | (a.is_nan() & (~b.is_nan() if op == ">" and b_may_be_nan else b.is_not_null()))


def greatest_with_nan(values: list[pl.Expr], may_be_nan: list[bool]) -> pl.Expr:
    """``greatest(values…)`` with NaN above every number, as PostgreSQL and DuckDB have it: NaN where any value is.

    Polars' ``max_horizontal`` skips a NaN beside a number (``greatest(NaN, 1.5)`` would be 1.5).
    ``least`` needs nothing: a NaN, the largest, is never the smallest unless every value is NaN,
    and then Polars gives NaN too. Nulls are skipped either way.
    """
    any_nan = pl.any_horizontal([value.is_nan().fill_null(False) for value, nan in zip(values, may_be_nan) if nan])
    return pl.when(any_nan).then(pl.lit(float("nan"))).otherwise(pl.max_horizontal(*values))


#: The six comparisons as Polars spells them (IEEE on cudf-polars, the total order on Polars' CPU engine).
IEEE_COMPARE: dict[str, Callable[[pl.Expr, pl.Expr], pl.Expr]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
