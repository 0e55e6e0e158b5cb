"""Left, right, outer, semi and anti joins with a ``where`` condition on the Dask engine.

As in SQL, the condition is part of ``ON``: a pair of rows matches when its keys match and
the condition holds, and a row of the kept side that matches nothing is kept once, with
nulls for the other side (a filter after the join would drop it). So the matching pairs
are found as for ``inner`` (keys, then the condition), each side's rows carrying a row
number; the unmatched rows are then those whose number no pair holds. The Polars engine
does the same (:mod:`jobs.join_condition_polars`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask.dataframe as dd
import numpy as np

from spillway.jobs.dask_read import nullable_integers
from spillway.jobs.spec import JoinStep

LEFT_ROW, RIGHT_ROW = "__spillway_left_row", "__spillway_right_row"
_MATCHED = "__spillway_matched"
# A row's number: its partition's in the high bits, its position in the partition below.
_POSITION_BITS = 40

#: The matching pairs of two frames (each with its row numbers), as the inner join with the condition gives them.
Pairs = Callable[[dd.DataFrame, dd.DataFrame], dd.DataFrame]


def _number_rows(part: Any, name: str, partition_info: dict[str, Any] | None = None) -> Any:
    start = (partition_info["number"] if partition_info else 0) << _POSITION_BITS
    return part.assign(**{name: np.arange(start, start + len(part), dtype="int64")})


def with_row_numbers(frame: dd.DataFrame, name: str) -> dd.DataFrame:
    """``frame`` with a column ``name`` that is unique per row (partition and position)."""
    meta = frame._meta.assign(**{name: np.array([], dtype="int64")})
    return frame.map_partitions(_number_rows, name, meta=meta)


def _without(frame: dd.DataFrame, pairs: dd.DataFrame, row: str) -> dd.DataFrame:
    """The rows of ``frame`` whose number ``row`` is in no pair (a left merge that marks the matched)."""
    matched = pairs[[row]].drop_duplicates().assign(**{_MATCHED: 1.0})
    marked = frame.merge(matched, how="left", on=row)
    return marked.loc[marked[_MATCHED].isnull()].drop(columns=[_MATCHED])


def join_with_condition(frame: dd.DataFrame, right: dd.DataFrame, step: JoinStep, pairs_of: Pairs, columns: list[str]) -> dd.DataFrame:
    """``step`` (``how`` left, right, outer, semi or anti, with a ``where``) over ``frame`` and ``right``.

    ``pairs_of`` joins the two as ``inner`` with the step's keys and condition; ``columns``
    are the step's output columns, in order.
    """
    left = with_row_numbers(frame, LEFT_ROW)
    other = with_row_numbers(right, RIGHT_ROW)
    pairs = pairs_of(left, other)
    if step.how == "semi":
        return left.merge(pairs[[LEFT_ROW]].drop_duplicates(), how="inner", on=LEFT_ROW)[columns]
    if step.how == "anti":
        return _without(left, pairs, LEFT_ROW)[columns]
    shared = set(step.on or [])
    # The right side under its names in the joined rows: suffixed where they clash with the left's.
    renamed = other.rename(columns={c: c + step.right_suffix for c in right.columns if c in frame.columns and c not in shared})
    if step.how == "right":
        from_left = [c for c in columns if c not in renamed.columns]
        return renamed.merge(nullable_integers(pairs[[RIGHT_ROW, *from_left]], keep=[RIGHT_ROW]), how="left", on=RIGHT_ROW)[columns]
    from_right = [c for c in columns if c not in frame.columns]
    kept = left.merge(nullable_integers(pairs[[LEFT_ROW, RIGHT_ROW, *from_right]], keep=[LEFT_ROW, RIGHT_ROW]), how="left", on=LEFT_ROW)
    if step.how == "left":
        return kept[columns]
    # outer: the left rows, matched or not, then the right rows no pair holds (nulls on the left).
    alone = _without(renamed, pairs, RIGHT_ROW)
    return dd.concat([nullable_integers(kept[columns]), nullable_integers(alone[[c for c in columns if c in alone.columns]])])[columns]
