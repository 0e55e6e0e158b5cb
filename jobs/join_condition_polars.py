"""Left, right, outer, semi and anti joins with a ``where`` condition on the Polars engine.

The rules of :mod:`jobs.join_condition_dask`, SQL's: the condition is part of ``ON``, so the
matching pairs are the inner join's (keys, then the condition), and a row of the kept side
that no pair holds is kept once, with nulls for the other side. Rows are told apart by a
row number on each side.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from spillway.jobs.polars_rows import with_row_numbers
from spillway.jobs.spec import JoinStep

LEFT_ROW, RIGHT_ROW = "__spillway_left_row", "__spillway_right_row"

#: The matching pairs of two frames (each with its row index), as the inner join with the condition gives them.
Pairs = Callable[[pl.LazyFrame, pl.LazyFrame], pl.LazyFrame]


def join_with_condition(frame: pl.LazyFrame, right: pl.LazyFrame, step: JoinStep, pairs_of: Pairs, columns: list[str]) -> pl.LazyFrame:
    """``step`` (``how`` left, right, outer, semi or anti, with a ``where``) over ``frame`` and ``right``.

    ``pairs_of`` joins the two as ``inner`` with the step's keys and condition; ``columns``
    are the step's output columns, in order.
    """
    left = with_row_numbers(frame, LEFT_ROW)
    other = with_row_numbers(right, RIGHT_ROW)
    pairs = pairs_of(left, other)
    if step.how in ("semi", "anti"):
        return left.join(pairs.select(LEFT_ROW), on=LEFT_ROW, how=step.how).select(columns)
    left_names = frame.collect_schema().names()
    right_names = right.collect_schema().names()
    shared = set(step.on or [])
    # The right side under its names in the joined rows: suffixed where they clash with the left's.
    renamed = other.rename({c: c + step.right_suffix for c in right_names if c in left_names and c not in shared})
    renamed_names = {c + step.right_suffix if c in left_names and c not in shared else c for c in right_names}
    if step.how == "right":
        from_left = [c for c in columns if c not in renamed_names]
        return renamed.join(pairs.select(RIGHT_ROW, *from_left), on=RIGHT_ROW, how="left").select(columns)
    from_right = [c for c in columns if c not in left_names]
    kept = left.join(pairs.select(LEFT_ROW, RIGHT_ROW, *from_right), on=LEFT_ROW, how="left")
    if step.how == "left":
        return kept.select(columns)
    # outer: the left rows, matched or not, then the right rows no pair holds (nulls on the left).
    alone = renamed.join(pairs.select(RIGHT_ROW), on=RIGHT_ROW, how="anti")
    return pl.concat([kept.select(columns), alone.select([c for c in columns if c in renamed_names])], how="diagonal_relaxed").select(columns)
