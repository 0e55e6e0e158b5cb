"""The file types behind a join's key columns, traced through the steps, and which pairs no engine joins.

Join keys of one kind may still hold types the engines cannot match: a datetime with a time zone
and one without, two "other" columns of different families (a time with bytes), lists or structs.
Such a pair is refused at submit (jobs/validate.py) where the types are known: a key that the steps
before the join kept as a parquet file's column (filtered, renamed, joined, assigned as it is). A
computed key's type is not known before the run, and is not traced.
"""

from __future__ import annotations

import pyarrow as pa

from spillway.jobs import ir
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.sources import parquet_schema, plain_arrow_type, resolve_files
from spillway.jobs.spec import (
    AssignStep,
    DerivedSource,
    GroupByStep,
    JoinStep,
    PivotStep,
    RenameStep,
    SourceSpec,
    Step,
    UnpivotStep,
    WindowStep,
)

# Parquet types the engines read alike ("other" kinds): Polars reads every time in nanoseconds, every binary as Binary.
_FAMILIES = (("time", pa.types.is_time), ("binary", pa.types.is_binary), ("binary", pa.types.is_large_binary), ("duration", pa.types.is_duration))


def types_clash(left: pa.DataType, right: pa.DataType) -> str | None:
    """Why the engines cannot join keys of one kind whose files hold types ``left`` and ``right``, or None where they do."""
    left, right = plain_arrow_type(left) or left, plain_arrow_type(right) or right  # a date is read as a naive timestamp
    if pa.types.is_timestamp(left) and pa.types.is_timestamp(right):
        aware = getattr(left, "tz", None) is not None, getattr(right, "tz", None) is not None
        return "neither engine joins a datetime with a time zone to one without" if aware[0] != aware[1] else None
    if pa.types.is_nested(left) or pa.types.is_nested(right):
        return "pandas' merge cannot hash a list or struct"
    family = [next((name for name, test in _FAMILIES if test(dtype)), str(dtype)) for dtype in (left, right)]
    return "neither engine joins two such types" if family[0] != family[1] else None


def kept_type(plan: LogicalPlan, column: str, at: str, index: int) -> pa.DataType | None:
    """The Arrow type of ``column`` going into step ``index`` of the steps at ``at`` (``steps``, ``sources.x.steps``)
    of ``plan`` (being checked: its inputs and schemas filled up to that step), where the steps kept a parquet file's
    column; None where a step computed it, or it comes from a file of another format or from SQL."""
    spec = plan.spec
    assert spec is not None  # plan_spec's plan has its spec
    steps = dict(spec.step_lists())[at]
    for position in reversed(range(index)):
        step, step_field = steps[position], f"{at}[{position}]"
        if isinstance(step, JoinStep) and column not in plan.inputs[step_field]:
            right_field = f"{step_field}.right"
            right_columns = plan.schemas[spec.resolve(step.right, right_field)[1]]
            return source_type(plan, step.right, column if column in right_columns else column.removesuffix(step.right_suffix), right_field)
        traced = _traced_column(plan, column, step, step_field)
        if traced is None:
            return None
        column = traced
    if at == "steps":
        return source_type(plan, spec.source, column, "source")
    derived = at.removesuffix(".steps")  # sources.<name>
    return source_type(plan, spec.derived_sources()[derived.removeprefix("sources.")].from_, column, f"{derived}.from")


def source_type(plan: LogicalPlan, ref: SourceSpec | str, column: str, field: str) -> pa.DataType | None:
    """The Arrow type of ``column`` in the files of the source ``ref``: see :func:`kept_type`."""
    assert plan.spec is not None
    source, defined_at = plan.spec.resolve(ref, field)
    if isinstance(source, DerivedSource):
        return kept_type(plan, column, f"{defined_at}.steps", len(source.steps))
    if not isinstance(source, SourceSpec) or source.format != "parquet":
        return None
    return parquet_schema(resolve_files(source, field=defined_at))[0].field(column).type


def _traced_column(plan: LogicalPlan, column: str, step: Step, field: str) -> str | None:
    """The name ``column`` had going into ``step`` (a join's right side aside), or None where the step computed it."""
    if isinstance(step, RenameStep):
        return next((old for old, new in step.columns.items() if new == column), column)
    if isinstance(step, AssignStep) and step.column == column:
        node = plan.expressions[f"{field}.expr"].node
        return node.name if isinstance(node, ir.Col) else None
    if isinstance(step, GroupByStep | PivotStep):
        return column if column in (step.by if isinstance(step, GroupByStep) else step.index) else None
    if isinstance(step, WindowStep) and column in step.columns or isinstance(step, UnpivotStep) and column in (step.name, step.value):
        return None
    return column


__all__ = ["kept_type", "source_type", "types_clash"]
