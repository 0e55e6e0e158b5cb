"""Logical plan → Polars LazyFrame: the Polars engine's lowering of sources and steps.

The same language as the Dask engine (:mod:`jobs.pipeline`), the same answers (docs/spec.md,
"Engines"): sources are read as the Dask engine reads them (decimals as float64, dates as
microsecond datetimes), nulls follow the language's rules, and each step's columns come out
in the order validation worked out. A named source is one LazyFrame however often it is used;
Polars computes a shared part once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from spillway.jobs.ir import columns_of
from spillway.jobs.join_condition_polars import LEFT_ROW, RIGHT_ROW, join_with_condition
from spillway.jobs.join_key_types import join_key_type
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.named_sources import NamedSources
from spillway.jobs.lower_polars import has_integer_arithmetic, orders_numbers, to_polars
from spillway.jobs.polars_io import csv_read_without_a_column, scan_source_as_stored, with_read_types
from spillway.jobs.polars_rows import COUNTERS, in_order, position, with_counters
from spillway.jobs.spec import (
    Aggregation,
    AssignStep,
    DropDuplicatesStep,
    FilterStep,
    GroupByStep,
    JoinStep,
    LimitStep,
    PivotStep,
    RenameStep,
    SelectStep,
    SortStep,
    SourceSpec,
    Step,
    TopKStep,
    UnionStep,
    UnpivotStep,
    WindowStep,
)
from spillway.jobs.reshape import pivot_steps
from spillway.jobs.scan_rows import source_rows
from spillway.jobs.sql_check import SqlRefused
from spillway.jobs.sql_nan import NanTermsTooLarge
from spillway.jobs.sql_source import run_sql
from spillway.jobs.window_polars import window_columns

_HIDDEN = "__spillway_"
#: A column of int64 ones that a groupby's row counts sum. Polars' len() and count() are uint32 (its index type), and
#: cudf-polars' streaming groupby adds up the partitions' partial counts in that type: on an H100, a group of
#: 48,128,054,327 rows counted 883,414,071 (the count modulo 2^32), silently. A sum of int64 ones is an int64 throughout.
_ONES = f"{_HIDDEN}ones"
_HOW = {"inner": "inner", "left": "left", "right": "right", "outer": "full", "semi": "semi", "anti": "anti", "cross": "cross"}
# Counts come out as Polars' u32; as Int64 they match the Dask engine's and SQL's type.
_COUNTS = ("count", "size", "nunique", "count_distinct")


def pair_moment(func: str, x: pl.Expr, y: pl.Expr) -> pl.Expr:
    """Sample covariance (``covar``) or correlation (``corr``) of the rows where both are non-null,
    in two passes, as SQL's ``COVAR_SAMP``/``CORR``: null for fewer than two pairs, and a
    correlation with a constant side is null."""
    both = x.is_not_null() & y.is_not_null()
    x, y = pl.when(both).then(x).cast(pl.Float64), pl.when(both).then(y).cast(pl.Float64)
    dx, dy = x - x.mean(), y - y.mean()
    sxy = (dx * dy).sum()
    if func == "covar":
        n = both.sum()
        return pl.when(n >= 2).then(sxy / (n - 1))
    sxx, syy = (dx * dx).sum(), (dy * dy).sum()
    return pl.when((sxx > 0) & (syy > 0)).then(sxy / (sxx * syy).sqrt())


def _compared_keys(frame: pl.LazyFrame, right: pl.LazyFrame, step: JoinStep) -> dict[int, pl.DataType]:
    """The key pairs of ``step``, by position, that Polars joins only cast (:func:`join_key_type`), with that type.

    None where the types agree, as in every TPC-H join, whose plans are thus unchanged."""
    if not step.left_keys:
        return {}
    left_types, right_types = frame.collect_schema(), right.collect_schema()
    pairs = enumerate(zip(step.left_keys, step.right_keys, strict=True))
    return {i: common for i, (left, other) in pairs if (common := join_key_type(left_types[left], right_types[other])) is not None}


def _cast_keys(keys: list[str], compared: dict[int, pl.DataType]) -> list[pl.Expr]:
    """The key columns ``keys``, those of a pair in ``compared`` (:func:`_compared_keys`) cast to its type."""
    return [pl.col(key).cast(compared[i]) if i in compared else pl.col(key) for i, key in enumerate(keys)]


def _int64_constant(expr: pl.Expr) -> pl.Expr:
    """``expr``, cast to int64 where it reads no column and gives a narrower integer: Polars types an integer literal
    (``1``, a folded ``1 + 1``) Int32, where the language's integers (and the Dask engine's) are int64, so a column of
    it would be written int32 on this engine alone (and an append onto the other's output refused)."""
    if expr.meta.root_names():
        return expr
    dtype = pl.LazyFrame().select(expr).collect_schema().dtypes()[0]
    return expr.cast(pl.Int64) if dtype.is_integer() and dtype != pl.Int64 else expr


#: Integer types Polars sums in their own type (Int8/16 and UInt8/16 it widens to Int64 itself; listed all the same).
_NARROW_INTEGERS = frozenset({pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32})


@dataclass(frozen=True)
class _Uncast:
    """A frame that is its read casts over ``stored`` (a scan, filtered or joined, in the files' own types)."""

    frame: pl.LazyFrame
    stored: pl.LazyFrame
    casts: dict[str, pl.DataType]
    #: Whether filters have dropped rows of the scan (a join with it is then likely to drop rows of the other side).
    filtered: bool


class PolarsFrames(NamedSources[pl.LazyFrame]):
    """Builds the LazyFrame of a checked job, each named source once."""

    def __init__(self, plan: LogicalPlan, *, filters_before_casts: bool = False, ieee_comparisons: bool = True,
                 first_file_only: bool = False, csv_rows_by_a_column: bool = False) -> None:
        if plan.spec is None:
            raise ValueError("the Polars engine needs a checked plan (jobs.validate.plan_spec)")
        super().__init__(plan.spec)
        self.plan = plan
        self.filters_before_casts = filters_before_casts
        self.ieee_comparisons = ieee_comparisons
        self.first_file_only = first_file_only
        self.csv_rows_by_a_column = csv_rows_by_a_column
        self._step_input: pl.LazyFrame | None = None
        self._step_field = ""
        self._step_dtypes: pl.Schema | None = None
        # The frames still one cast away from their scans (and filters and joins), by id.
        self._stored: dict[int, _Uncast] = {}
        # Each frame's most rows of any parquet scan it was built from, by id (see _note_rows).
        self._rows: dict[int, tuple[pl.LazyFrame, int]] = {}

    def read(self, source: SourceSpec, field: str) -> pl.LazyFrame:
        stored, casts = scan_source_as_stored(source, field=field, first_file_only=self.first_file_only,
                                              csv_rows_by_a_column=self.csv_rows_by_a_column)
        frame = self._cast(stored, casts)
        if self.filters_before_casts:  # the CPU's plan: where a join's read casts run (_join_before_casts)
            self._note_rows(frame, source_rows(source, field))
        return frame

    def _note_rows(self, frame: pl.LazyFrame, rows: int | None) -> None:
        """Record that ``frame`` was built from scans of at most ``rows`` rows each (None: unknown, nothing recorded)."""
        if rows is not None:
            self._rows[id(frame)] = (frame, rows)

    def _rows_of(self, frame: pl.LazyFrame) -> int | None:
        """The most rows of any scan ``frame`` was built from, where every one of them is known."""
        found = self._rows.get(id(frame))
        return found[1] if found is not None and found[0] is frame else None

    def _cast(self, stored: pl.LazyFrame, casts: dict[str, pl.DataType], *, filtered: bool = False) -> pl.LazyFrame:
        frame = with_read_types(stored, casts)
        if self.filters_before_casts:
            self._stored[id(frame)] = _Uncast(frame, stored, casts, filtered)
        return frame

    def _uncast(self, frame: pl.LazyFrame) -> _Uncast | None:
        found = self._stored.get(id(frame))
        return found if found is not None and found.frame is frame else None

    def _filter_before_casts(self, frame: pl.LazyFrame, step: FilterStep, field: str, schema: dict[str, str]) -> pl.LazyFrame | None:
        """``frame`` (a scan's read casts over the scan, with filters) filtered by ``step`` before its casts, or None.

        Polars pushes a filter into the parquet scan (rows it drops are never decoded, and never
        cast), but not through a cast of the columns it reads. So the filter runs on the scan's own
        columns, each referenced column cast inside the predicate exactly as the read casts it: the
        same predicate over the same values, the same rows (TPC-H q06 at SF 1: 2× faster).
        """
        found = self._uncast(frame)
        if found is None:
            return None
        stored, casts = found.stored, found.casts
        columns = {name: pl.col(name).cast(dtype) for name, dtype in casts.items()}
        stored_types = stored.collect_schema()
        dates = frozenset(name for name, dtype in casts.items() if stored_types.get(name) == pl.Date and isinstance(dtype, pl.Datetime))
        return self._cast(stored.filter(self.expr(f"{field}.expr", step.expr, schema, columns, dates)), casts, filtered=True)

    def query(self, name: str, field: str) -> pl.LazyFrame:
        # The SQL validation regenerated from the checked tree, over the frames of the sources it reads.
        checked = self.plan.queries[field]
        try:
            return run_sql(checked.sql, {table: self.frame_of(table, f"{field}.sql") for table in checked.tables},
                           nan_terms=self.ieee_comparisons)
        except NanTermsTooLarge as exc:
            raise SqlRefused(f"{field}.sql: {exc}", field=f"{field}.sql") from None

    def apply_steps(self, frame: pl.LazyFrame, steps: list[Step], at: str) -> pl.LazyFrame:
        ordered = False  # whether a sort's order must survive the steps after it
        pushed: set[int] = set()  # filters applied to a join's right side already
        for index, step in enumerate(steps):
            if index in pushed:
                continue
            field = f"{at}[{index}]"
            into_right = self._right_side_filters(step, steps, index, at) if isinstance(step, JoinStep) else []
            pushed.update(later for later, _ in into_right)
            before = frame
            frame = self.apply_step(frame, step, field, ordered=ordered, right_filters=[(steps[later], name) for later, name in into_right])
            if self._rows_of(frame) is None and not isinstance(step, (JoinStep, UnionStep, PivotStep)):  # a step over one frame
                self._note_rows(frame, self._rows_of(before))
            ordered = isinstance(step, (SortStep, TopKStep)) or (ordered and isinstance(step, (FilterStep, SelectStep, AssignStep, RenameStep, LimitStep, DropDuplicatesStep)))
        return frame

    def _right_side_filters(self, join: JoinStep, steps: list[Step], index: int, at: str) -> list[tuple[int, str]]:
        """The filters right after ``join`` (``steps[index]``) that read only its right side's own columns, by index and field.

        On the CPU plan they filter the right side before the join, where they reach its scan
        (:meth:`_filter_before_casts`): Polars pushes such a filter through the join but not
        through the read casts above the scan, so every row of the right side was decoded and
        cast first (TPC-H q03's ``l_shipdate`` and ``o_orderdate``). For an inner join it is the
        same predicate over the same values, so the same rows.
        """
        if not self.filters_before_casts or join.how != "inner" or join.where is not None or not join.left_keys:
            return []
        field = f"{at}[{index}]"
        _, right_at = self.spec.resolve(join.right, f"{field}.right")
        # Columns by the same name on both sides are suffixed or shared keys: only the right's others are its own.
        own = set(self.plan.schemas.get(right_at, {})) - set(self.plan.inputs.get(field, {}))
        found: list[tuple[int, str]] = []
        for later in range(index + 1, len(steps)):
            step = steps[later]
            if not isinstance(step, FilterStep):
                break
            name = f"{at}[{later}]"
            if columns_of(self.plan.expression(f"{name}.expr", step.expr).node) <= own:
                found.append((later, name))
        return found

    def expr(self, field: str, text: str, schema: dict[str, str], columns: dict[str, pl.Expr] | None = None,
             stored_dates: frozenset[str] = frozenset(), over: pl.LazyFrame | None = None) -> pl.Expr:
        """The lowered expression at ``field``; ``columns``: what a column reference stands for, where not the column
        (``stored_dates``: those that cast a stored date, see jobs.date_bounds); ``over``: the frame it is evaluated
        on where that is not the step's input (a join's joined rows)."""
        expression = self.plan.expression(field, text)
        if over is not None:
            wanted = has_integer_arithmetic(expression.node) or orders_numbers(expression.node, schema)
            dtypes = over.collect_schema() if wanted else None
            return to_polars(expression.node, expression.text, field, schema, dtypes, columns, stored_dates)
        # The types of the step's input (integer overflow checks, NaN-aware comparisons), unless another source's
        # steps were built since (a join's right side).
        needs_types = has_integer_arithmetic(expression.node) or orders_numbers(expression.node, schema)
        current = self._step_input is not None and field.startswith(f"{self._step_field}.") and needs_types
        if current and self._step_dtypes is None:
            self._step_dtypes = self._step_input.collect_schema()  # type: ignore[union-attr]
        return to_polars(expression.node, expression.text, field, schema, self._step_dtypes if current else None, columns, stored_dates)

    def apply_step(self, frame: pl.LazyFrame, step: Step, field: str, *, ordered: bool = False,
                   right_filters: list[tuple[Step, str]] | None = None) -> pl.LazyFrame:
        """One step, found at ``field``, over a LazyFrame; a join's ``right_filters`` (with their fields) filter its right side first."""
        # Its column types tell integer arithmetic, which is checked for overflow; read once, when an expression needs them.
        self._step_input, self._step_field, self._step_dtypes = frame, field, None
        schema = self.plan.inputs.get(field, {})
        if isinstance(step, FilterStep):
            before = self._filter_before_casts(frame, step, field, schema)
            return before if before is not None else frame.filter(self.expr(f"{field}.expr", step.expr, schema))
        if isinstance(step, AssignStep):
            return frame.with_columns(_int64_constant(self.expr(f"{field}.expr", step.expr, schema)).alias(step.column))
        if isinstance(step, SelectStep):
            return frame.select(list(step.columns))
        if isinstance(step, RenameStep):
            return frame.rename(dict(step.columns))
        if isinstance(step, GroupByStep):
            return self.groupby(frame, step, field, schema)
        if isinstance(step, SortStep):
            flags = step.descending if isinstance(step.descending, list) else [step.descending] * len(step.by)
            return frame.sort(list(step.by), descending=flags, nulls_last=True)
        if isinstance(step, LimitStep):
            return frame.head(step.n)
        if isinstance(step, DropDuplicatesStep):
            return frame.unique(subset=list(step.subset) if step.subset else None, keep="first", maintain_order=ordered)
        if isinstance(step, TopKStep):
            keys = [key.column for key in step.order]
            ranked = frame.sort(keys, descending=[key.descending for key in step.order], nulls_last=True)
            return with_counters(ranked).filter(in_order(position(), list(step.by)) < step.k).drop(COUNTERS)
        if isinstance(step, JoinStep):
            return self.join(frame, step, field, right_filters or [])
        if isinstance(step, UnionStep):
            columns = self.plan.columns_after(field)
            others = [self.frame_of(ref, f"{field}.sources[{i}]").select(columns) for i, ref in enumerate(step.sources)]
            parts = aligned_datetimes([frame.select(columns), *others])
            combined = pl.concat(parts, how="vertical_relaxed")  # int with float gives float
            return combined.unique(maintain_order=ordered) if step.distinct else combined
        if isinstance(step, WindowStep):
            inputs = {
                name: pl.col(column.column) if column.column is not None else self.expr(f"{field}.columns.{name}.expr", column.expr or "", schema)
                for name, column in step.columns.items()
                if column.column is not None or column.expr is not None
            }
            return window_columns(frame, step, inputs).select(self.plan.columns_after(field))
        if isinstance(step, PivotStep):
            return self.apply_steps(frame, pivot_steps(step), f"{field}.expanded")
        if isinstance(step, UnpivotStep):
            index = self.plan.columns_after(field)[:-2]
            rows = frame.unpivot(on=list(step.columns), index=index, variable_name=step.name, value_name=step.value)
            return rows if step.include_nulls else rows.filter(pl.col(step.value).is_not_null())
        raise TypeError(f"unsupported step {step!r}")  # pragma: no cover - the union is closed

    def aggregate(self, agg: Aggregation, name: str, field: str, schema: dict[str, str], narrow_integers: frozenset[str] = frozenset()) -> pl.Expr:
        """``agg`` as a Polars aggregation named ``name``. ``narrow_integers``: the frame's columns of 32-bit or smaller
        integers, whose sum Polars keeps in their type (wrapping past it) where the language sums in int64."""
        if agg.func == "size":  # a sum of int64 ones (groupby adds them): Polars' len() is a uint32, summed in it
            return pl.col(_ONES).sum().alias(name)
        value = pl.col(agg.column) if agg.column is not None else self.expr(f"{field}.aggs.{name}.expr", agg.expr or "", schema)
        kind = schema.get(agg.column, "") if agg.column is not None else ""
        result: pl.Expr
        if agg.func in ("nunique", "count_distinct"):
            result = value.drop_nulls().n_unique()
        elif agg.func in ("first", "last"):  # the first (last) non-null value, as pandas' first() and last()
            result = getattr(value.drop_nulls(), agg.func)()
        elif agg.func == "quantile":  # exact, interpolating linearly between the values around q, as pandas
            result = value.quantile(agg.q or 0.0, interpolation="linear")
        elif agg.func in ("std", "var"):
            result = getattr(value, agg.func)(ddof=1)
        elif agg.func in ("any", "all"):  # SQL's bool_or/bool_and: nulls skipped, null when there are only nulls
            result = pl.when(value.count() > 0).then(getattr(value, agg.func)(ignore_nulls=True))
        elif agg.func == "mode":  # the most frequent non-null value; of tied ones the smallest
            result = value.drop_nulls().mode().min()
        elif agg.func in ("corr", "covar"):
            other = pl.col(agg.other) if agg.other is not None else self.expr(f"{field}.aggs.{name}.other_expr", agg.other_expr or "", schema)
            result = pair_moment(agg.func, value, other)
        elif agg.func == "string_agg":
            if agg.order_by:
                keys = [pl.col(key.column) for key in agg.order_by]
                value = value.sort_by(keys, descending=[key.descending for key in agg.order_by], nulls_last=True)
            joined = value.drop_nulls().str.join(agg.separator if agg.separator is not None else ",")
            result = pl.when(value.count() > 0).then(joined)
        elif agg.func == "count":  # in int64 from the start: Polars' count() is a uint32 (see _ONES)
            result = value.is_not_null().cast(pl.Int64).sum()
        elif agg.func == "sum" and (agg.column in narrow_integers or kind == "bool"):
            result = value.cast(pl.Int64).sum()
        else:
            result = getattr(value, agg.func)()
        if agg.func in _COUNTS or (agg.func == "sum" and kind == "bool"):
            result = result.cast(pl.Int64)
        return result.alias(name)

    def groupby(self, frame: pl.LazyFrame, step: GroupByStep, field: str, schema: dict[str, str]) -> pl.LazyFrame:
        summed = {agg.column for agg in step.aggs.values() if agg.func == "sum" and agg.column is not None}
        narrow = frozenset(column for column, dtype in frame.collect_schema().items() if column in summed and dtype in _NARROW_INTEGERS) if summed else frozenset()
        aggs = [self.aggregate(agg, name, field, schema, narrow) for name, agg in step.aggs.items()]
        if not step.by or any(agg.func == "size" for agg in step.aggs.values()):
            frame = frame.with_columns(pl.lit(1, dtype=pl.Int64).alias(_ONES))
        if step.by:
            return frame.group_by(list(step.by)).agg(aggs)
        # No keys: one row, or none for no input rows (as the Dask engine, unlike SQL's global aggregate).
        rows = f"{_HIDDEN}rows"
        return frame.select([*aggs, pl.col(_ONES).sum().alias(rows)]).filter(pl.col(rows) > 0).drop(rows)

    def join(self, frame: pl.LazyFrame, step: JoinStep, field: str, right_filters: list[tuple[Step, str]]) -> pl.LazyFrame:
        right = self.frame_of(step.right, f"{field}.right")
        for filter_step, name in right_filters:  # the filters after this join that read only the right side (apply_steps)
            filtered = self.apply_step(right, filter_step, name)
            self._note_rows(filtered, self._rows_of(right))
            right = filtered
        if step.where is not None and step.how not in ("inner", "cross"):
            inner = step.model_copy(update={"how": "inner"})
            columns = list(self.plan.joined[field])
            return join_with_condition(frame, right, step, lambda left, other: self.pairs(left, other, inner, field, [*columns, LEFT_ROW, RIGHT_ROW]),
                                       self.plan.columns_after(field))
        if self.filters_before_casts:
            before = self._join_before_casts(frame, right, step, field)
            if before is not None:
                return self._joined_rows(before, frame, right)
        return self._joined_rows(self.pairs(frame, right, step, field, self.plan.columns_after(field)), frame, right)

    def _joined_rows(self, joined: pl.LazyFrame, frame: pl.LazyFrame, right: pl.LazyFrame) -> pl.LazyFrame:
        """``joined`` (of ``frame`` and ``right``), noted as built from the larger of the two sides' scans."""
        left_rows, right_rows = self._rows_of(frame), self._rows_of(right)
        if left_rows is not None and right_rows is not None:
            self._note_rows(joined, max(left_rows, right_rows))
        return joined

    def pairs(self, frame: pl.LazyFrame, right: pl.LazyFrame, step: JoinStep, field: str, columns: list[str]) -> pl.LazyFrame:
        """``frame`` joined with ``right`` as ``step`` says (``where`` only for inner and cross), as ``columns``."""
        how: Any = _HOW[step.how]
        compared = _compared_keys(frame, right, step)
        if step.how in ("semi", "anti"):  # only the left's columns come out, so the keys are compared cast in place
            return frame.join(right, left_on=_cast_keys(step.left_keys, compared), right_on=_cast_keys(step.right_keys, compared), how=how)
        if not step.left_keys:  # cross, or inner with only a where; Polars plans a range condition as an IEJoin
            joined = frame.join(right, how="cross", suffix=step.right_suffix)
        else:
            shared = step.on is not None  # one key column per name, as pandas' merge on= gives
            left_on, right_on = list(step.left_keys), list(step.right_keys)
            if compared:
                # Such a pair joins on hidden copies cast to the compared type, each side's own key column kept as
                # pandas' merge keeps it (under on=, the left's: inner and left joins give the left's key, as pandas).
                hidden = {i: f"{_HIDDEN}key{i}" for i in compared}
                frame = frame.with_columns(pl.col(left_on[i]).cast(common).alias(hidden[i]) for i, common in compared.items())
                right = right.with_columns(pl.col(right_on[i]).cast(common).alias(hidden[i]) for i, common in compared.items())
                if shared:
                    right = right.drop([right_on[i] for i in compared])
                left_on = [hidden.get(i, key) for i, key in enumerate(left_on)]
                right_on = [hidden.get(i, key) for i, key in enumerate(right_on)]
            joined = frame.join(right, left_on=left_on, right_on=right_on, how=how, suffix=step.right_suffix, coalesce=shared)
            if compared and shared and step.how in ("right", "outer"):
                # Rows of the right side too: the key in the compared type, the left's where matched, as pandas' merge
                # gives it (an integer 0 matched by a float -0.0 is 0.0).
                joined = joined.with_columns(pl.coalesce(pl.col(key).cast(compared[i]), pl.col(left_on[i])).alias(key)
                                             for i, key in enumerate(step.left_keys) if i in compared)
        if step.where is not None:
            joined = joined.filter(self.expr(f"{field}.where", step.where, self.plan.joined.get(field, {}), over=joined))
        return joined.select(columns)

    def _fewer_rows(self, frame: pl.LazyFrame, right: pl.LazyFrame) -> bool:
        """Whether ``right`` scans more rows than any table ``frame`` was built from (both known)."""
        left_rows, right_rows = self._rows_of(frame), self._rows_of(right)
        return left_rows is not None and right_rows is not None and left_rows < right_rows

    def _join_before_casts(self, frame: pl.LazyFrame, right: pl.LazyFrame, step: JoinStep, field: str) -> pl.LazyFrame | None:
        """``frame`` joined with ``right`` before the read casts of the side a filtered or smaller side meets, or None.

        Polars casts every row a scan gives before the join drops those without a partner
        (TPC-H q17: all of lineitem's quantities and prices, for the lines of 200 parts). Where one
        side is a filtered scan, the other side's columns are cast after the join instead, on the
        rows it keeps; its keys are cast before, as they are compared in the language's types.
        So are the right side's where it is a scan of more rows than any table the left side was
        built from (TPC-H q05: lineitem's prices after its join with a year of one region's
        orders; a fact table joined on the key of a smaller one keeps at most its own rows).
        Casts and joins commute (a cast is row by row, a join moves rows), so it is the same
        answer. Only an inner, left, semi or anti join on keys, without ``where``.
        """
        if step.how not in ("inner", "left", "semi", "anti") or step.where is not None or not step.left_keys:
            return None
        left, other = self._uncast(frame), self._uncast(right)
        defer_left = left is not None and left.casts and other is not None and other.filtered and step.how in ("inner", "semi", "anti")
        defer_right = other is not None and other.casts and step.how in ("inner", "left") and (
            (left is not None and left.filtered) or self._fewer_rows(frame, right))
        if not (defer_left or defer_right):
            return None
        deferred: dict[str, pl.DataType] = {}
        if defer_left:
            assert left is not None
            frame = with_read_types(left.stored, {k: t for k, t in left.casts.items() if k in step.left_keys})
            deferred.update({k: t for k, t in left.casts.items() if k not in step.left_keys})
        if defer_right:
            assert other is not None
            right = with_read_types(other.stored, {k: t for k, t in other.casts.items() if k in step.right_keys})
            left_columns = set(self.plan.inputs.get(field, {}))  # a right column by a left one's name comes out suffixed
            deferred.update({(k + step.right_suffix if k in left_columns else k): t
                             for k, t in other.casts.items() if k not in step.right_keys})
        columns = self.plan.columns_after(field)
        joined = self.pairs(frame, right, step, field, columns)
        # Not counted as filtered: joined to a scan, it may give that scan more rows to cast, not fewer.
        return self._cast(joined, {name: dtype for name, dtype in deferred.items() if name in columns})


def build_lazyframe(plan: LogicalPlan, *, filters_before_casts: bool = False, ieee_comparisons: bool = True,
                    first_file_only: bool = False) -> pl.LazyFrame:
    """The job's output as a Polars LazyFrame (nothing is read until it is collected or sunk).

    ``filters_before_casts``: a source's first filters run on its files' own types, before the read
    casts (:meth:`PolarsFrames._filter_before_casts`), as the CPU engine runs jobs; off (the GPU's
    plan), the plan keeps the shape cudf-polars was measured with. ``ieee_comparisons``: the frame
    may run where comparisons follow IEEE (cudf-polars), so a SQL source's comparisons that may meet
    a NaN get the terms that keep NaN's total order (:mod:`jobs.sql_nan`); off for Polars' CPU
    engine, which orders NaN so itself (reading and typing the SQL for them takes ~14 ms a TPC-H query).
    ``first_file_only``: each source scans its first file alone (:func:`jobs.polars_io.scan_source_as_stored`), a
    frame to ask cudf-polars about, never to run.

    Where the query would read no column of a CSV file (a row count), it is built again with every CSV scan parsing a
    column (:func:`jobs.polars_io.counted_by_a_column`): Polars' count without one misses rows after a stray quote.
    """
    options = {"filters_before_casts": filters_before_casts, "ieee_comparisons": ieee_comparisons, "first_file_only": first_file_only}
    frame = PolarsFrames(plan, **options).output()
    if plan.spec is not None and csv_read_without_a_column(plan.spec, frame):
        frame = PolarsFrames(plan, **options, csv_rows_by_a_column=True).output()
    return frame


_UNIT_ORDER = ("ns", "us", "ms")  # finest first


def aligned_datetimes(parts: list[pl.LazyFrame]) -> list[pl.LazyFrame]:
    """``parts`` of a union with each date-time column in one type, as the Dask engine gives it: the finest unit of the
    parts (Polars' relaxed concat took the coarsest, dropping digits), and UTC where the parts' zones differ (the same
    instants; Polars found no common type)."""
    schemas = [part.collect_schema() for part in parts]
    targets: dict[str, pl.Datetime] = {}
    for name in schemas[0].names():
        types = [schema[name] for schema in schemas]
        if len(set(types)) < 2 or not all(isinstance(dtype, pl.Datetime) for dtype in types):
            continue
        zones = {dtype.time_zone for dtype in types}  # type: ignore[union-attr]
        if None in zones and len(zones) > 1:
            continue  # naive beside zoned: no common type, as on the Dask engine
        unit = min((dtype.time_unit for dtype in types), key=_UNIT_ORDER.index)  # type: ignore[union-attr]
        targets[name] = pl.Datetime(unit, zones.pop() if len(zones) == 1 else "UTC")
    if not targets:
        return parts
    return [
        part.with_columns(
            (pl.col(name).dt.convert_time_zone(target.time_zone) if target.time_zone else pl.col(name)).cast(target)
            for name, target in targets.items()
        )
        for part in parts
    ]
