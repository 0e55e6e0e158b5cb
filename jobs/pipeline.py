"""JobSpec → Dask dataframe graph. The only place the pandas/cudf backend switch lives.

Every operation is a dask.dataframe method, so the graph holds only dask, pandas
and cudf functions, except where dask has no method: a window step and a quantile run a
Spillway function on each shuffled partition (:mod:`jobs.window_pandas`,
:func:`group_quantile`), so their workers need Spillway installed. Helper columns that
some steps need (an aggregated expression, a rank, a match marker) are named with
the ``__spillway_`` prefix and dropped before the step ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

from spillway.jobs.assign_run import AssignRun
from spillway.jobs.dask_joins import join
from spillway.jobs.dask_read import read_source
from spillway.jobs.decimal_cast import decimal_casts, refuse_on_dask
from spillway.jobs.errors import SpecError
from spillway.jobs.expr import Expression
from spillway.jobs.filter_run import conjunct_groups, kept_in_place, may_fail
from spillway.jobs.lower_pandas import all_of, evaluate
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.named_sources import NamedSources
from spillway.jobs.pandas_functions import cast_values
from spillway.jobs.group_pandas import OTHER, VALUE, group_mode, group_moment, group_string_agg
from spillway.jobs.spec import (
    PAIR_AGGS,
    Aggregation,
    AssignStep,
    DropDuplicatesStep,
    FilterStep,
    GroupByStep,
    JobSpec,
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
from spillway.jobs.sources import PANDAS_READ_DTYPES
from spillway.jobs.window_pandas import WindowOutput, compute_window

Backend = Literal["pandas", "cudf"]

FrameOf = Callable[[SourceSpec | str, str], dd.DataFrame]  # (inline source or name, field) → its rows

_HIDDEN = "__spillway_"
# Aggregations that dask's agg() cannot combine with the others in one tree reduction:
# each is its own reduction (median shuffles on the group keys), merged back on the keys.
_SEPARATE_AGGS = ("nunique", "count_distinct", "median", "quantile", "mode", "corr", "covar", "string_agg")
# Tree-reduced aggregations under another name: any and all as max and min of their bools as floats.
_TREE_AGGS = {"any": "max", "all": "min"}


class _SharedConfig:
    """One dask config for every thread building a graph, set by the first and restored by the last.

    ``dask.config.set`` changes process-wide config and restores what it saw on exit: two
    threads' nested sets would restore each other's values while the other still builds (a
    graph then planned with p2p shuffles, or on the wrong backend). Builds for another backend
    wait until the current ones are done.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._users = 0
        self._backend: Backend | None = None
        self._config: Any = None

    @contextmanager
    def use(self, backend: Backend) -> Iterator[None]:
        entered = False
        try:  # entered and left under one try: a planning thread may be interrupted anywhere (cluster.planning)
            with self._changed:
                while self._users and self._backend != backend:
                    self._changed.wait(0.1)  # a timeout, so that such an interrupt is seen here too
                if not self._users:
                    self._config = dask.config.set({"dataframe.backend": backend, "dataframe.shuffle.method": "tasks"})
                    self._backend = backend
                self._users += 1
                entered = True
            yield
        finally:
            if entered:
                with self._changed:
                    self._users -= 1
                    if not self._users:
                        self._config.__exit__(None, None, None)
                        self._backend = self._config = None
                        self._changed.notify_all()


_SHARED_CONFIG = _SharedConfig()


def backend_config(backend: Backend) -> contextlib.AbstractContextManager[None]:
    """Dask config for building and optimising a graph on ``backend``; several threads may be inside at once.

    ``tasks`` shuffles: under a distributed client dask would pick ``p2p``, which
    measured 3.5-4x slower than ``tasks`` for dask-cudf on our H200s (shared/gpu/README.md).
    """
    return _SHARED_CONFIG.use(backend)


def apply_step(frame: dd.DataFrame, step: Step, field: str, frame_of: FrameOf, plan: LogicalPlan) -> dd.DataFrame:
    """Apply one step, found at ``field`` (``steps[2]``), to a lazy dataframe; ``frame_of``
    gives a join's right side, ``plan`` the parsed expressions."""
    if isinstance(step, FilterStep):
        return _filter_in_turn(frame, plan.expression(f"{field}.expr", step.expr))
    if isinstance(step, AssignStep):
        value = plan.expression(f"{field}.expr", step.expr).evaluate(frame)
        return frame.assign(**{step.column: value})
    if isinstance(step, SelectStep):
        return frame[list(step.columns)]
    if isinstance(step, RenameStep):
        return frame.rename(columns=dict(step.columns))
    if isinstance(step, GroupByStep):
        return _groupby(frame, step, field, plan)
    if isinstance(step, SortStep):
        ascending: Any = (
            [not d for d in step.descending] if isinstance(step.descending, list) else not step.descending
        )
        return frame.sort_values(list(step.by), ascending=ascending)
    if isinstance(step, LimitStep):
        return frame.head(step.n, npartitions=-1, compute=False)
    if isinstance(step, DropDuplicatesStep):
        return frame.drop_duplicates(subset=list(step.subset) if step.subset else None)
    if isinstance(step, TopKStep):
        return _top_k(frame, step)
    if isinstance(step, WindowStep):
        windowed = _window(frame, step, field, plan)
        return windowed[plan.columns_after(field)] if field in plan.schemas else windowed
    if isinstance(step, UnionStep):
        others = [frame_of(ref, f"{field}.sources[{i}]") for i, ref in enumerate(step.sources)]
        return _union(frame, others, step.distinct)
    if isinstance(step, JoinStep):
        return join(frame, frame_of(step.right, f"{field}.right"), step, field, plan, _filter)
    if isinstance(step, PivotStep):
        for index, part in enumerate(pivot_steps(step)):
            frame = apply_step(frame, part, f"{field}.expanded[{index}]", frame_of, plan)
        return frame
    if isinstance(step, UnpivotStep):
        return _unpivot(frame, step)
    raise TypeError(f"unsupported step {step!r}")  # pragma: no cover - the union is closed


def _unpivot(frame: dd.DataFrame, step: UnpivotStep) -> dd.DataFrame:
    """The listed columns as rows (pandas' and cuDF's ``melt`` per partition), null values left out unless asked for."""
    index = [c for c in frame.columns if c not in step.columns] if step.index is None else list(step.index)
    rows = frame.melt(id_vars=index, value_vars=list(step.columns), var_name=step.name, value_name=step.value)
    return rows if step.include_nulls else rows.dropna(subset=[step.value])


def _filter_in_turn(frame: dd.DataFrame, expression: Expression) -> dd.DataFrame:
    """``frame`` filtered by ``expression``; a part of it that can fail the job sees only the rows that the
    filters before it, and the ``and``-ed parts before it, keep (jobs.filter_run)."""
    if not expression.columns <= set(frame.columns):
        return _filter(frame, expression.evaluate(frame))  # which raises, naming the unknown column
    for index, group in enumerate(conjunct_groups(expression.node, frame)):
        if index or may_fail(group[0], frame):
            frame = kept_in_place(frame)
        masks = [evaluate(part, frame, expression.text, expression.field) for part in group]
        frame = _filter(frame, all_of(masks))
    return frame


def _no_rows(part: Any) -> Any:
    return part.iloc[:0]


def _filter(frame: dd.DataFrame, mask: Any) -> dd.DataFrame:
    """The rows of ``frame`` where ``mask`` holds, as a dask Filter: unlike ``.loc``, dask
    pushes column projections through it, so a job reads only the columns it uses."""
    if not isinstance(mask, dd.Series):
        if mask is None or isinstance(mask, bool | np.bool_):  # a constant condition: every row or none (null: none, as SQL)
            return frame if mask else frame.map_partitions(_no_rows, meta=frame._meta)
        return frame.loc[mask]
    # `& True` keeps an .astype(bool), which the expression layer ends conditions with,
    # off the top of the mask: dask (2026.8, dask/dask#12172) rewrites a Filter whose mask
    # is an astype into that astype of the mask alone, returning the mask, not the rows.
    return frame[mask & True]


def _top_k(frame: dd.DataFrame, step: TopKStep) -> dd.DataFrame:
    """The first ``k`` rows of each group in the step's order, then every kept row in that order.

    Each group is brought into one partition (a shuffle on its keys) and cut there. A cumcount over
    one global sort, paired partition by partition with the sorted rows, kept wrong rows: the
    optimiser can plan the two as separate sorts that split the rows differently (files read out
    of their key order gave ids 5, 6 for the first two of 1…8).
    """
    columns = [key.column for key in step.order]
    ascending = [not key.descending for key in step.order]
    keys = list(step.by)
    grouped = frame.shuffle(on=keys) if keys else frame.repartition(npartitions=1)
    firsts = grouped.map_partitions(_first_k, keys, columns, ascending, step.k, meta=frame._meta, align_dataframes=False)
    return firsts.sort_values(columns, ascending=ascending)


def _first_k(part: Any, keys: list[str], columns: list[str], ascending: list[bool], k: int) -> Any:
    """The first ``k`` rows of each group of ``keys`` in one partition that holds whole groups, nulls last."""
    ordered = part.sort_values(columns, ascending=ascending, na_position="last").reset_index(drop=True)
    if not keys:
        return ordered.head(k)
    return ordered[ordered.groupby(keys, dropna=False, sort=False).cumcount() < k]


def _union(frame: dd.DataFrame, others: list[dd.DataFrame], distinct: bool) -> dd.DataFrame:
    """The rows of ``frame`` then of ``others`` (columns matched by name), each part cast to
    the types of the whole: pandas would otherwise keep an int part int beside a float one,
    and the partitions would disagree with the graph's metadata."""
    columns = list(frame.columns)
    parts = _as_text_where_one_is_text(_in_utc_where_zones_differ([frame, *(other[columns] for other in others)]))
    dtypes = dd.concat(parts)._meta.dtypes
    parts = [part if (part.dtypes == dtypes).all() else part.astype(dict(dtypes)) for part in parts]
    combined = dd.concat(parts)
    return combined.drop_duplicates() if distinct else combined


def _as_text_where_one_is_text(parts: list[dd.DataFrame]) -> list[dd.DataFrame]:
    """``parts`` of a union with a column that is text in one part and not in another as text in all (the checker lets
    only a column of nulls, read as text, meet another kind): the text of each value, as Polars' relaxed concat gives
    it; pandas made an object column of both, which the sink could not write."""
    if not isinstance(parts[0]._meta, pd.DataFrame):
        return parts  # cuDF: as dask-cudf concatenates them
    mixed = [name for name in parts[0].columns
             if len({pd.api.types.is_string_dtype(part[name].dtype) for part in parts}) > 1]
    if not mixed:
        return parts
    return [part.assign(**{name: cast_values(part[name], "string").astype(PANDAS_READ_DTYPES["string"]) for name in mixed}) for part in parts]


def _in_utc_where_zones_differ(parts: list[dd.DataFrame]) -> list[dd.DataFrame]:
    """``parts`` of a union with a date-time column zoned differently in them converted to UTC (the same instants):
    pandas made an object column of both zones' Timestamps, which the sink could not write."""
    zoned = {}
    for name in parts[0].columns:
        zones = {str(zone) if (zone := getattr(part[name].dtype, "tz", None)) is not None else None for part in parts}
        if len(zones) > 1 and None not in zones:
            zoned[name] = zones
    if not zoned:
        return parts
    return [part.assign(**{name: part[name].dt.tz_convert("UTC") for name in zoned}) for part in parts]


def _window(frame: dd.DataFrame, step: WindowStep, field: str, plan: LogicalPlan) -> dd.DataFrame:
    """The window step by a shuffle on the partition keys (every partition then lies in one
    dask partition, all rows in one without keys) and :func:`compute_window` on each."""
    hidden: dict[str, Any] = {}
    outputs: list[WindowOutput] = []
    for name, column in step.columns.items():
        source = column.column
        if column.expr is not None:
            source = f"{_HIDDEN}w{len(hidden)}"
            hidden[source] = plan.expression(f"{field}.columns.{name}.expr", column.expr).evaluate(frame)
        outputs.append(WindowOutput(name, column.func, source, column.offset or 1, column.default, column.frame or "partition",
                                    column.preceding or 0, column.buckets or 1, column.following or 0))
    prepared = frame.assign(**hidden) if hidden else frame
    keys = list(step.partition_by)
    order = [(key.column, key.descending) for key in step.order_by]
    shuffled = prepared.shuffle(on=keys) if keys else prepared.repartition(npartitions=1)
    sample = compute_window(prepared._meta_nonempty, keys, order, outputs)
    dtypes = {output.name: sample[output.name].dtype for output in outputs}
    meta = compute_window(prepared._meta, keys, order, outputs, dtypes)
    result = shuffled.map_partitions(compute_window, keys, order, outputs, dtypes, meta=meta, align_dataframes=False)
    return result.drop(columns=list(hidden)) if hidden else result


def _aggregated_columns(
    frame: dd.DataFrame, step: GroupByStep, field: str, plan: LogicalPlan
) -> tuple[dd.DataFrame, dict[str, str | None], dict[str, str]]:
    """``frame`` with a hidden column per distinct aggregated expression (and per bool input of
    any or all, as floats), each aggregation's input column (None for ``size``), and the second
    input of each corr or covar."""
    by_text: dict[str, str] = {}
    values: dict[str, object] = {}

    def hidden(text: str, at: str) -> str:
        if text not in by_text:
            by_text[text] = f"{_HIDDEN}agg{len(by_text)}"
            values[by_text[text]] = plan.expression(at, text).evaluate(frame)
        return by_text[text]

    inputs: dict[str, str | None] = {}
    others: dict[str, str] = {}
    as_floats: dict[str, str] = {}
    for name, agg in step.aggs.items():
        inputs[name] = hidden(agg.expr, f"{field}.aggs.{name}.expr") if agg.expr is not None else agg.column
        if agg.func in ("any", "all") and inputs[name] is not None:
            # bool_or/bool_and as max/min of 1.0 and 0.0, which dask reduces as a tree, skipping nulls.
            source = str(inputs[name])
            floats = as_floats.setdefault(source, f"{_HIDDEN}bool{len(as_floats)}")
            values[floats] = (values[source] if source in values else frame[source]).astype("float64")  # type: ignore[attr-defined]
            inputs[name] = floats
        if agg.func in PAIR_AGGS:
            others[name] = agg.other if agg.other is not None else hidden(agg.other_expr or "", f"{field}.aggs.{name}.other_expr")
    return (frame.assign(**values) if values else frame), inputs, others


def _named_aggregates(frame: Any, names: dict[tuple[str, str], str]) -> Any:
    """The ``(column, func)`` columns of ``groupby().agg({column: [funcs]})`` picked and named as ``names`` says."""
    flat = frame.copy(deep=False)  # cuDF and pandas alike: flatten by assignment, then pick
    flat.columns = [f"{column}\x1f{func}" for column, func in frame.columns]
    picked = flat[[f"{column}\x1f{func}" for column, func in names]]
    picked.columns = list(names.values())
    return picked


def group_quantile(part: Any, keys: list[str], column: str, q: float, name: str) -> Any:
    """The ``q`` quantile of ``column`` per group of ``keys`` in one pandas or cuDF frame holding whole groups."""
    return part.groupby(keys, dropna=False, sort=False)[column].quantile(q).rename(name).reset_index()


def _quantile(frame: dd.DataFrame, keys: list[str], column: str, q: float, name: str) -> dd.DataFrame:
    """An exact quantile per group: dask's groupby has none, so a shuffle on the keys puts each
    group in one partition, where pandas (or cuDF) computes it, as dask's median does."""
    rows = frame[[*keys, column]].shuffle(on=keys)
    meta = group_quantile(frame[[*keys, column]]._meta_nonempty, keys, column, q, name).iloc[:0]
    return rows.map_partitions(group_quantile, keys, column, q, name, meta=meta)


def _count_distinct(frame: dd.DataFrame, keys: list[str], column: str, name: str) -> dd.DataFrame:
    """The number of distinct non-null values per group: the distinct (keys, value) rows, counted.

    Not dask's groupby ``nunique``, which (dask 2026.7) loses the group of a null key.
    """
    distinct = frame[[*keys, column]].drop_duplicates()
    return distinct.groupby(keys, dropna=False, sort=False)[column].count().to_frame(name).reset_index()


def _by_group(frame: dd.DataFrame, keys: list[str], inputs: dict[str, str], function: Callable[..., Any], *args: Any) -> dd.DataFrame:
    """``function`` of :mod:`jobs.group_pandas` on each partition after a shuffle on ``keys``, its
    inputs (hidden name → column) alone beside the keys."""
    rows = frame[keys].assign(**{hidden: frame[column] for hidden, column in inputs.items()})
    meta = function(rows._meta_nonempty, keys, *args).iloc[:0]
    return rows.shuffle(on=keys).map_partitions(function, keys, *args, meta=meta)


def _separate(frame: dd.DataFrame, keys: list[str], name: str, agg: Aggregation, column: str, other: str | None) -> dd.DataFrame:
    """One aggregation of :data:`_SEPARATE_AGGS`, as a frame of the keys and ``name``."""
    if agg.func == "quantile":
        return _quantile(frame, keys, column, agg.q or 0.0, name)
    if agg.func in ("nunique", "count_distinct"):
        return _count_distinct(frame, keys, column, name)
    if agg.func == "median":
        return frame.groupby(keys, dropna=False, sort=False)[column].median().to_frame(name).reset_index()
    if agg.func == "mode":
        return _by_group(frame, keys, {VALUE: column}, group_mode, name)
    if agg.func in PAIR_AGGS:
        return _by_group(frame, keys, {VALUE: column, OTHER: other or column}, group_moment, agg.func, name)
    order = [(key.column, key.descending) for key in agg.order_by or []]
    separator = agg.separator if agg.separator is not None else ","
    ordering = {key: key for key, _ in order if key not in keys}
    return _by_group(frame, keys, {VALUE: column, **ordering}, group_string_agg, separator, order, name)


def _as_bools(frame: Any, names: list[str]) -> Any:
    """Columns of 1.0, 0.0 and null as nullable booleans: pandas' "boolean", cuDF's bool with nulls."""
    dtype = "bool" if type(frame).__module__.split(".")[0] == "cudf" else "boolean"
    return frame.astype(dict.fromkeys(names, dtype))


def _groupby(frame: dd.DataFrame, step: GroupByStep, field: str, plan: LogicalPlan | None = None) -> dd.DataFrame:
    # The {column: [funcs]} form is the one dask-cudf and dask-pandas both take (cudf
    # has no named aggregation); the (column, func) result columns are then renamed.
    # "size" counts rows: any non-key column serves. No keys: one constant hidden key.
    frame, inputs, others = _aggregated_columns(frame, step, field, plan or LogicalPlan.unchecked())
    keys = list(step.by) or [f"{_HIDDEN}all"]
    if not step.by:
        frame = frame.assign(**{keys[0]: 0})
    grouped = frame.groupby(keys, dropna=False, sort=False)
    row_column = next((c for c in frame.columns if c not in keys), keys[0])
    wanted: dict[str, tuple[str, str]] = {
        name: (inputs[name] or row_column, _TREE_AGGS.get(agg.func, agg.func))
        for name, agg in step.aggs.items()
        if agg.func not in _SEPARATE_AGGS
    }
    parts: list[dd.DataFrame] = []
    if wanted:
        by_column: dict[str, list[str]] = {}
        for column, func in wanted.values():
            by_column.setdefault(column, [])
            if func not in by_column[column]:
                by_column[column].append(func)
        aggregated = grouped.agg(by_column)
        # Named per partition, not with ``.columns =``: dask 2026.7 fails to lower a columns
        # setter on a shuffled groupby's (column, func) columns (KeyError at optimize).
        first_name: dict[tuple[str, str], str] = {}  # two outputs may ask for the same (column, func)
        for name, pick in wanted.items():
            first_name.setdefault(pick, name)
        named = aggregated.map_partitions(_named_aggregates, names=first_name)
        copies = {name: named[first_name[pick]] for name, pick in wanted.items() if first_name[pick] != name}
        if copies:
            named = named.assign(**copies)
        named = named[list(wanted)]
        if bools := [name for name, agg in step.aggs.items() if agg.func in ("any", "all")]:
            named = named.map_partitions(_as_bools, bools)
        # A sum of integers is int64, as on the Polars engine: pandas computes it so, and its metadata kept the column's
        # own narrower type (int32, uint8…), which the sink then could not write.
        if narrow := {name: "Int64" for name, agg in step.aggs.items() if agg.func == "sum" and name in wanted and _narrow_integer(named[name].dtype)}:
            named = named.astype(narrow)
        parts.append(named.reset_index())
    parts += [
        _separate(frame, keys, name, agg, inputs[name] or row_column, others.get(name))
        for name, agg in step.aggs.items()
        if agg.func in _SEPARATE_AGGS
    ]
    result = parts[0]
    for part in parts[1:]:
        # One partition each, like the tree-reduced agg() part: dask 2026.7 outer-merges a
        # one-partition frame with a shuffled one wrongly (unmatched copies of most groups).
        result = result.repartition(npartitions=1).merge(part.repartition(npartitions=1), on=keys, how="outer")
    return result[[*step.by, *step.aggs]]


def _narrow_integer(dtype: Any) -> bool:
    """Whether ``dtype`` is an integer type (numpy's or pandas' nullable) narrower than int64 and held by it."""
    numpy_dtype = getattr(dtype, "numpy_dtype", dtype)
    return pd.api.types.is_integer_dtype(numpy_dtype) and numpy_dtype.itemsize < 8


class NamedFrames(NamedSources[dd.DataFrame]):
    """The lazy dask dataframe of each source a job names, each built once."""

    def __init__(self, spec: JobSpec, plan: LogicalPlan | None = None) -> None:
        super().__init__(spec)
        self.plan = plan or LogicalPlan(spec)

    def read(self, source: SourceSpec, field: str) -> dd.DataFrame:
        return read_source(source, field=field)

    def apply_steps(self, frame: dd.DataFrame, steps: list[Step], at: str) -> dd.DataFrame:
        # Consecutive assigns become one dask assign (jobs.assign_run: a chain of them planned in
        # time that grew with its square), consecutive filters one filter (below); every other
        # step is one apply_step.
        run: AssignRun | None = None
        filters: list[tuple[str, FilterStep]] = []
        for index, step in enumerate(steps):
            field = f"{at}[{index}]"
            if filters and not self._joins_filters(step, field, frame):
                frame, filters = self._filtered(frame, filters), []
            if isinstance(step, FilterStep) and self._joins_filters(step, field, frame):
                frame, run = self._ended(run, frame), None
                filters.append((field, step))
                continue
            if not isinstance(step, AssignStep):
                frame, run = self._ended(run, frame), None
                frame = apply_step(frame, step, field, self.frame_of, self.plan)
                self.applied(frame, [(field, step)])
                continue
            expression = self.plan.expression(f"{field}.expr", step.expr)
            if run is not None and not run.can_evaluate(expression):
                frame, run = self._ended(run, frame), None
            if run is None:
                run = AssignRun(frame)
            run.add(field, step, expression.evaluate(run))
        return self._filtered(frame, filters) if filters else self._ended(run, frame)

    def _joins_filters(self, step: Step, field: str, frame: dd.DataFrame) -> bool:
        """Whether ``step`` is a filter that may be one mask with the filters before it: one that cannot
        fail the job (it may then meet rows they remove, as dask's own merge of filters would give it)."""
        return isinstance(step, FilterStep) and not may_fail(self.plan.expression(f"{field}.expr", step.expr).node, frame)

    def _filtered(self, frame: dd.DataFrame, filters: list[tuple[str, FilterStep]]) -> dd.DataFrame:
        """``frame`` through a run of filters as one: each mask over ``frame``, and-ed as a balanced tree.

        Dask's optimizer merges nested filters itself, in time that grew with the square of the chain
        (100 filters: 3.5 s); a left-deep chain of ``&`` overflows its recursion at about 200.
        """
        filtered = _filter(frame, all_of([self.plan.expression(f"{field}.expr", step.expr).evaluate(frame) for field, step in filters]))
        self.applied(filtered, list(filters))
        return filtered

    def _ended(self, run: AssignRun | None, frame: dd.DataFrame) -> dd.DataFrame:
        """The frame after ``run`` (``frame`` without one)."""
        if run is None:
            return frame
        after = run.frame_after()
        self.applied(after, run.steps)
        return after

    def applied(self, frame: dd.DataFrame, steps: list[tuple[str, Step]]) -> None:
        """Called with the frame after ``steps`` (field, step): one step, or a run of assigns; a subclass labels it (cluster.stages)."""


def build_frame(spec: JobSpec, plan: LogicalPlan | None = None) -> dd.DataFrame:
    """The spec's output as a lazy dataframe; call inside :func:`backend_config`.

    ``plan`` (from :func:`jobs.validate.plan_spec`) gives the parsed expressions; without
    one they are parsed here, as for a spec that tests build by hand.

    Raises
    ------
    SpecError
        For a cast to ``decimal(p, s)`` or a source with ``decimals: exact``, which only the Polars
        engine computes (a job moved here from the GPU Polars engine; at submit, one for this
        engine is refused already).
    """
    for field in decimal_casts(plan.expressions if plan is not None else {}):
        raise refuse_on_dask(field)
    for field in spec.exact_decimal_sources():  # read as float64 here, it would be a silently inexact answer
        raise SpecError(f"{field}.decimals: exact decimals run only on the Polars engine (pandas and cuDF frames here compute "
                        "in float64): use engine: polars or auto, or decimals: float64", field=f"{field}.decimals")
    return NamedFrames(spec, plan).output()
