"""JobSpec → Dask dataframe graph. The only place the pandas/cudf backend switch lives.

Every operation is a dask.dataframe method, so the graph holds only dask, pandas
and cudf functions: workers need no Spillway code to run it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import dask
import dask.dataframe as dd

from jobs.expr import parse_expression
from jobs.sources import resolve_files
from jobs.spec import (
    AssignStep,
    DropDuplicatesStep,
    FilterStep,
    GroupByStep,
    JobSpec,
    JoinStep,
    LimitStep,
    RenameStep,
    SelectStep,
    SortStep,
    SourceSpec,
    Step,
)

Backend = Literal["pandas", "cudf"]


@contextmanager
def backend_config(backend: Backend) -> Iterator[None]:
    """Dask config for building and optimising a graph on ``backend``.

    ``tasks`` shuffles: under a distributed client dask would pick ``p2p``, which
    measured 3.5-4x slower than ``tasks`` for dask-cudf on our H200s (shared/gpu/README.md).
    """
    with dask.config.set({"dataframe.backend": backend, "dataframe.shuffle.method": "tasks"}):
        yield


def read_source(source: SourceSpec, *, field: str = "source") -> dd.DataFrame:
    """A lazy dataframe over a source's files (the backend comes from the dask config)."""
    files = resolve_files(source, field=field)
    if source.format == "parquet":
        return dd.read_parquet(files, columns=source.columns)
    frame = dd.read_csv(files, usecols=source.columns, blocksize="64MiB")
    return frame


def apply_step(frame: dd.DataFrame, step: Step, index: int) -> dd.DataFrame:
    """Apply one spec step to a lazy dataframe."""
    field = f"steps[{index}]"
    if isinstance(step, FilterStep):
        mask = parse_expression(step.expr, field=f"{field}.expr").evaluate(frame)
        # .loc, not []: dask 2026.7's frame[mask] returns the mask itself when the
        # mask ends in .astype(bool), which the expression layer emits for null safety.
        return frame.loc[mask]
    if isinstance(step, AssignStep):
        value = parse_expression(step.expr, field=f"{field}.expr").evaluate(frame)
        return frame.assign(**{step.column: value})
    if isinstance(step, SelectStep):
        return frame[list(step.columns)]
    if isinstance(step, RenameStep):
        return frame.rename(columns=dict(step.columns))
    if isinstance(step, GroupByStep):
        return _groupby(frame, step)
    if isinstance(step, SortStep):
        ascending: Any = (
            [not d for d in step.descending] if isinstance(step.descending, list) else not step.descending
        )
        return frame.sort_values(list(step.by), ascending=ascending)
    if isinstance(step, LimitStep):
        return frame.head(step.n, npartitions=-1, compute=False)
    if isinstance(step, DropDuplicatesStep):
        return frame.drop_duplicates(subset=list(step.subset) if step.subset else None)
    if isinstance(step, JoinStep):
        right = read_source(step.right, field=f"{field}.right")
        return frame.merge(
            right,
            how=step.how,
            left_on=step.left_keys,
            right_on=step.right_keys,
            suffixes=("", step.right_suffix),
        )
    raise TypeError(f"unsupported step {step!r}")  # pragma: no cover - the union is closed


def _groupby(frame: dd.DataFrame, step: GroupByStep) -> dd.DataFrame:
    # Named aggregation keeps output names stable on pandas and cudf alike; "size"
    # counts rows, which is "size" of any key column. Dask's agg() has no nunique,
    # so each nunique is its own reduction, merged back on the group keys.
    grouped = frame.groupby(list(step.by), dropna=False, sort=False)
    named = {
        name: (agg.column if agg.column is not None else step.by[0], agg.func)
        for name, agg in step.aggs.items()
        if agg.func != "nunique"
    }
    parts = [grouped.agg(**named).reset_index()] if named else []
    parts += [
        grouped[agg.column].nunique().to_frame(name).reset_index()
        for name, agg in step.aggs.items()
        if agg.func == "nunique"
    ]
    result = parts[0]
    for part in parts[1:]:
        result = result.merge(part, on=list(step.by), how="outer")
    return result[[*step.by, *step.aggs]]


def build_frame(spec: JobSpec) -> dd.DataFrame:
    """The spec's output as a lazy dataframe; call inside :func:`backend_config`."""
    frame = read_source(spec.source)
    for index, step in enumerate(spec.steps):
        frame = apply_step(frame, step, index)
    return frame
