"""Which runs a pipeline should have: checking a definition, and planning runs for intervals.

Pure functions of a pipeline and a time: no database, no clock of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from spillway.jobs.spec import JobSpec
from spillway.service.pipelines.errors import TemplateError
from spillway.service.pipelines.models import PipelineDefinition, RunState, RunTrigger
from spillway.service.pipelines.runs import NewRun
from spillway.service.pipelines.schedule import CronSchedule
from spillway.service.pipelines.store import PipelineRecord
from spillway.service.pipelines.templating import ParamValue, check_param_names, interval_context, render_spec

#: Most firing instants one tick plans for one pipeline; a longer outage is caught up over several ticks.
MAX_FIRES_PER_TICK = 500


def check_definition(definition: PipelineDefinition, now: datetime) -> JobSpec:
    """Fail now rather than at 2 a.m.: check the schedule, the time zone and the parameter
    names, and render the template for the next scheduled interval.

    Raises
    ------
    InvalidSchedule
        A bad cron expression or time zone.
    TemplateError
        A template that does not render into a valid JobSpec; ``field`` names it.
    """
    schedule = CronSchedule(definition.schedule, definition.timezone)
    check_param_names(definition.params)
    start = schedule.next_after(now)
    return render_spec(definition.spec, interval_context(start, schedule.next_after(start), schedule.tz, definition.params))


def localize(moment: datetime, schedule: CronSchedule) -> datetime:
    """A datetime given without an offset is read in the pipeline's time zone."""
    return moment.replace(tzinfo=schedule.tz) if moment.tzinfo is None else moment.astimezone(schedule.tz)


def plan_run(
    record: PipelineRecord,
    start: datetime,
    end: datetime,
    trigger: RunTrigger,
    overrides: Mapping[str, ParamValue] | None = None,
) -> NewRun:
    """A QUEUED run for the interval ``[start, end)`` with its spec rendered now.

    Raises
    ------
    TemplateError
        If the spec does not render for this interval and these parameters.
    """
    definition = record.definition
    check_param_names(overrides or {})
    if unknown := [name for name in overrides or {} if name not in definition.params]:  # a typo would be ignored silently
        declared = ", ".join(definition.params) or "none"
        raise TemplateError(f"parameter '{unknown[0]}' is not one the pipeline declares (it declares: {declared}); "
                            "declare it in the pipeline's params first", field=f"params.{unknown[0]}")
    params: dict[str, Any] = {**definition.params, **(overrides or {})}
    schedule = CronSchedule(definition.schedule, definition.timezone)
    spec = render_spec(definition.spec, interval_context(start, end, schedule.tz, params))
    return NewRun(start, end, RunState.QUEUED, trigger, record.version, params, spec=spec.model_dump(mode="json"))


def plan_due(record: PipelineRecord, now: datetime) -> tuple[list[NewRun], datetime | None]:
    """Runs for the firing instants after the pipeline's watermark, up to ``now``, and the new watermark.

    An instant more than the pipeline's ``catchup_grace_s`` old was missed (no scheduler ran then). On-time
    instants always run; missed ones follow the catch-up policy: ``all`` runs them,
    ``latest`` runs only the most recent instant of all, ``skip`` runs none. A missed
    instant that does not run is recorded as a SKIPPED run, never dropped, and so is
    a run whose template fails for its interval (as FAILED, with the reason).
    """
    definition = record.definition
    schedule = CronSchedule(definition.schedule, definition.timezone)
    fires = schedule.fires(record.scheduled_through, now, limit=MAX_FIRES_PER_TICK + 1)
    complete = len(fires) <= MAX_FIRES_PER_TICK
    fires = fires[:MAX_FIRES_PER_TICK]
    grace = timedelta(seconds=definition.catchup_grace_s)
    runs: list[NewRun] = []
    for i, end in enumerate(fires):
        start = fires[i - 1] if i else schedule.previous_before(end)
        missed = now - end > grace
        latest = complete and i == len(fires) - 1
        if not missed or definition.catchup == "all" or (definition.catchup == "latest" and latest):
            runs.append(_scheduled(record, start, end))
            continue
        reason = (
            "superseded by a later interval (catchup=latest)"
            if definition.catchup == "latest"
            else f"missed: no scheduler ran at {end.isoformat()} (catchup=skip)"
        )
        runs.append(NewRun(start, end, RunState.SKIPPED, RunTrigger.SCHEDULED, record.version, dict(definition.params), reason=reason))
    return runs, (fires[-1] if fires else None)


def _scheduled(record: PipelineRecord, start: datetime, end: datetime) -> NewRun:
    try:
        return plan_run(record, start, end, RunTrigger.SCHEDULED)
    except TemplateError as exc:
        # Checked when saved, but a template may still fail for one date: keep the evidence.
        params = dict(record.definition.params)
        return NewRun(start, end, RunState.FAILED, RunTrigger.SCHEDULED, record.version, params, reason=f"{exc.code}: {exc.message}")
