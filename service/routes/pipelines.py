"""``/pipelines``: scheduled pipelines, their runs, manual triggers and backfills.

Handlers are thin: the store and the scheduler come from ``app.state.pipelines``
(a :class:`service.pipelines.PipelineServices`), errors are domain types that the
app maps to HTTP in one place. With auth on, a token sees and changes only the
pipelines it created (an ``admin`` token all of them); another's is a 404.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from spillway.jobs.errors import SpillwayError
from spillway.service.auth import CallerDep, Scope, require
from spillway.service.pipelines.errors import InvalidSchedule
from spillway.service.pipelines import PipelineServices
from spillway.service.pipelines.models import (
    BackfillRequest,
    BackfillResult,
    PipelineCreate,
    PipelineDefinition,
    PipelineList,
    PipelineView,
    RunPage,
    RunState,
    RunView,
    TriggerRequest,
)
from spillway.service.pipelines.plans import check_definition
from spillway.service.pipelines.store import PipelineRecord
from spillway.service.routes.deps import MAX_OFFSET
from spillway.service.schemas import ErrorBody

# Reading needs a read token, changing anything a submit token: pipelines start jobs.
router = APIRouter(prefix="/pipelines", tags=["pipelines"], dependencies=[require(Scope.READ)])
_SUBMIT = [require(Scope.SUBMIT)]

_ERRORS = {
    401: {"model": ErrorBody, "description": "No bearer token, or an unknown one."},
    403: {"model": ErrorBody, "description": "The token's scope does not allow this, or a path is outside the data roots."},
    404: {"model": ErrorBody, "description": "No such pipeline, or another token's pipeline."},
    409: {"model": ErrorBody, "description": "The name is taken (by any token), or the run for this logical date exists."},
    422: {"model": ErrorBody, "description": "A bad schedule or time zone, or a template that does not render into a valid JobSpec."},
}


async def get_pipelines(request: Request) -> PipelineServices:
    """The pipeline services the app built in its lifespan."""
    return request.app.state.pipelines


PipelinesDep = Annotated[PipelineServices, Depends(get_pipelines)]


def _check(services: PipelineServices, definition: PipelineDefinition) -> None:
    spec = check_definition(definition, services.store.clock())
    if services.check_job is None:
        return
    try:
        services.check_job(spec)
    except SpillwayError as exc:
        # The check speaks of the job's fields; in a pipeline they sit under "spec".
        exc.field = f"spec.{exc.field}" if exc.field else "spec"
        raise


def _view(services: PipelineServices, record: PipelineRecord) -> PipelineView:
    return record.view(services.scheduler.next_run_at(record))


@router.post("", status_code=201, response_model=PipelineView, responses=_ERRORS, dependencies=_SUBMIT)
async def create_pipeline(body: PipelineCreate, services: PipelinesDep, caller: CallerDep) -> PipelineView:
    """Create a pipeline, owned by the token; its template is rendered for the next run's date first, so errors show now."""
    await asyncio.to_thread(_check, services, body)  # rendering and path checks stay off the event loop
    return _view(services, await asyncio.to_thread(services.store.create, body, owner=caller.owner))


@router.get("", response_model=PipelineList)
async def list_pipelines(services: PipelinesDep, caller: CallerDep) -> PipelineList:
    """The caller's pipelines (every one for an admin), by name."""
    records = await asyncio.to_thread(services.store.list, owner=caller.sees)
    return PipelineList(items=[_view(services, r) for r in records])


@router.get("/{name}", response_model=PipelineView, responses=_ERRORS)
async def get_pipeline(name: str, services: PipelinesDep, caller: CallerDep) -> PipelineView:
    """One pipeline, with its version and when it next runs."""
    return _view(services, await asyncio.to_thread(services.store.get, name, owner=caller.sees))


@router.put("/{name}", response_model=PipelineView, responses=_ERRORS, dependencies=_SUBMIT)
async def update_pipeline(name: str, body: PipelineDefinition, services: PipelinesDep, caller: CallerDep) -> PipelineView:
    """Replace the definition (a new version); runs already created keep the version they were made from."""
    await asyncio.to_thread(_check, services, body)  # rendering and path checks stay off the event loop
    return _view(services, await asyncio.to_thread(services.store.update, name, body, owner=caller.sees))


@router.delete("/{name}", status_code=204, responses=_ERRORS, dependencies=_SUBMIT)
async def delete_pipeline(name: str, services: PipelinesDep, caller: CallerDep) -> Response:
    """Delete a pipeline and its run history; its jobs stay."""
    await asyncio.to_thread(services.store.delete, name, owner=caller.sees)
    return Response(status_code=204)


@router.post("/{name}/pause", response_model=PipelineView, responses=_ERRORS, dependencies=_SUBMIT)
async def pause_pipeline(name: str, services: PipelinesDep, caller: CallerDep) -> PipelineView:
    """Start no more runs (jobs in flight finish)."""
    return _view(services, await asyncio.to_thread(services.store.set_paused, name, True, owner=caller.sees))


@router.post("/{name}/resume", response_model=PipelineView, responses=_ERRORS, dependencies=_SUBMIT)
async def resume_pipeline(name: str, services: PipelinesDep, caller: CallerDep) -> PipelineView:
    """Run again from the next firing instant; intervals during the pause are not caught up."""
    return _view(services, await asyncio.to_thread(services.store.set_paused, name, False, owner=caller.sees))


@router.post("/{name}/runs", status_code=201, response_model=RunView, responses=_ERRORS, dependencies=_SUBMIT)
async def trigger_run(name: str, body: TriggerRequest, services: PipelinesDep, caller: CallerDep) -> RunView:
    """A manual run for one logical date, with parameter overrides; it starts when a slot is free."""
    try:
        return await services.scheduler.trigger(name, body.logical_date, body.params, owner=caller.sees)
    except OverflowError as exc:  # the interval's end (or start) falls outside Python's calendar
        raise InvalidSchedule(f"no data interval of the schedule around {body.logical_date} fits the calendar (years 1 to 9999)",
                              field="logical_date") from exc


@router.get("/{name}/runs", response_model=RunPage, responses=_ERRORS)
async def list_runs(
    name: str,
    services: PipelinesDep,
    caller: CallerDep,
    state: Annotated[RunState | None, Query(description="Only runs in this state.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> RunPage:
    """Run history, newest logical date first: state, duration, attempts and result location."""
    record = await asyncio.to_thread(services.store.get, name, owner=caller.sees)
    items, total = await asyncio.to_thread(services.store.runs.list, record.id, name, state=state, limit=limit, offset=offset)
    return RunPage(items=items, total=total, limit=limit, offset=offset)


@router.post("/{name}/backfill", status_code=202, response_model=BackfillResult, responses=_ERRORS, dependencies=_SUBMIT)
async def backfill(name: str, body: BackfillRequest, services: PipelinesDep, caller: CallerDep) -> BackfillResult:
    """Queue runs for every ended interval starting in ``[start, end]``; they respect ``max_active_runs``."""
    try:
        return await services.scheduler.backfill(name, body.start, body.end, body.params, owner=caller.sees)
    except OverflowError as exc:
        raise InvalidSchedule(f"the data intervals from {body.start} to {body.end} do not all fit the calendar (years 1 to 9999)",
                              field="start") from exc
