"""The JobSpec: one pydantic model shared by REST, SDK, CLI, scheduler and tests.

A job reads one source, applies steps in order and writes one sink::

    name: revenue_by_region
    source: {format: parquet, path: data/sales/*.parquet}
    steps:
      - {op: filter, expr: "amount > 0 and region != 'test'"}
      - {op: groupby, by: [region], aggs: {revenue: {func: sum, column: amount}}}
    sink: {path: out/revenue_by_region}

Models only check shape and types; whether columns exist is checked against the
source's real schema by :mod:`jobs.validate` before any cluster work.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

ColumnName = Annotated[str, Field(min_length=1, max_length=256)]
ColumnList = Annotated[list[ColumnName], Field(min_length=1)]
Expr = Annotated[str, Field(min_length=1, max_length=2000, description="A whitelisted expression, e.g. `price * (1 - discount)`.")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceSpec(_Strict):
    """Where input rows come from: parquet or CSV files, a path, directory or glob."""

    format: Literal["parquet", "csv"] = Field(description="File format of the source.")
    path: str = Field(min_length=1, max_length=4096, description="A file, a directory or a glob such as `data/*.parquet`.")
    columns: list[ColumnName] | None = Field(default=None, description="Read only these columns (all when omitted).")
    blocksize: str | None = Field(
        default=None,
        pattern=r"^\d+(\.\d+)?\s*([KMGT]i?B)?$",
        description="Target partition size, e.g. '128MiB'. Smaller partitions bound each task's memory (dask-cudf's default is 1/32 of the GPU).",
    )


class FilterStep(_Strict):
    """Keep rows where a boolean expression holds."""

    op: Literal["filter"]
    expr: Expr


class SelectStep(_Strict):
    """Keep only these columns, in this order."""

    op: Literal["select"]
    columns: ColumnList


class AssignStep(_Strict):
    """Add (or replace) a column computed from an expression."""

    op: Literal["assign"]
    column: ColumnName
    expr: Expr


class RenameStep(_Strict):
    """Rename columns: a mapping from old name to new name."""

    op: Literal["rename"]
    columns: Annotated[dict[ColumnName, ColumnName], Field(min_length=1)]


AggFunc = Literal["sum", "mean", "min", "max", "count", "size", "std", "var", "nunique", "first"]
NUMERIC_AGGS = frozenset({"sum", "mean", "std", "var"})


class Aggregation(_Strict):
    """One output column of a groupby: ``func`` applied to ``column`` per group.

    ``size`` counts rows and takes no column; ``count`` counts non-null values.
    """

    func: AggFunc
    column: ColumnName | None = None

    @model_validator(mode="after")
    def _column_matches_func(self) -> Aggregation:
        if self.func == "size" and self.column is not None:
            raise ValueError("'size' counts rows per group and takes no column")
        if self.func != "size" and self.column is None:
            raise ValueError(f"'{self.func}' needs a column")
        return self


class GroupByStep(_Strict):
    """Group by key columns and aggregate; output has the keys plus one column per aggregation."""

    op: Literal["groupby"]
    by: ColumnList
    aggs: Annotated[dict[ColumnName, Aggregation], Field(min_length=1, description="Output column name → aggregation.")]


class SortStep(_Strict):
    """Sort by one or more columns."""

    op: Literal["sort"]
    by: ColumnList
    descending: bool | list[bool] = Field(default=False, description="One flag for all keys, or one per key.")

    @model_validator(mode="after")
    def _one_flag_per_key(self) -> SortStep:
        if isinstance(self.descending, list) and len(self.descending) != len(self.by):
            raise ValueError(f"descending has {len(self.descending)} flags for {len(self.by)} sort keys")
        return self


class LimitStep(_Strict):
    """Keep the first ``n`` rows (after any sort)."""

    op: Literal["limit"]
    n: int = Field(ge=0, le=1_000_000_000)


class DropDuplicatesStep(_Strict):
    """Drop repeated rows, judged on ``subset`` columns or on all columns."""

    op: Literal["drop_duplicates"]
    subset: ColumnList | None = None


class JoinStep(_Strict):
    """Join the current rows with a second source.

    Give ``on`` when the key columns share names, or ``left_on`` and ``right_on``.
    Right-side columns whose names clash get ``right_suffix``.
    """

    op: Literal["join"]
    right: SourceSpec
    how: Literal["inner", "left", "right", "outer"] = "inner"
    on: ColumnList | None = None
    left_on: ColumnList | None = None
    right_on: ColumnList | None = None
    right_suffix: str = Field(default="_right", min_length=1, max_length=64)

    @model_validator(mode="after")
    def _keys_given_once(self) -> JoinStep:
        if self.on is not None:
            if self.left_on is not None or self.right_on is not None:
                raise ValueError("give either 'on' or 'left_on' and 'right_on', not both")
        elif self.left_on is None or self.right_on is None:
            raise ValueError("give 'on', or both 'left_on' and 'right_on'")
        elif len(self.left_on) != len(self.right_on):
            raise ValueError("'left_on' and 'right_on' must have the same number of columns")
        return self

    @property
    def left_keys(self) -> list[str]:
        return list(self.on or self.left_on or [])

    @property
    def right_keys(self) -> list[str]:
        return list(self.on or self.right_on or [])


Step = Annotated[
    Union[FilterStep, SelectStep, AssignStep, RenameStep, GroupByStep, SortStep, LimitStep, DropDuplicatesStep, JoinStep],
    Field(discriminator="op"),
]
STEP_OPS = ("filter", "select", "assign", "rename", "groupby", "sort", "limit", "drop_duplicates", "join")


class SinkSpec(_Strict):
    """Where results go: a parquet directory that must not already hold data."""

    format: Literal["parquet"] = "parquet"
    path: str = Field(min_length=1, max_length=4096, description="Output directory; created on commit, never overwritten.")
    partition_on: list[ColumnName] = Field(default_factory=list, description="Hive-partition the output by these columns.")
    compression: Literal["snappy", "zstd", "gzip", "lz4", "none"] = "snappy"


class JobSpec(_Strict):
    """A complete ETL job: source → steps → sink."""

    name: str = Field(default="job", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", description="A label for people and logs.")
    source: SourceSpec
    steps: list[Step] = Field(default_factory=list, max_length=200)
    sink: SinkSpec
