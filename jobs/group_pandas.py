"""Aggregations the Dask engine computes per shuffled partition: mode, string_agg, corr and covar.

dask's groupby has none of them, so :mod:`jobs.pipeline` shuffles the rows on the group keys
(each group then lies whole in one partition) and runs one of these functions on each pandas
or cuDF partition, as it does for a quantile. Each function gets the key columns and the
input as :data:`VALUE` (and :data:`OTHER`), and gives one row per group of the partition,
the group keys then ``name``; a group with no input value gets a null, as in SQL. The
semantics are those of :mod:`jobs.polars_frame`'s, documented in docs/spec.md ("Aggregations").
"""

from __future__ import annotations

from typing import Any

from spillway.jobs.pandas_functions import on_host

VALUE = "__spillway_value"
OTHER = "__spillway_other"
_COUNT = "__spillway_count"


def _per_group(part: Any, keys: list[str], values: Any, name: str) -> Any:
    """``values`` (a frame of keys and ``name``, some groups missing) on every group of ``part``."""
    groups = part[keys].drop_duplicates()
    return groups.merge(values[[*keys, name]], on=keys, how="left")  # null keys meet null keys in pandas' and cuDF's merges


def group_mode(part: Any, keys: list[str], name: str) -> Any:
    """The most frequent non-null value per group; of tied values the smallest."""
    present = part[[*keys, VALUE]].dropna(subset=[VALUE])
    counts = present.groupby([*keys, VALUE], dropna=False, sort=False).size().reset_index(name=_COUNT)
    best = counts.sort_values([_COUNT, VALUE], ascending=[False, True]).drop_duplicates(subset=keys, keep="first")
    return _per_group(part, keys, best.rename(columns={VALUE: name}), name)


def _string_agg(part: Any, keys: list[str], separator: str, order: list[tuple[str, bool]], name: str) -> Any:
    """The non-null values of each group joined by ``separator``, in ``order`` (columns, descending) if given."""
    rows = part
    if order:  # a stable sort: groupby keeps each group's rows in the frame's order
        rows = part.sort_values([column for column, _ in order], ascending=[not desc for _, desc in order], na_position="last", kind="stable")
    present = rows[[*keys, VALUE]].dropna(subset=[VALUE])
    grouped = present.groupby(keys, dropna=False, sort=False)[VALUE]
    joined = grouped.agg(separator.join)
    return _per_group(part, keys, joined.rename(name).reset_index(), name)


#: A cuDF partition is joined in host memory: cuDF 26.10 has no ``collect`` of its text columns (H200 run, bench/RESULTS.md).
group_string_agg = on_host(_string_agg)


def group_moment(part: Any, keys: list[str], func: str, name: str) -> Any:
    """Sample covariance (``covar``) or correlation (``corr``) of the rows where both inputs are non-null,
    in two passes: null for fewer than two pairs, and a correlation with a constant side is null."""
    pairs = part[[*keys, VALUE, OTHER]].dropna(subset=[VALUE, OTHER])
    x, y = pairs[VALUE].astype("float64"), pairs[OTHER].astype("float64")
    grouped = pairs.assign(**{VALUE: x, OTHER: y}).groupby(keys, dropna=False, sort=False)
    dx, dy = x - grouped[VALUE].transform("mean"), y - grouped[OTHER].transform("mean")
    sums = pairs[keys].assign(xy=dx * dy, xx=dx * dx, yy=dy * dy, n=1).groupby(keys, dropna=False, sort=False).sum().reset_index()
    if func == "covar":
        value = (sums["xy"] / (sums["n"] - 1)).where(sums["n"] >= 2)
    else:
        value = (sums["xy"] / (sums["xx"] * sums["yy"]) ** 0.5).where((sums["xx"] > 0) & (sums["yy"] > 0))
    return _per_group(part, keys, sums[keys].assign(**{name: value}), name)
