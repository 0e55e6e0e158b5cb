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
        return dd.read_parquet(files, columns=source.columns, blocksize=source.blocksize or "default")
    return dd.read_csv(files, usecols=source.columns, blocksize=source.blocksize or "64MiB")


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
    # The {column: [funcs]} form is the one dask-cudf and dask-pandas both take (cudf
    # has no named aggregation); the (column, func) result columns are then renamed.
    # Dask's agg() has no nunique, so each nunique is its own reduction, merged back
    # on the group keys. "size" counts rows: any non-key column serves.
    grouped = frame.groupby(list(step.by), dropna=False, sort=False)
    row_column = next((c for c in frame.columns if c not in step.by), step.by[0])
    wanted: dict[str, tuple[str, str]] = {
        name: (agg.column if agg.column is not None else row_column, agg.func)
        for name, agg in step.aggs.items()
        if agg.func != "nunique"
    }
    parts: list[dd.DataFrame] = []
    if wanted:
        by_column: dict[str, list[str]] = {}
        for column, func in wanted.values():
            by_column.setdefault(column, [])
            if func not in by_column[column]:
                by_column[column].append(func)
        aggregated = grouped.agg(by_column)
        aggregated.columns = [f"{column}\x1f{func}" for column, func in aggregated.columns]
        named = aggregated[[f"{column}\x1f{func}" for column, func in wanted.values()]]
        named.columns = list(wanted)
        parts.append(named.reset_index())
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
