"""The JobSpec: one pydantic model shared by REST, SDK, CLI, scheduler and tests.

A job reads a source, applies steps in order and writes one sink::

    name: revenue_by_region
    sources:
      products: {format: csv, path: data/products.csv}
    source: {format: parquet, path: data/sales/*.parquet}
    steps:
      - {op: filter, expr: "amount > 0 and region != 'test'"}
      - {op: join, right: products, on: [product_id]}
      - {op: groupby, by: [region], aggs: {revenue: {func: sum, expr: "amount * (1 - discount)"}}}
    sink: {path: out/revenue_by_region}

``source`` and a join's ``right`` are either a source written inline or the name of
one under ``sources``. A named source is files (:class:`SourceSpec`) or derived from
another named source by steps of its own (:class:`DerivedSource`, ``{from: name, steps:
[...]}``), as a SQL view or subquery is. Models check shape, types, that every name is
defined and that derived sources form no cycle; whether columns exist is checked against
the sources' real schemas by :mod:`jobs.validate` before any cluster work.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

ColumnName = Annotated[str, Field(min_length=1, max_length=256)]
ColumnList = Annotated[list[ColumnName], Field(min_length=1)]
Expr = Annotated[str, Field(min_length=1, max_length=2000, description="A whitelisted expression, e.g. `price * (1 - discount)`.")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The types a CSV or JSON-lines column can be declared as: the names ``cast()`` takes (jobs/expr.py CAST_TYPES,
#: less decimals; tests/test_text_types.py keeps the two lists alike).
ReadType = Literal["int64", "int32", "float64", "float32", "bool", "datetime64[ns]", "string"]


class SourceSpec(_Strict):
    """Where input rows come from: parquet, CSV or JSON-lines files, a path, directory or glob.

    A parquet directory laid out as ``key=value/`` folders (hive partitioning) adds
    each key as a column. A CSV or JSON-lines column's type comes from the first file's
    first rows (jobs.sources.text_read_types) unless ``types`` declares it.
    """

    format: Literal["parquet", "csv", "jsonl"] = Field(description="File format of the source; `jsonl` is one JSON object per line.")
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="A file, a directory (hive-partitioned parquet included) or a glob such as `data/*.parquet`.",
    )
    columns: list[ColumnName] | None = Field(default=None, description="Read only these columns (all when omitted).")
    blocksize: str | None = Field(
        default=None,
        pattern=r"^\d+(\.\d+)?\s*([KMGT]i?B)?$",
        description="Target partition size, e.g. '128MiB', at least 1KiB. Smaller partitions bound each task's memory (dask-cudf's default is 1/32 of the GPU).",
    )
    decimals: Literal["float64", "exact"] = Field(
        default="float64",
        description="Parquet decimal columns read as float64 (the default, on every engine) or kept `exact`: decimal(p, s) through "
        "every step to the sink, on the Polars engine only (docs/spec.md, 'Exact decimals').",
    )
    types: dict[ColumnName, ReadType] | None = Field(
        default=None,
        # Left out where not declared: a client built before the field (its SourceSpec refuses unknown fields)
        # still reads every job view and stored spec that does not use it.
        exclude_if=lambda value: value is None,
        description="CSV and JSON lines: column → the type both engines read it as (`int64`, `int32`, `float64`, `float32`, `bool`, "
        "`datetime64[ns]`, `string`), instead of the type its first file's first 1000 rows suggest; e.g. `{zip: string}`.",
    )

    @model_validator(mode="after")
    def _exact_decimals_are_parquet(self) -> SourceSpec:
        if self.decimals == "exact" and self.format != "parquet":
            raise ValueError(f"decimals: exact reads parquet decimal columns; a {self.format} source has none (its numbers are "
                             "read as int64 or float64): cast(x, 'decimal(p, s)') makes them exact")
        return self

    @field_validator("types")
    @classmethod
    def _types_are_for_text(cls, value: dict[str, str] | None, info: ValidationInfo) -> dict[str, str] | None:
        # A field validator, not the model's: the error then names source.types, not the whole source.
        if value is not None and info.data.get("format") == "parquet":
            raise ValueError("types declares the column types of a CSV or JSON-lines source; a parquet file carries its own "
                             "(cast(x, 'string') converts a column in a step)")
        return value

    @field_validator("blocksize")
    @classmethod
    def _blocksize_not_tiny(cls, value: str | None) -> str | None:
        # "0" divided by zero at run time; "1" made a partition per byte. The pattern already refuses negatives.
        if value is not None and blocksize_bytes(value) < MIN_BLOCKSIZE_BYTES:
            raise ValueError(f"blocksize '{value}' is under the minimum of 1KiB (1024 bytes): give e.g. '16MiB'")
        return value


#: The smallest ``blocksize`` a source may ask for.
MIN_BLOCKSIZE_BYTES = 1024
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def blocksize_bytes(text: str) -> int:
    """The bytes a ``blocksize`` (already matched by its pattern: '64MiB', '1.5GB', '4096') stands for, as dask reads it."""
    number = text.rstrip("KMGTiB \t")
    unit = text[len(number) :].strip().upper()
    return int(float(number) * _UNITS[unit])


SourceName = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="The name of a source under `sources`.")
]
_SOURCE_NAME = TypeAdapter(SourceName)


def _named_or_inline(value: Any, handler: ValidatorFunctionWrapHandler) -> SourceSpec | str:
    # Not the plain union: pydantic would prefix each error's location with the member
    # tried ("source.SourceSpec.format"); this keeps the path a user wrote ("source.format").
    if isinstance(value, str):
        return _SOURCE_NAME.validate_python(value)
    return SourceSpec.model_validate(value)


SourceRef = Annotated[SourceSpec | SourceName, WrapValidator(_named_or_inline)]


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


AggFunc = Literal[
    "sum", "mean", "median", "quantile", "min", "max", "count", "size", "std", "var", "nunique", "count_distinct", "first", "last",
    "any", "all", "mode", "corr", "covar", "string_agg",
]
NUMERIC_AGGS = frozenset({"sum", "mean", "median", "quantile", "std", "var", "corr", "covar"})
#: Aggregations of two inputs, the second given by ``other`` or ``other_expr``.
PAIR_AGGS = frozenset({"corr", "covar"})


class SortKey(_Strict):
    """One key of an ordering."""

    column: ColumnName
    descending: bool = False


class Aggregation(_Strict):
    """One output column of a groupby: ``func`` applied per group to ``column`` or to ``expr``.

    ``size`` counts rows and takes neither; ``count`` counts non-null values;
    ``expr`` aggregates a computed value, e.g. ``{func: sum, expr: "price * (1 - discount)"}``;
    ``quantile`` takes ``q``, the fraction (0.95 for the 95th percentile); ``corr`` and
    ``covar`` take a second input, ``other`` (a column) or ``other_expr``; ``string_agg``
    takes a ``separator`` and, for a defined order of the joined values, ``order_by``.
    """

    func: AggFunc
    column: ColumnName | None = None
    expr: Expr | None = None
    q: float | None = Field(default=None, ge=0, le=1, description="quantile: the fraction of values at or below the result.")
    other: ColumnName | None = Field(default=None, description="corr, covar: the second column.")
    other_expr: Expr | None = Field(default=None, description="corr, covar: the second input, computed.")
    separator: str | None = Field(default=None, max_length=100, description="string_agg: put between the values (default ',').")
    order_by: list[SortKey] | None = Field(
        default=None, min_length=1, description="string_agg: join the values in this order (nulls last); unset: in no defined order."
    )

    @model_validator(mode="after")
    def _input_matches_func(self) -> Aggregation:
        if self.column is not None and self.expr is not None:
            raise ValueError("give either 'column' or 'expr', not both")
        if self.func == "size" and (self.column is not None or self.expr is not None):
            raise ValueError("'size' counts rows per group and takes no column")
        if self.func != "size" and self.column is None and self.expr is None:
            raise ValueError(f"'{self.func}' needs a column or an expr")
        if (self.func == "quantile") != (self.q is not None):
            raise ValueError("'quantile' needs 'q' (e.g. 0.95), and only it takes one")
        if self.func in PAIR_AGGS and (self.other is None) == (self.other_expr is None):
            raise ValueError(f"'{self.func}' needs a second input: give 'other' (a column) or 'other_expr', one of them")
        if self.func not in PAIR_AGGS and (self.other is not None or self.other_expr is not None):
            raise ValueError(f"'other' and 'other_expr' belong to corr and covar, not '{self.func}'")
        if self.func != "string_agg" and (self.separator is not None or self.order_by is not None):
            raise ValueError(f"'separator' and 'order_by' belong to string_agg, not '{self.func}'")
        return self


class GroupByStep(_Strict):
    """Group by key columns and aggregate; output has the keys plus one column per aggregation.

    With ``by: []`` every row is in one group, so the output is one row (none when
    there are no input rows, unlike SQL's global aggregate, which gives one row of nulls).
    """

    op: Literal["groupby"]
    by: list[ColumnName] = Field(description="Group key columns; empty aggregates all rows into one.")
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


class TopKStep(_Strict):
    """Keep the first ``k`` rows of each group in ``order``; the rows come out in that order.

    Ties at the k-th place are broken arbitrarily, as by SQL's ``ROW_NUMBER() <= k``.
    """

    op: Literal["top_k"]
    by: ColumnList = Field(description="Group key columns.")
    order: Annotated[list[SortKey], Field(min_length=1, description="Ordering within each group.")]
    k: int = Field(ge=1, le=1_000_000, description="Rows kept per group.")


WindowFunc = Literal["row_number", "rank", "dense_rank", "ntile", "percent_rank", "cume_dist", "lag", "lead", "sum", "count", "min", "max",
                     "mean", "first_value", "last_value"]
#: Window functions that take the value of one row of the frame (its first or last, null or not).
VALUE_WINDOW_FUNCS = frozenset({"first_value", "last_value"})
#: Window functions that number or shift rows, so need an order; the rest aggregate over a frame.
RANKING_WINDOW_FUNCS = frozenset({"row_number", "rank", "dense_rank", "ntile", "percent_rank", "cume_dist"})
#: Those whose value counts a row's peers (rows with equal ``order_by`` values).
PEER_WINDOW_FUNCS = frozenset({"rank", "dense_rank", "percent_rank", "cume_dist"})
OFFSET_WINDOW_FUNCS = frozenset({"lag", "lead"})
LiteralValue = int | float | str | bool | None


class WindowColumn(_Strict):
    """One output column of a window step: ``func`` over the rows of each partition.

    ``row_number``, ``rank``, ``dense_rank``, ``percent_rank`` and ``cume_dist`` take no input,
    ``ntile`` the number of ``buckets``; ``lag`` and ``lead`` take a
    ``column`` or ``expr``, an ``offset`` (rows back or ahead, default 1) and a ``default``
    for rows that have no such neighbour. The aggregates (``sum``, ``count``, ``min``,
    ``max``, ``mean``) take an input and a ``frame``: the whole ``partition`` (the default),
    the ``running`` rows from the partition's first to this one, or ``rolling``: this row and
    the ``preceding`` rows before it (and the ``following`` rows after it, when given).
    ``first_value`` and ``last_value`` take the value of the
    frame's first or last row, null or not.
    """

    func: WindowFunc
    column: ColumnName | None = None
    expr: Expr | None = None
    offset: int | None = Field(default=None, ge=1, le=1_000_000, description="lag/lead: how many rows back or ahead (default 1).")
    default: LiteralValue = Field(default=None, description="lag/lead: the value where no row lies that far away (default null).")
    frame: Literal["partition", "running", "rolling"] | None = Field(
        default=None, description="Aggregates: the whole partition (default), the running rows up to this one, or rolling."
    )
    preceding: int | None = Field(default=None, ge=0, le=100_000, description="rolling: rows before this one in the frame.")
    following: int | None = Field(default=None, ge=1, le=100_000, description="rolling: rows after this one in the frame (default none).")
    buckets: int | None = Field(default=None, ge=1, le=1_000_000, description="ntile: how many groups of near-equal size the rows form.")

    @model_validator(mode="after")
    def _fields_fit_func(self) -> WindowColumn:
        has_input = self.column is not None or self.expr is not None
        if (self.func == "ntile") != (self.buckets is not None):
            raise ValueError("'ntile' needs 'buckets' (how many groups, e.g. 4 for quartiles), and only it takes one")
        if self.column is not None and self.expr is not None:
            raise ValueError("give either 'column' or 'expr', not both")
        if self.func in RANKING_WINDOW_FUNCS and has_input:
            raise ValueError(f"'{self.func}' numbers rows and takes no column or expr")
        if self.func not in RANKING_WINDOW_FUNCS and not has_input:
            raise ValueError(f"'{self.func}' needs a column or an expr")
        if self.func not in OFFSET_WINDOW_FUNCS and (self.offset is not None or self.default is not None):
            raise ValueError(f"'offset' and 'default' belong to lag and lead, not '{self.func}'")
        if self.func in RANKING_WINDOW_FUNCS | OFFSET_WINDOW_FUNCS and self.frame is not None:
            raise ValueError(f"'frame' belongs to the aggregates (sum, count, min, max, mean), not '{self.func}'")
        if (self.frame == "rolling") != (self.preceding is not None):
            raise ValueError("a 'rolling' frame needs 'preceding' (rows before this one), and only it takes one")
        if self.following is not None and self.frame != "rolling":
            raise ValueError("'following' (rows after this one) belongs to a 'rolling' frame")
        return self

    @property
    def needs_order(self) -> bool:
        """Whether the result depends on the order of rows within the partition."""
        return self.func in RANKING_WINDOW_FUNCS | OFFSET_WINDOW_FUNCS | VALUE_WINDOW_FUNCS or self.frame in ("running", "rolling")


class WindowStep(_Strict):
    """Add columns computed over each row's partition, as SQL's ``func(...) OVER (PARTITION BY ... ORDER BY ...)``.

    Every row is kept; rows with equal ``partition_by`` values (null included) form a
    partition, ordered by ``order_by`` (nulls last). Ties in ``order_by`` are broken
    arbitrarily for row_number, lag, lead and running or rolling frames (SQL's ROWS frames);
    rank and dense_rank give tied rows the same number. Rows come out in no defined order.
    """

    op: Literal["window"]
    partition_by: list[ColumnName] = Field(default_factory=list, description="Partition key columns; none: all rows are one partition.")
    order_by: list[SortKey] = Field(default_factory=list, description="Ordering within each partition.")
    columns: Annotated[dict[ColumnName, WindowColumn], Field(min_length=1, description="Output column name → window function.")]


class LimitStep(_Strict):
    """Keep the first ``n`` rows (after any sort)."""

    op: Literal["limit"]
    n: int = Field(ge=0, le=1_000_000_000)


class DropDuplicatesStep(_Strict):
    """Drop repeated rows, judged on ``subset`` columns or on all columns."""

    op: Literal["drop_duplicates"]
    subset: ColumnList | None = None


_KEYLESS_JOIN = {"if": {"properties": {"how": {"const": "cross"}}, "required": ["how"]},
                 "then": {"not": {"anyOf": [{"required": ["on"]}, {"required": ["left_on"]}, {"required": ["right_on"]}]}}}


class JoinStep(_Strict):
    """Join the current rows with a second source, inline or named under ``sources``.

    Give ``on`` when the key columns share names, or ``left_on`` and ``right_on``.
    Right-side columns whose names clash get ``right_suffix``. ``semi`` keeps the
    rows that have a match and ``anti`` those that have none, adding no column; as
    in SQL's ``EXISTS``, a null key matches nothing. ``cross`` pairs every row with
    every right row and takes no keys. ``where``, a condition over the joined row's
    columns (right-side names suffixed where they clash), is more of SQL's ``ON``: a pair
    of rows matches when its keys match (keys are optional then) and the condition holds.
    ``inner`` and ``cross`` keep the matching pairs; ``left``, ``right`` and ``outer`` also
    keep each row of their kept side that matches nothing, with nulls for the other side;
    ``semi`` and ``anti`` keep the left rows with at least one match, or none.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_KEYLESS_JOIN)

    op: Literal["join"]
    right: SourceRef
    how: Literal["inner", "left", "right", "outer", "semi", "anti", "cross"] = "inner"
    on: ColumnList | None = None
    left_on: ColumnList | None = None
    right_on: ColumnList | None = None
    right_suffix: str = Field(default="_right", min_length=1, max_length=64)
    where: Expr | None = Field(
        default=None,
        description="A condition over the joined columns that a pair of rows must meet to match, as in SQL's ON (e.g. a range); "
                    "left, right and outer joins keep their unmatched rows with nulls, semi and anti test for a matching pair.",
    )

    @model_validator(mode="after")
    def _keys_given_once(self) -> JoinStep:
        keyless = self.how == "cross" or self.where is not None
        if self.how == "cross" and (self.on is not None or self.left_on is not None or self.right_on is not None):
            raise ValueError("a cross join pairs every row with every right row and takes no keys: drop 'on', 'left_on' and 'right_on'")
        if self.on is not None:
            if self.left_on is not None or self.right_on is not None:
                raise ValueError("give either 'on' or 'left_on' and 'right_on', not both")
        elif keyless and self.left_on is None and self.right_on is None:
            pass
        elif self.left_on is None or self.right_on is None:
            raise ValueError("give 'on', or both 'left_on' and 'right_on'" + ("" if keyless else " (or a 'where' condition)"))
        elif len(self.left_on) != len(self.right_on):
            raise ValueError("'left_on' and 'right_on' must have the same number of columns")
        return self

    @property
    def left_keys(self) -> list[str]:
        return list(self.on or self.left_on or [])

    @property
    def right_keys(self) -> list[str]:
        return list(self.on or self.right_on or [])


class UnionStep(_Strict):
    """Append the rows of other sources, inline or named, as SQL's ``UNION ALL`` (``distinct``: ``UNION``).

    Columns are matched by name, not position: every source must have the current rows'
    columns, each of a kind that fits; the output keeps the current rows' column order.
    ``distinct`` drops repeated rows from the whole result, as ``UNION`` does.
    """

    op: Literal["union"]
    sources: Annotated[list[SourceRef], Field(min_length=1, max_length=64, description="The sources whose rows are appended.")]
    distinct: bool = Field(default=False, description="Drop repeated rows of the result (UNION), instead of keeping all (UNION ALL).")


#: What a pivot may aggregate: the aggregations of one input that skip nulls, so a cell sees only its own rows.
PivotFunc = Literal["sum", "mean", "median", "min", "max", "count", "nunique", "count_distinct", "first", "last", "std", "var"]
PivotValue = int | Annotated[str, Field(max_length=200)] | bool | Annotated[float, Field(allow_inf_nan=False)]
MAX_PIVOT_VALUES = 1000


def _value_column(prefix: str, value: PivotValue) -> str:
    return prefix + (str(value).lower() if isinstance(value, bool) else str(value))


class PivotStep(_Strict):
    """Turn the listed values of one column into columns, as SQL's ``PIVOT`` (``agg(x) FILTER (WHERE c = v)``).

    One output row per distinct combination of ``index`` (all rows in one without), then one
    column per value in ``on_values``, named ``prefix`` + the value, holding ``agg`` of
    ``values`` over the group's rows whose ``columns`` equals that value: null where there
    are none (``count`` and ``nunique`` give 0). Rows whose value is not listed count nowhere.
    The values must be listed: the output's columns are known at submit.
    """

    op: Literal["pivot"]
    index: list[ColumnName] = Field(default_factory=list, description="Group key columns: one output row per combination.")
    columns: ColumnName = Field(description="The column whose values become output columns.")
    values: ColumnName = Field(description="The column aggregated into each cell.")
    agg: PivotFunc = Field(description="The aggregation of each cell.")
    prefix: str = Field(default="", max_length=64, description="Put before each value to name its column.")
    # Unset is an error of its own (validate_default), so the message can say why values are listed.
    on_values: list[PivotValue] | None = Field(
        default=None, max_length=MAX_PIVOT_VALUES, validate_default=True, description="The values of `columns` that become columns, in this order."
    )

    @field_validator("on_values")
    @classmethod
    def _values_listed(cls, values: list[PivotValue] | None, info: ValidationInfo) -> list[PivotValue]:
        if not values:
            raise ValueError(f"a pivot needs the values of '{info.data.get('columns', '?')}' that become columns (at most "
                             f"{MAX_PIVOT_VALUES}); values found in the data are not taken, so the output's columns are known at submit")
        seen: set[str] = set()
        for value in values:
            if (name := _value_column(info.data.get("prefix", ""), value)) in seen:
                raise ValueError(f"{value!r} is listed twice (column '{name}')")
            seen.add(name)
        return values

    def column_name(self, value: PivotValue) -> str:
        """The output column of one listed value: the prefix, then the value as text (``true`` for True)."""
        return _value_column(self.prefix, value)

    @property
    def output_columns(self) -> dict[str, PivotValue]:
        """Output column name → the value it holds, in ``on_values`` order."""
        return {self.column_name(value): value for value in self.on_values or []}


class UnpivotStep(_Strict):
    """Turn columns into rows, as SQL's ``UNPIVOT``: one row per input row and listed column.

    Each output row has the ``index`` columns, the name of one of ``columns`` in ``name`` and its
    value in ``value``. As SQL's ``UNPIVOT``, rows whose value is null are left out unless
    ``include_nulls``. The listed columns must share a kind (numbers of any width mix).
    """

    op: Literal["unpivot"]
    columns: ColumnList = Field(description="The columns turned into rows.")
    index: list[ColumnName] | None = Field(default=None, description="Columns kept on every row; default: every column not listed in `columns`.")
    name: ColumnName = Field(default="name", description="The output column holding the unpivoted column's name.")
    value: ColumnName = Field(default="value", description="The output column holding its value.")
    include_nulls: bool = Field(default=False, description="Keep the rows whose value is null (SQL's INCLUDE NULLS).")

    @model_validator(mode="after")
    def _names_differ(self) -> UnpivotStep:
        if self.name == self.value:
            raise ValueError(f"'name' and 'value' are both '{self.name}': give two different column names")
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("'columns' lists a column twice")
        return self


Step = Annotated[
    Union[
        FilterStep, SelectStep, AssignStep, RenameStep, GroupByStep, SortStep, LimitStep, DropDuplicatesStep, JoinStep, TopKStep,
        WindowStep, UnionStep, PivotStep, UnpivotStep,
    ],
    Field(discriminator="op"),
]
STEP_OPS = (
    "filter", "select", "assign", "rename", "groupby", "sort", "limit", "drop_duplicates", "join", "top_k", "window", "union", "pivot",
    "unpivot",
)
Steps = Annotated[list[Step], Field(max_length=200)]
#: Most steps one job may have in all: its own and every derived source's (each list holds at most 200).
MAX_TOTAL_STEPS = 1000


class DerivedSource(_Strict):
    """A named source computed from another one: the rows of ``from`` through ``steps``.

    ``from`` names a source under ``sources`` (files or derived); the steps are any steps,
    joins with other named sources included. Wherever the name is used, the same rows
    are meant, and the pipeline computes them once.
    """

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)

    from_: SourceName = Field(alias="from", description="The named source whose rows the steps start from.")
    steps: Steps = Field(description="What to do with those rows, in order, as a job's steps.")


class SqlSource(_Strict):
    """A named source whose rows are a SQL ``SELECT`` over the spec's other named sources.

    The text is parsed and checked against a whitelist at submit (jobs/sql_check.py): one
    SELECT query (CTEs, joins, subqueries, set operations, grouping, CASE, CAST, listed
    functions) whose tables are the spec's named sources and its own CTEs. It runs on the
    Polars engine only (polars.SQLContext, cudf-polars on the GPU), from SQL regenerated
    from the checked tree.
    """

    sql: str = Field(min_length=1, max_length=100_000, description="One SELECT query; its tables are the spec's other named sources.")


def _files_or_derived(value: Any, handler: ValidatorFunctionWrapHandler) -> SourceSpec | DerivedSource | SqlSource:
    # Told apart by `from` (or `sql`), not tried in turn as a plain union would be: errors then name
    # the fields the user wrote (sources.late.steps[0].expr), without a member's name in the path.
    if isinstance(value, DerivedSource) or (isinstance(value, dict) and "from" in value):
        return DerivedSource.model_validate(value)
    if isinstance(value, SqlSource) or (isinstance(value, dict) and "sql" in value):
        return SqlSource.model_validate(value)
    return SourceSpec.model_validate(value)


NamedSource = Annotated[SourceSpec | DerivedSource | SqlSource, WrapValidator(_files_or_derived)]
Loc = tuple[str | int, ...]


def _step_references(at: Loc, steps: Sequence[Step]) -> Iterator[tuple[Loc, SourceSpec | str]]:
    """(location, reference) of every source the steps read: joins' ``right``, unions' ``sources``."""
    for index, step in enumerate(steps):
        # The step's op is in the location, as pydantic puts a union member's tag there.
        if isinstance(step, JoinStep):
            yield (*at, index, step.op, "right"), step.right
        elif isinstance(step, UnionStep):
            yield from (((*at, index, step.op, "sources", position), ref) for position, ref in enumerate(step.sources))


class SinkSpec(_Strict):
    """Where results go: a directory (or object-store prefix) of parquet or CSV part files.

    ``mode`` says what to do when the sink already holds output: ``error`` refuses the
    job, ``overwrite`` replaces the output, ``append`` adds files to it. Every commit
    is atomic for readers of ``_manifest.json``; docs/sinks.md says exactly what each
    kind of reader sees, on local disk and on object stores.
    """

    format: Literal["parquet", "csv"] = Field(default="parquet", description="File format of the output part files.")
    path: str = Field(min_length=1, max_length=4096, description="Output directory or object-store prefix (s3://bucket/prefix).")
    mode: Literal["error", "overwrite", "append"] = Field(
        default="error",
        description="When the sink holds output: 'error' refuses the job at submit; 'overwrite' replaces the output; "
        "'append' adds this job's files (same columns required).",
    )
    partition_on: list[ColumnName] = Field(default_factory=list, description="Hive-partition the output by these columns (parquet only).")
    compression: Literal["snappy", "zstd", "gzip", "lz4", "none"] | None = Field(
        default=None, description="Codec: parquet takes any (default snappy); CSV takes gzip or none (the default)."
    )
    row_group_size: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Most rows per parquet row group (parquet only); the writer's default when unset."
    )

    @field_validator("partition_on", "row_group_size")
    @classmethod
    def _parquet_only(cls, value: Any, info: ValidationInfo) -> Any:
        if value and info.data.get("format") == "csv":
            raise ValueError(f"{info.field_name} applies to parquet sinks only; this sink's format is csv")
        return value

    @field_validator("compression")
    @classmethod
    def _codec_fits_format(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value not in (None, "none", "gzip") and info.data.get("format") == "csv":
            raise ValueError(f"a csv sink takes compression 'gzip' or 'none', not '{value}'")
        return value

    @property
    def codec(self) -> str | None:
        """The codec to write with (None: uncompressed), the format's default filled in."""
        chosen = self.compression or ("snappy" if self.format == "parquet" else "none")
        return None if chosen == "none" else chosen


#: The most ``timeout_s`` may be anywhere; a service's own maximum (``SPILLWAY_MAX_JOB_TIMEOUT_S``) is at most this.
TIMEOUT_CEILING_S = 30 * 86_400.0
_max_timeout_s = TIMEOUT_CEILING_S


def limit_timeouts(max_timeout_s: float) -> None:
    """Refuse a ``timeout_s`` over ``max_timeout_s`` in this process from now on (the service's Settings call this).

    A check in the model, not in one route, so every way in (REST, pipelines, validate) answers it the same.
    """
    global _max_timeout_s
    _max_timeout_s = min(max_timeout_s, TIMEOUT_CEILING_S)


class JobSpec(_Strict):
    """A complete ETL job: source → steps → sink."""

    name: str = Field(default="job", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", description="A label for people and logs.")
    sources: dict[SourceName, NamedSource] = Field(
        default_factory=dict,
        max_length=64,
        description="Named sources that `source` and joins can refer to by name: files, or `{from: name, steps: [...]}` "
        "for rows derived from another named source.",
    )
    source: SourceRef = Field(description="The rows the steps start from: a source inline, or the name of one under `sources`.")
    steps: Steps = Field(default_factory=list)
    sink: SinkSpec
    engine: Literal["auto", "polars", "dask"] | None = Field(
        default=None,
        description="Which engine runs the job: `polars` (Polars on the CPU, cudf-polars on the GPUs), `dask` (Dask "
        "dataframe: pandas or dask-cudf), or `auto` (Polars unless it cannot run this spec). Unset: the service's default.",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=TIMEOUT_CEILING_S,
        description="Seconds the job may run, from RUNNING until its commit starts, before it fails as `timed_out`: its tasks "
        "are cancelled, the workers running them restarted, nothing is committed. Unset: the service's default "
        "(SPILLWAY_DEFAULT_JOB_TIMEOUT_S); never more than the service's maximum (SPILLWAY_MAX_JOB_TIMEOUT_S).",
    )

    @field_validator("timeout_s")
    @classmethod
    def _within_the_service_maximum(cls, value: float | None) -> float | None:
        if value is not None and value > _max_timeout_s:
            raise ValueError(f"timeout_s {value:g} is over this service's maximum of {_max_timeout_s:g} s (SPILLWAY_MAX_JOB_TIMEOUT_S)")
        return value

    @model_validator(mode="after")
    def _names_are_defined_and_acyclic(self) -> JobSpec:
        known = ", ".join(self.sources) or "(none)"
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "unknown_source", "no source named '{name}' under sources; defined: {known}", {"name": ref, "known": known}
                ),
                loc=loc,
                input=ref,
            )
            for loc, ref in self._references()
            if isinstance(ref, str) and ref not in self.sources
        ]
        if not errors and (cycle := self._cycle()) is not None:
            loc, names = cycle
            errors.append(
                InitErrorDetails(
                    type=PydanticCustomError(
                        "source_cycle",
                        "sources form a cycle: {cycle}; a derived source cannot depend on itself",
                        {"cycle": " → ".join(names)},
                    ),
                    loc=loc,
                    input=names[-1],
                )
            )
        if self.engine == "dask" and (sql := next(iter(self.sql_sources()), None)) is not None:
            errors.append(InitErrorDetails(
                type=PydanticCustomError("engine_cannot_run_sql", "the Dask engine does not run SQL, and source '{name}' is SQL "
                                         "(sources.{name}.sql): use engine: polars or auto", {"name": sql}),
                loc=("engine",), input=self.engine))
        elif self.engine == "dask" and (exact := next(iter(self.exact_decimal_sources()), None)) is not None:
            errors.append(InitErrorDetails(
                type=PydanticCustomError("engine_cannot_run_exact_decimals", "the Dask engine computes decimals as float64, and "
                                         "{field}.decimals is exact: use engine: polars or auto, or decimals: float64", {"field": exact}),
                loc=("engine",), input=self.engine))
        if errors:
            # Raised as a ValidationError so each error keeps its own location (steps[3].right).
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @model_validator(mode="after")
    def _total_steps_capped(self) -> JobSpec:
        # Each list is capped at 200, but 64 derived sources of 200 were 12,600 steps to check and plan.
        total = 0
        for at, steps in self.step_lists():
            total += len(steps)
            if total > MAX_TOTAL_STEPS:
                loc: Loc = tuple(part for part in at.split(".", 2))
                error = PydanticCustomError(
                    "too_many_steps",
                    "the job has {total} steps in all by the end of {at} (its own and its derived sources'), over the limit of "
                    "{limit}: split it into jobs that read each other's output",
                    {"limit": MAX_TOTAL_STEPS, "at": at, "total": total},
                )
                raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(type=error, loc=loc, input=len(steps))])
        return self

    def derived_sources(self) -> dict[str, DerivedSource]:
        """The named sources that are derived from others, by name, in definition order."""
        return {name: source for name, source in self.sources.items() if isinstance(source, DerivedSource)}

    def sql_sources(self) -> dict[str, SqlSource]:
        """The named sources that are SQL queries, by name, in definition order."""
        return {name: source for name, source in self.sources.items() if isinstance(source, SqlSource)}

    def exact_decimal_sources(self) -> list[str]:
        """The fields (``source``, ``sources.x``, ``steps[1].right``) of the file sources that keep decimals exact."""
        return [field for field, source in self.source_fields() if source.decimals == "exact"]

    def polars_only(self) -> tuple[str, str] | None:
        """Why only the Polars engine runs this spec: (the field, the reason); None when both can."""
        if sql := next(iter(self.sql_sources()), None):
            return f"sources.{sql}.sql", f"source '{sql}' is SQL, which only the Polars engine runs"
        if exact := next(iter(self.exact_decimal_sources()), None):
            return f"{exact}.decimals", f"{exact} reads decimals exactly, which only the Polars engine computes"
        return None

    def _references(self) -> Iterator[tuple[Loc, SourceSpec | str]]:
        """(location, reference) for every source reference: ``source``, joins, unions, and each
        derived source's ``from``, joins and unions."""
        yield ("source",), self.source
        yield from _step_references(("steps",), self.steps)
        for name in self.derived_sources():
            yield from self._dependencies(name)

    def _dependencies(self, name: str) -> Iterator[tuple[Loc, SourceSpec | str]]:
        derived = self.derived_sources()[name]
        yield ("sources", name, "from"), derived.from_
        yield from _step_references(("sources", name, "steps"), derived.steps)

    def _cycle(self) -> tuple[Loc, list[str]] | None:
        """The first cycle among derived sources, searched in definition order: the location of
        the reference that closes it, and the names around it (the first one repeated last)."""
        derived = self.derived_sources()
        done: set[str] = set()
        path: list[str] = []

        def visit(name: str) -> tuple[Loc, list[str]] | None:
            path.append(name)
            for loc, ref in self._dependencies(name):
                if not isinstance(ref, str) or ref not in derived or ref in done:
                    continue  # files end a chain, and a finished name leads to no cycle
                if ref in path:
                    return loc, [*path[path.index(ref) :], ref]
                if (found := visit(ref)) is not None:
                    return found
            path.pop()
            done.add(name)
            return None

        return next((found for name in derived if name not in done and (found := visit(name)) is not None), None)

    def resolve(self, ref: SourceSpec | str, field: str) -> tuple[SourceSpec | DerivedSource | SqlSource, str]:
        """The source ``ref`` stands for, and the field that defines it (``sources.<name>`` for a name)."""
        if isinstance(ref, str):
            return self.sources[ref], f"sources.{ref}"
        return ref, field

    def source_fields(self) -> Iterator[tuple[str, SourceSpec]]:
        """(field, source) for every source of files this job defines, each once: inline,
        named, and inline in the joins and unions of the job's and its derived sources' steps."""
        if isinstance(self.source, SourceSpec):
            yield "source", self.source
        for name, source in self.sources.items():
            if isinstance(source, SourceSpec):
                yield f"sources.{name}", source
        for at, steps in self.step_lists():
            for index, step in enumerate(steps):
                if isinstance(step, JoinStep) and isinstance(step.right, SourceSpec):
                    yield f"{at}[{index}].right", step.right
                if isinstance(step, UnionStep):
                    for position, ref in enumerate(step.sources):
                        if isinstance(ref, SourceSpec):
                            yield f"{at}[{index}].sources[{position}]", ref

    def step_lists(self) -> Iterator[tuple[str, list[Step]]]:
        """(field, steps) for the job's steps and each derived source's, e.g. ``sources.late.steps``."""
        yield "steps", self.steps
        for name, derived in self.derived_sources().items():
            yield f"sources.{name}.steps", derived.steps
