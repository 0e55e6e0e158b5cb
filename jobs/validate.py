"""Check a JobSpec against its sources' real schemas before any cluster work.

Walks the steps with a symbolic schema (column name → kind), so an unknown column or
a mix of kinds (a string compared with a number, join keys of different kinds) is
reported with the step and field that names it, not as a KeyError from a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar

from spillway.jobs.decimal_cast import decimal_casts, refuse_on_dask
from spillway.jobs.engine_choice import EngineName, choose_engine
from spillway.jobs.errors import SpecError, TypeMismatch, UnknownColumn
from spillway.jobs.expr import parse_expression, shorten
from spillway.jobs.key_types import kept_type, source_type, types_clash
from spillway.jobs.kinds import kinds_compatible
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.sources import Schema, files_listed_once, read_schema
from spillway.jobs.spec import (
    NUMERIC_AGGS,
    PAIR_AGGS,
    RANKING_WINDOW_FUNCS,
    Aggregation,
    AssignStep,
    DerivedSource,
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
    SqlSource,
    Step,
    TopKStep,
    UnionStep,
    UnpivotStep,
    WindowStep,
)
from spillway.jobs.reshape import pivot_steps

SchemaReader = Callable[..., Schema]

_AGG_KIND = {kind: "numeric" for kind in ("count", "size", "nunique", "count_distinct", "mean", "median", "quantile", "std", "var", "corr", "covar")}
_AGG_KIND |= {"any": "bool", "all": "bool", "string_agg": "string"}
_NOT_SUMMABLE = ("string", "datetime", "binary", "other")
_CONDITION_KINDS = ("bool", "unknown", "other")
# The plan being built by plan_spec: the checks below record into it what they parse and infer.
_PLAN: ContextVar[LogicalPlan] = ContextVar("spillway_plan")
_SourceSchemas = Callable[[SourceSpec | str, str], Schema]  # (inline source or name, field) → schema


def _require(schema: Schema, columns: Iterable[str], *, where: str, field: str) -> None:
    for column in columns:
        if column not in schema:
            raise UnknownColumn(
                f"{where}: unknown column '{column}'; available: {', '.join(schema) or '(none)'}",
                field=field,
            )


def _expression_kind(text: str, schema: Schema, *, where: str, field: str) -> str:
    """Parse ``text`` (once: into the plan being built), check that the columns it reads exist,
    and return the kind it yields."""
    expr = parse_expression(text, field=field)
    _PLAN.get().expressions[field] = expr
    _require(schema, sorted(expr.columns), where=where, field=field)
    try:
        return expr.infer_kind(schema)
    except TypeMismatch as exc:  # name the step, as every error here does
        raise TypeMismatch(f"{where}: {exc.message}", field=field) from None


def check_spec(spec: JobSpec, read: SchemaReader = read_schema) -> Schema:
    """Validate every step of ``spec`` and of its derived sources, and return the schema of its output.

    The same checks as :func:`plan_spec`, keeping only the output's schema.
    """
    return plan_spec(spec, read).output


def plan_spec(spec: JobSpec, read: SchemaReader = read_schema) -> LogicalPlan:
    """Validate every step of ``spec`` and of its derived sources; return its logical plan.

    Every named source is checked, used or not, in definition order; a derived source's
    schema comes from walking its steps, once however many steps use its name.

    Raises
    ------
    SourceNotFound, UnknownColumn, ExpressionError, TypeMismatch, SpecError
        With ``field`` set to the offending part, e.g. ``steps[2].expr`` or
        ``sources.late_lines.steps[0].expr``.
    """
    plan = LogicalPlan(spec)
    token = _PLAN.set(plan)
    try:
        plan.output = _check(spec, read)
    finally:
        _PLAN.reset(token)
    return plan


def _check(spec: JobSpec, read: SchemaReader) -> Schema:
    named: dict[str, Schema] = {}

    def schema_of(ref: SourceSpec | str, field: str) -> Schema:
        if isinstance(ref, str) and ref in named:  # a named source is checked once, however many steps use it
            return named[ref]
        source, defined_at = spec.resolve(ref, field)
        if isinstance(source, DerivedSource):  # JobSpec refuses cycles, so this recursion ends
            start = schema_of(source.from_, f"{defined_at}.from")
            schema = _check_steps(start, source.steps, f"{defined_at}.steps", f"source '{ref}' ", schema_of)
        elif isinstance(source, SqlSource):  # only a named source is SQL, so ref is its name
            from spillway.jobs.sql_source import plan_sql_source

            query = _PLAN.get().queries[defined_at] = plan_sql_source(str(ref), source.sql, list(spec.sources), schema_of)
            schema = query.schema
        else:
            schema = read(source, field=defined_at)
        _refuse_reserved(schema, {}, f"source '{ref}'" if isinstance(ref, str) else "the source", defined_at,
                         fix="rename it in the files (or in the SQL)")
        _PLAN.get().schemas[defined_at] = schema
        if isinstance(ref, str):
            named[ref] = schema
        return schema

    if sql_sources := spec.sql_sources():  # SQL's text is checked before any source is read
        from spillway.jobs.sql_check import check_sql

        for name, source in sql_sources.items():
            check_sql(source.sql, f"sources.{name}.sql", list(spec.sources), own_name=name)
    for name in spec.sources:
        schema_of(name, f"sources.{name}")
    schema = _check_steps(schema_of(spec.source, "source"), spec.steps, "steps", "", schema_of)
    _require(schema, spec.sink.partition_on, where="sink", field="sink.partition_on")
    if spec.sink.partition_on and len(spec.sink.partition_on) >= len(schema):
        raise SpecError("partition_on must leave at least one column to write", field="sink.partition_on")
    return schema


def _check_steps(schema: Schema, steps: list[Step], at: str, label: str, schema_of: _SourceSchemas, *, users: bool = True) -> Schema:
    """The schema after ``steps`` (whose field is ``at``), starting from ``schema``; messages
    name each step as ``{label}step {index} ({op})``. ``users``: the spec's own steps, not those a
    pivot stands for (which may name working columns: the pivot's output is checked as a whole)."""
    for index, step in enumerate(steps):
        _PLAN.get().inputs[f"{at}[{index}]"] = schema
        before, where = schema, f"{label}step {index} ({step.op})"
        schema = _check_step(schema, step, where, f"{at}[{index}]", schema_of)
        if users:
            _refuse_reserved(schema, before, where, f"{at}[{index}]")
        _PLAN.get().schemas[f"{at}[{index}]"] = schema
    return schema


#: The prefix of the working columns both engines add inside a step and drop before it ends.
RESERVED_PREFIX = "__spillway_"


def _refuse_reserved(schema: Schema, before: Schema, where: str, field: str, fix: str = "give it another name") -> None:
    """A column ``schema`` gained over ``before`` must not take a name the engines keep for their working columns
    (a window step's row index, a join's row numbers: a clash failed the job or mixed the two up), nor hold a NUL byte."""
    for name in schema:
        if name.startswith(RESERVED_PREFIX) and name not in before:
            raise SpecError(f"{where}: column '{name}' starts with '{RESERVED_PREFIX}', which Spillway keeps for the working "
                            f"columns of its steps: {fix}", field=field)
        if "\0" in name and name not in before:  # Polars panics writing it (a C string), after all the work
            raise SpecError(f"{where}: column {name!r} holds a NUL byte, which no column written can: {fix}", field=field)


def _check_step(schema: Schema, step: Step, where: str, field: str, schema_of: _SourceSchemas) -> Schema:
    if isinstance(step, FilterStep):
        kind = _expression_kind(step.expr, schema, where=where, field=f"{field}.expr")
        if kind not in _CONDITION_KINDS:
            raise TypeMismatch(
                f"{where}: a filter needs a condition (bool), got '{shorten(step.expr)}' ({kind})",
                field=f"{field}.expr",
            )
        return schema
    if isinstance(step, AssignStep):
        return {**schema, step.column: _expression_kind(step.expr, schema, where=where, field=f"{field}.expr")}
    if isinstance(step, SelectStep):
        _require(schema, step.columns, where=where, field=f"{field}.columns")
        return {c: schema[c] for c in step.columns}
    if isinstance(step, RenameStep):
        _require(schema, step.columns, where=where, field=f"{field}.columns")
        return {step.columns.get(c, c): kind for c, kind in schema.items()}
    if isinstance(step, GroupByStep):
        return _check_groupby(schema, step, where, field)
    if isinstance(step, TopKStep):
        _require(schema, step.by, where=where, field=f"{field}.by")
        for position, key in enumerate(step.order):
            _require(schema, [key.column], where=where, field=f"{field}.order[{position}].column")
        return schema
    if isinstance(step, SortStep):
        _require(schema, step.by, where=where, field=f"{field}.by")
        return schema
    if isinstance(step, DropDuplicatesStep):
        _require(schema, step.subset or [], where=where, field=f"{field}.subset")
        return schema
    if isinstance(step, LimitStep):
        return schema
    if isinstance(step, JoinStep):
        return _check_join(schema, step, where, field, schema_of)
    if isinstance(step, WindowStep):
        return _check_window(schema, step, where, field)
    if isinstance(step, UnionStep):
        return _check_union(schema, step, where, field, schema_of)
    if isinstance(step, PivotStep):
        return _check_pivot(schema, step, where, field, schema_of)
    if isinstance(step, UnpivotStep):
        return _check_unpivot(schema, step, where, field)
    raise SpecError(f"{where}: unsupported step", field=f"{field}.op")  # pragma: no cover - the union is closed


def _check_groupby(schema: Schema, step: GroupByStep, where: str, field: str) -> Schema:
    _require(schema, step.by, where=where, field=f"{field}.by")
    out: Schema = {c: schema[c] for c in step.by}
    for name, agg in step.aggs.items():
        agg_field = f"{field}.aggs.{name}"
        kind = "unknown"  # size reads no input
        if agg.expr is not None:
            kind = _expression_kind(agg.expr, schema, where=where, field=f"{agg_field}.expr")
            if agg.func in NUMERIC_AGGS and kind in _NOT_SUMMABLE:
                raise TypeMismatch(
                    f"{where}: cannot {agg.func} expression '{shorten(agg.expr)}' of kind {kind}",
                    field=f"{agg_field}.func",
                )
        if agg.column is not None:
            _require(schema, [agg.column], where=where, field=f"{agg_field}.column")
            kind = schema[agg.column]
            if agg.func in NUMERIC_AGGS and kind in _NOT_SUMMABLE:
                raise TypeMismatch(
                    f"{where}: cannot {agg.func} column '{agg.column}' of kind {kind}",
                    field=f"{agg_field}.func",
                )
        if name in out:
            raise SpecError(f"{where}: output column '{name}' is also a group key", field=agg_field)
        _check_aggregation_input(schema, agg, kind, where, agg_field)
        # A sum of bools counts them; min, max, first, last and mode keep their input's kind.
        out[name] = _AGG_KIND.get(agg.func, "numeric" if agg.func == "sum" and kind == "bool" else kind)
    return out


def _check_aggregation_input(schema: Schema, agg: Aggregation, kind: str, where: str, agg_field: str) -> None:
    """The checks of the aggregations that want one kind of input, or a second input or an order."""
    described = f"'{agg.column or shorten(agg.expr or '')}' of kind {kind}"
    wanted = {"any": "bool", "all": "bool", "string_agg": "string"}.get(agg.func)
    if wanted is not None and kind not in (wanted, "unknown", "other"):
        hint = "a condition such as x > 0" if wanted == "bool" else "cast(x, 'string')"
        raise TypeMismatch(f"{where}: {agg.func} takes {wanted} values, not {described}: give {hint}", field=f"{agg_field}.func")
    if agg.func in PAIR_AGGS:
        if kind == "bool":
            raise TypeMismatch(f"{where}: cannot {agg.func} {described}: numbers only", field=f"{agg_field}.func")
        if agg.other is not None:
            _require(schema, [agg.other], where=where, field=f"{agg_field}.other")
            other_kind, other_field, other_text = schema[agg.other], f"{agg_field}.other", agg.other
        else:
            other_field, other_text = f"{agg_field}.other_expr", agg.other_expr or ""
            other_kind = _expression_kind(other_text, schema, where=where, field=other_field)
        if other_kind in (*_NOT_SUMMABLE, "bool"):
            raise TypeMismatch(f"{where}: cannot {agg.func} with '{shorten(other_text)}' of kind {other_kind}: numbers only", field=other_field)
    for position, key in enumerate(agg.order_by or []):
        _require(schema, [key.column], where=where, field=f"{agg_field}.order_by[{position}].column")


def _literal_kind(value: object) -> str:
    if value is None:
        return "unknown"
    return "bool" if isinstance(value, bool) else "string" if isinstance(value, str) else "numeric"


def _check_window(schema: Schema, step: WindowStep, where: str, field: str) -> Schema:
    _require(schema, step.partition_by, where=where, field=f"{field}.partition_by")
    for position, key in enumerate(step.order_by):
        _require(schema, [key.column], where=where, field=f"{field}.order_by[{position}].column")
    keys = {*step.partition_by, *(key.column for key in step.order_by)}
    out = dict(schema)
    for name, column in step.columns.items():
        at = f"{field}.columns.{name}"
        if name in keys:
            raise SpecError(f"{where}: output column '{name}' is a partition_by or order_by column", field=at)
        if column.needs_order and not step.order_by:
            frame = f" with a {column.frame} frame" if column.frame else ""
            raise SpecError(f"{where}: '{name}' ({column.func}{frame}) depends on the order of rows: give order_by", field=f"{field}.order_by")
        kind = "numeric"  # row_number, rank and dense_rank read no input
        if column.expr is not None:
            kind = _expression_kind(column.expr, schema, where=where, field=f"{at}.expr")
        elif column.column is not None:
            _require(schema, [column.column], where=where, field=f"{at}.column")
            kind = schema[column.column]
        summed = column.func in ("sum", "mean") or (column.func in ("min", "max") and column.frame in ("running", "rolling"))
        if summed and kind in (*_NOT_SUMMABLE, "bool"):
            frame = f" over a {column.frame} frame" if column.func in ("min", "max") else ""
            raise TypeMismatch(f"{where}: cannot {column.func} '{column.column or shorten(column.expr or '')}' of kind {kind}{frame}: "
                               "numbers only (cast a bool with cast(x, 'int64'))", field=f"{at}.func")
        default_kind = _literal_kind(column.default)
        if not kinds_compatible(kind, default_kind) or (kind == "datetime" and column.default is not None):
            raise TypeMismatch(f"{where}: default {column.default!r} ({default_kind}) cannot stand for '{name}' values of kind {kind}",
                               field=f"{at}.default")
        out[name] = "numeric" if column.func in RANKING_WINDOW_FUNCS | {"count", "sum", "mean"} else kind
    return out


def _check_union(schema: Schema, step: UnionStep, where: str, field: str, schema_of: _SourceSchemas) -> Schema:
    out = dict(schema)
    for position, ref in enumerate(step.sources):
        at = f"{field}.sources[{position}]"
        other = schema_of(ref, at)
        name = f"source '{ref}'" if isinstance(ref, str) else f"source {position}"
        missing, extra = [c for c in schema if c not in other], [c for c in other if c not in schema]
        if missing or extra:
            parts = [f"lacks {', '.join(missing)}" if missing else "", f"has {', '.join(extra)} too" if extra else ""]
            raise SpecError(f"{where}: {name} {' and '.join(p for p in parts if p)}; a union needs the same columns "
                            f"(by name) as the rows before it: {', '.join(schema)}", field=at)
        for column, kind in schema.items():
            if not kinds_compatible(kind, other[column]):
                raise TypeMismatch(f"{where}: column '{column}' is {kind} here but {other[column]} in {name}", field=at)
            if out[column] != other[column]:  # numbers with bools, or a loose kind
                out[column] = "numeric" if {out[column], other[column]} <= {"numeric", "bool"} else "unknown"
    return out


def _check_pivot(schema: Schema, step: PivotStep, where: str, field: str, schema_of: _SourceSchemas) -> Schema:
    _require(schema, step.index, where=where, field=f"{field}.index")
    _require(schema, [step.columns], where=where, field=f"{field}.columns")
    _require(schema, [step.values], where=where, field=f"{field}.values")
    if step.columns in step.index or step.values in step.index:
        raise SpecError(f"{where}: '{step.columns if step.columns in step.index else step.values}' is also an index column", field=f"{field}.index")
    kind = schema[step.columns]
    for position, value in enumerate(step.on_values or []):
        if not kinds_compatible(kind, _literal_kind(value)):
            raise TypeMismatch(f"{where}: on_values lists {value!r} ({_literal_kind(value)}) but '{step.columns}' is {kind}",
                               field=f"{field}.on_values[{position}]")
    for name in step.output_columns:
        if name in step.index:
            raise SpecError(f"{where}: output column '{name}' is also an index column", field=f"{field}.on_values")
    if step.agg in NUMERIC_AGGS and schema[step.values] in _NOT_SUMMABLE:
        raise TypeMismatch(f"{where}: cannot {step.agg} column '{step.values}' of kind {schema[step.values]}", field=f"{field}.agg")
    # The steps a pivot stands for, checked (and recorded in the plan) under the pivot's field.
    return _check_steps(schema, pivot_steps(step), f"{field}.expanded", f"{where} ", schema_of, users=False)


def _check_unpivot(schema: Schema, step: UnpivotStep, where: str, field: str) -> Schema:
    _require(schema, step.columns, where=where, field=f"{field}.columns")
    index = [c for c in schema if c not in step.columns] if step.index is None else list(step.index)
    _require(schema, index, where=where, field=f"{field}.index")
    if overlap := [c for c in index if c in step.columns]:
        raise SpecError(f"{where}: '{overlap[0]}' is both an index column and unpivoted", field=f"{field}.index")
    for label, name in (("name", step.name), ("value", step.value)):
        if name in index:
            raise SpecError(f"{where}: output column '{name}' ({label}) is also an index column", field=f"{field}.{label}")
    kind = schema[step.columns[0]]
    for column in step.columns[1:]:
        other = schema[column]
        # One kind, numbers of any width together: pandas would make a column of Python objects of ints and bools.
        if other != kind and not (kinds_compatible(kind, other) and "bool" not in (kind, other)):
            raise TypeMismatch(f"{where}: unpivoted columns need one kind: '{step.columns[0]}' is {kind} but '{column}' is {other} "
                               "(cast one first)", field=f"{field}.columns")
        if kind in ("unknown", "other"):
            kind = other
    return {**{c: schema[c] for c in index}, step.name: "string", step.value: kind}


def _check_join(schema: Schema, step: JoinStep, where: str, field: str, schema_of: _SourceSchemas) -> Schema:
    right = schema_of(step.right, f"{field}.right")
    _require(schema, step.left_keys, where=f"{where} left side", field=f"{field}.{'on' if step.on else 'left_on'}")
    _require(right, step.right_keys, where=f"{where} right side", field=f"{field}.{'on' if step.on else 'right_on'}")
    for left_key, right_key in zip(step.left_keys, step.right_keys, strict=True):
        _check_key_pair(left_key, schema[left_key], right_key, right[right_key], step, where, field)
    if step.how in ("semi", "anti") and step.where is None:
        return dict(schema)
    out = dict(schema)
    shared_keys = set(step.on or [])
    for column, kind in right.items():
        if column in shared_keys:
            continue
        name = column + step.right_suffix if column in schema else column
        if name in out or (name != column and name in right):
            # pandas refuses such a merge at run time (MergeError), Polars too: a self-join repeated adds b_right twice.
            clash = "the left side" if name in out else "the right side"
            raise SpecError(
                f"{where}: the joined rows would have two columns named '{name}' (the right side's '{column}' with suffix "
                f"'{step.right_suffix}', and a column of {clash}): give another right_suffix, or select or rename columns first",
                field=f"{field}.right_suffix",
            )
        out[name] = kind
    if step.where is not None:  # a condition over the joined row, so it reads the output's names
        kind = _expression_kind(step.where, out, where=where, field=f"{field}.where")
        if kind not in _CONDITION_KINDS:
            raise TypeMismatch(f"{where}: a join's where needs a condition (bool), got '{shorten(step.where)}' ({kind})",
                               field=f"{field}.where")
        _PLAN.get().joined[field] = dict(out)
    return dict(schema) if step.how in ("semi", "anti") else out


def _check_key_pair(left_key: str, left_kind: str, right_key: str, right_kind: str, step: JoinStep, where: str, field: str) -> None:
    """A key pair must be of one kind, "unknown" (a computed column's) matching any: stricter than a comparison, as
    pandas' merge and Polars' join both refuse a bool with a number, and an "other" column (a duration, a time,
    bytes, a parquet column of nulls) with any other kind. Of one kind, their files' types must meet too (:func:`jobs.key_types.types_clash`)."""
    keys_field = f"{field}.{'on' if step.on else 'left_on'}"
    if left_kind != right_kind and "unknown" not in (left_kind, right_kind):
        hint = " (make the bool a number first, as x * 1: 1 for true, 0 for false)" if {left_kind, right_kind} == {"bool", "numeric"} else ""
        raise TypeMismatch(f"{where}: cannot match left key '{left_key}' ({left_kind}) with right key '{right_key}' ({right_kind}): "
                           f"join keys must have matching kinds{hint}", field=keys_field)
    if left_kind == right_kind and left_kind in ("datetime", "binary", "other"):
        at, _, index = field.rpartition("[")
        plan = _PLAN.get()
        left, right = kept_type(plan, left_key, at, int(index.rstrip("]"))), source_type(plan, step.right, right_key, f"{field}.right")
        reason = None if left is None or right is None else types_clash(left, right)
        if reason is not None:
            raise TypeMismatch(f"{where}: cannot match left key '{left_key}' ({left_kind}, {left} in its file) with right key '{right_key}' "
                               f"({right_kind}, {right} in its file): {reason}", field=keys_field)


def validate_submission(
    spec: JobSpec, allowed_roots: list[str], *, max_partitions: int | None = None, default_engine: EngineName = "auto"
) -> LogicalPlan:
    """Every check a job passes before it is accepted: data roots, sources' schemas, a free sink; its plan.

    With ``max_partitions``, a job that will run on the Dask engine (``engine: dask``, or
    ``default_engine`` for a spec without one) has its partitions estimated from its files' sizes
    and blocksize, as the manager estimates them before building its graph: over the limit it is
    refused now, not failed once it was queued.

    A job for the Dask engine that casts to ``decimal(p, s)`` is refused (only Polars computes decimals).

    Raises
    ------
    PathNotAllowed, SourceNotFound, UnknownColumn, ExpressionError, TypeMismatch, SpecError, SinkExists, TooManyPartitions
    """
    from spillway.jobs.dask_read import check_partitions
    from spillway.jobs.sandbox import check_paths
    from spillway.jobs.sink import ensure_sink_free

    with files_listed_once():
        check_paths(spec, allowed_roots)
        plan = plan_spec(spec)
        ensure_sink_free(spec.sink, columns=plan.output)
        # The backend changes the device, never the engine: "pandas" stands for either.
        if choose_engine(spec, default_engine, "pandas").engine == "dask":
            for field in decimal_casts(plan.expressions):
                raise refuse_on_dask(field)
            if max_partitions is not None:
                check_partitions(spec, max_partitions)
    return plan
