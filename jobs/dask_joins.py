"""The ``join`` step on the Dask engine: every ``how``, with and without ``where``.

The Polars engine and docs/spec.md ("Joins") define the answers; pandas' merge differs from
them in ways this module evens out before it merges:

* right columns whose names the left has are renamed (``right_suffix``) before the merge,
  so ``left_on: [k]``, ``right_on: [k]`` keeps both ``k`` and ``k_right`` (pandas' merge makes
  one column of two keys of one name) and a ``where`` finds the suffixed names it reads;
* text with a parquet dictionary (a pandas categorical) joins as plain text: two files'
  categoricals with different category sets, or an empty file's (categories of another
  dtype), fail pandas' merge and concat ("dtype of categories must be the same");
* an outer join's unsigned key with a signed one is compared in a common signed type:
  pandas' outer merge of ``UInt8`` with an empty ``Int64`` side raises
  ("boolean value of NA is ambiguous").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from spillway.jobs.dask_read import integers_kept, nullable_integers
from spillway.jobs.join_condition_dask import join_with_condition
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.spec import JoinStep

#: The rows of a frame where a mask holds (the pipeline's filter, which keeps column projections pushable).
Filter = Callable[[dd.DataFrame, Any], dd.DataFrame]

_CROSS_KEY = "__spillway_cross"
_MATCH = "__spillway_match"


def join(frame: dd.DataFrame, right: dd.DataFrame, step: JoinStep, field: str, plan: LogicalPlan, keep: Filter) -> dd.DataFrame:
    """``frame`` joined with ``right`` as ``step`` (found at ``field``) says.

    ``plan`` holds the parsed ``where`` and the step's output columns; ``keep`` filters the
    joined rows by the condition's mask.
    """
    if step.how in ("semi", "anti") and step.where is None:
        # Only the keys are compared: the left's other columns come out as they are.
        return _filtering_join(plain_text(frame, step.left_keys), plain_text(right, step.right_keys), step)
    frame, right = plain_text(frame), plain_text(right)
    if step.where is not None and step.how not in ("inner", "cross"):
        inner = step.model_copy(update={"how": "inner"})
        return join_with_condition(frame, right, step, lambda left, other: _joined(left, other, inner, field, plan, keep),
                                   plan.columns_after(field))
    return _joined(frame, right, step, field, plan, keep)


def plain_text(frame: dd.DataFrame, columns: list[str] | None = None) -> dd.DataFrame:
    """``frame`` with its categorical columns (among ``columns``, or all) as plain text; itself where it has none.

    dask reads a parquet dictionary as a categorical whose categories it does not know
    until it reads a file, so two sides' categories can differ in values or even dtype.
    """
    names = frame.columns if columns is None else columns
    categorical = [c for c in names if getattr(frame[c].dtype, "name", "") == "category"]
    if not categorical:
        return frame
    text: Any = pd.StringDtype("pyarrow") if isinstance(frame._meta, pd.DataFrame) else "str"  # as plain text is read
    return frame.assign(**{c: frame[c].astype(text) for c in categorical})


def suffixed(frame: dd.DataFrame, right: dd.DataFrame, step: JoinStep) -> dict[str, str]:
    """The right side's columns renamed in the joined rows: those the left has too, but ``on`` keys (one column each)."""
    shared = set(step.on or [])
    return {c: c + step.right_suffix for c in right.columns if c in frame.columns and c not in shared}


def _joined(frame: dd.DataFrame, right: dd.DataFrame, step: JoinStep, field: str, plan: LogicalPlan, keep: Filter) -> dd.DataFrame:
    """An inner, left, right, outer or cross join, then the ``where`` of an inner or cross one."""
    joined = _equi_join(frame, right, step) if step.left_keys else _cross_join(frame, right, step.right_suffix)
    return joined if step.where is None else keep(joined, plan.expression(f"{field}.where", step.where).evaluate(joined))


def _equi_join(frame: dd.DataFrame, right: dd.DataFrame, step: JoinStep) -> dd.DataFrame:
    """An inner, left, right or outer join in which, as in SQL, a null key matches nothing.

    pandas' merge matches null keys with each other; so rows with a null key are kept out
    of the merge, and an outer join adds them back unmatched (a left or right join keeps
    its own side's in the merge, where they find no partner once the other side has none).
    """
    renamed = suffixed(frame, right, step)
    right = right.rename(columns=renamed) if renamed else right
    left_keys, right_keys = list(step.left_keys), [renamed.get(k, k) for k in step.right_keys]

    def merge(left: dd.DataFrame, other: dd.DataFrame, how: str) -> dd.DataFrame:
        return left.merge(other, how=how, left_on=left_keys, right_on=right_keys)

    if step.how == "inner":
        return merge(frame.dropna(subset=left_keys), right.dropna(subset=right_keys), "inner")
    if step.how == "left":
        inputs = {**right.dtypes.to_dict(), **frame.dtypes.to_dict()}
        return integers_kept(merge(frame, nullable_integers(right.dropna(subset=right_keys)), "left"), inputs)
    if step.how == "right":
        inputs = {**right.dtypes.to_dict(), **frame.dtypes.to_dict()}
        return integers_kept(merge(nullable_integers(frame.dropna(subset=left_keys)), right, "right"), inputs)
    frame, right = nullable_integers(frame), nullable_integers(right)
    own = {**{k: right[k].dtype for k in right_keys}, **{k: frame[k].dtype for k in left_keys}}
    frame, right = _signed_keys(frame, right, left_keys, right_keys)
    inputs = {**right.dtypes.to_dict(), **frame.dtypes.to_dict()}
    joined = merge(frame.dropna(subset=left_keys), right.dropna(subset=right_keys), "outer")
    left_alone = frame[frame[left_keys].isnull().any(axis=1)]
    right_alone = right[right[right_keys].isnull().any(axis=1)]
    joined = integers_kept(dd.concat([joined, left_alone, right_alone])[list(joined.columns)], inputs)
    # With left_on/right_on each side keeps its own key column, in its own type (as on Polars);
    # an on= key is one column, in the common type.
    restored = {k: own[k] for k in (*left_keys, *right_keys) if k not in (step.on or []) and joined[k].dtype != own[k]}
    return joined.astype(restored) if restored else joined


def _signed_keys(frame: dd.DataFrame, right: dd.DataFrame, left_keys: list[str], right_keys: list[str]) -> tuple[dd.DataFrame, dd.DataFrame]:
    """``frame`` and ``right`` with each key pair of an unsigned and a signed integer in one signed type (or float, past int64)."""
    left_casts: dict[str, Any] = {}
    right_casts: dict[str, Any] = {}
    for left_key, right_key in zip(left_keys, right_keys, strict=True):
        common = _signed_common(frame[left_key].dtype, right[right_key].dtype)
        if common is not None:
            left_casts[left_key], right_casts[right_key] = common, common
    return (frame.astype(left_casts) if left_casts else frame), (right.astype(right_casts) if right_casts else right)


def _signed_common(left: Any, right: Any) -> Any:
    """The type numpy compares an unsigned and a signed integer dtype in (nullable if ``left`` is), else None."""
    if {getattr(left, "kind", ""), getattr(right, "kind", "")} != {"i", "u"}:
        return None
    common = np.promote_types(getattr(left, "numpy_dtype", left), getattr(right, "numpy_dtype", right))  # uint8, int64: int64
    nullable = isinstance(left, pd.api.extensions.ExtensionDtype)
    return pd.api.types.pandas_dtype(common.name.capitalize()) if nullable else common


def pair_all(part: Any, right: Any, suffix: str) -> Any:
    """Every row of ``part`` with every row of ``right`` (pandas or cuDF): a merge on one constant key."""
    paired = part.assign(**{_CROSS_KEY: 0}).merge(right.assign(**{_CROSS_KEY: 0}), on=_CROSS_KEY, how="inner", suffixes=("", suffix))
    return paired.drop(columns=[_CROSS_KEY])


def _cross_join(frame: dd.DataFrame, right: dd.DataFrame, suffix: str) -> dd.DataFrame:
    """Every left row with every right row: the right side in one partition, paired with each
    left partition, so no partition holds more than its own rows times the right side's."""
    single = right.repartition(npartitions=1)
    meta = pair_all(frame._meta, right._meta, suffix)
    return frame.map_partitions(pair_all, single, suffix, meta=meta, align_dataframes=False)


def _filtering_join(frame: dd.DataFrame, right: dd.DataFrame, step: JoinStep) -> dd.DataFrame:
    """A semi or anti join without ``where``: the left rows with (without) a right row of equal keys."""
    # A merge with the right side's distinct non-null keys, renamed to the left's names,
    # so a match neither repeats nor widens a row. Anti marks the matches and keeps the
    # unmarked rows: cudf's merge has no indicator=True.
    # Renamed before drop_duplicates: dask 2026.7 fails to plan a rename after it.
    keys = (
        right[step.right_keys]
        .rename(columns=dict(zip(step.right_keys, step.left_keys, strict=True)))
        .dropna()
        .drop_duplicates()
    )
    if step.how == "semi":
        return frame.merge(keys, how="inner", on=step.left_keys)
    marked = frame.merge(keys.assign(**{_MATCH: 1.0}), how="left", on=step.left_keys)
    return marked.loc[marked[_MATCH].isnull()].drop(columns=[_MATCH])
