"""``/jobs``: submit, inspect, list, cancel, follow and delete jobs.

With auth on, a token sees, cancels and deletes only the jobs it submitted (an ``admin`` token
sees all): another owner's job answers 404, as a missing one does, so ids reveal nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator

from spillway.jobs.errors import IdempotencyConflict, JobNotFound, QueueFull
from spillway.jobs.gpu_support import check_gpu_submission
from spillway.jobs.sink_delete import delete_output
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import validate_submission
from spillway.service.auth import CallerDep, Scope, accepts_query_token, current_caller, require
from spillway.service.retention import JobActive
from spillway.service.retention import delete_job as delete_record
from spillway.service.routes.dashboard import dashboard_link
from spillway.service.routes.deps import MAX_OFFSET, ServicesDep, get_services, submission_limits
from spillway.service.schemas import ErrorBody, JobAccepted, JobDeleted, JobLinks, JobLogs, JobPage, JobView, OutputDeletion
from spillway.service.store import job_version

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[require(Scope.READ)])

_ERRORS = {
    400: {"model": ErrorBody, "description": "Malformed JSON."},
    401: {"model": ErrorBody, "description": "No bearer token, or an unknown one."},
    404: {"model": ErrorBody, "description": "No such job, or another token's job."},
    403: {"model": ErrorBody, "description": "A source or sink outside the allowed data roots."},
    409: {"model": ErrorBody, "description": "The sink holds data, the job already finished, or an Idempotency-Key was reused for another spec."},
    413: {"model": ErrorBody, "description": "The request body is too large."},
    429: {"model": ErrorBody, "description": "Too many jobs waiting; see Retry-After."},
    422: {"model": ErrorBody, "description": "The spec does not fit its sources: the field and column are named."},
}
# A stream wakes on every write this process makes to its job, and on writes another service
# process made to it on the same database, which service.job_changes looks for once a second for
# every stream at once; it reads the row only then. A comment goes out after this many seconds
# with nothing to send, so that proxies keep the connection.
_KEEPALIVE_S = 15.0


def _links(services: ServicesDep, request: Request, job_id: str) -> JobLinks:
    base = (services.settings.public_url or str(request.base_url)).rstrip("/")
    return JobLinks(
        self=f"{base}/jobs/{job_id}",
        events=f"{base}/jobs/{job_id}/events",
        cancel=f"{base}/jobs/{job_id}/cancel",
        dashboard=dashboard_link(request),
    )


def _with_links(job: JobView, services: ServicesDep, request: Request) -> JobView:
    return job.model_copy(update={"links": _links(services, request, job.id)})


@router.post("", status_code=202, response_model=JobAccepted, responses=_ERRORS, dependencies=[require(Scope.SUBMIT)])
async def submit_job(
    spec: JobSpec,
    services: ServicesDep,
    request: Request,
    response: Response,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=200, description="Send the same key again to get the same job back, never a second run.")
    ] = None,
) -> JobAccepted:
    """Validate a JobSpec against the data roots and its sources' schemas, persist it and queue it."""
    # One thread hop for the whole of it: under 200 submissions at once each hop waited its turn
    # on the thread pool and then on the event loop again (bench/RESULTS.md, issue 16 item 14).
    existing, job, created = await asyncio.to_thread(_accept, services, spec, idempotency_key, caller.owner)
    if existing is not None:
        return _replay(existing, spec, services, request, response)
    if not created:  # a concurrent request with the same key won the insert
        return _replay(job, spec, services, request, response)
    services.manager.enqueue(job.id, caller.owner)
    return JobAccepted(id=job.id, state=job.state, links=_links(services, request, job.id))


def _accept(services: ServicesDep, spec: JobSpec, idempotency_key: str | None, owner: str | None) -> tuple[JobView | None, JobView, bool]:
    """The blocking part of a submit, in order: the job already made under the key (then nothing
    else is done), the queue's limit, the spec's checks against the sources, the insert.

    Returns ``(existing, job, created)``: ``existing`` is the job found under the key, else None.
    """
    if idempotency_key is not None and (existing := _find_by_key(services, idempotency_key, owner)) is not None:
        return existing, existing, False
    limit = services.settings.max_queued_jobs
    # A cheap refusal before validation reads the sources; the insert below is what enforces the limit.
    queued = services.store.pending_count()
    if queued >= limit:
        raise QueueFull(f"{queued} jobs are waiting; the limit is {limit}. Retry later.")
    plan = validate_submission(spec, **submission_limits(services.settings))
    if services.cluster.backend == "cudf":
        check_gpu_submission(plan, services.settings.default_engine, services.cluster.backend)
    job, created = services.store.create(spec, services.cluster.backend, idempotency_key=idempotency_key, owner=owner, max_pending=limit)
    return None, job, created


def _find_by_key(services: ServicesDep, key: str, owner: str | None) -> JobView | None:
    try:
        return services.store.get_by_idempotency_key(key, owner=owner)
    except JobNotFound:
        return None


def _replay(job: JobView, spec: JobSpec, services: ServicesDep, request: Request, response: Response) -> JobAccepted:
    if job.spec != spec:
        raise IdempotencyConflict(f"Idempotency-Key was first used for job {job.id} with a different spec", field="Idempotency-Key")
    response.status_code = 200
    return JobAccepted(id=job.id, state=job.state, links=_links(services, request, job.id))


def _state_name(value: object) -> object:
    """A state as typed, in any case: ``?state=running`` is RUNNING, as ``spillway list --state running`` is."""
    return value.upper() if isinstance(value, str) else value


@router.get("", response_model=JobPage)
async def list_jobs(
    services: ServicesDep,
    request: Request,
    caller: CallerDep,
    state: Annotated[JobStatus | None, BeforeValidator(_state_name), Query(description="Only jobs in this state (any case: running).")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> JobPage:
    """The caller's jobs (every job for an admin), newest first, optionally filtered by state."""
    items, total = await asyncio.to_thread(services.store.list, state=state, limit=limit, offset=offset, owner=caller.sees)
    return JobPage(items=[_with_links(j, services, request) for j in items], total=total, limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobView, responses=_ERRORS)
async def get_job(job_id: str, request: Request) -> JobView:
    """State, timestamps, progress per stage, the error or the result manifest."""
    # The most frequent request calls the functions behind ServicesDep and CallerDep itself: as two
    # more dependencies, FastAPI's solving of them was 6 % of a status read's work in the app
    # (bench/RESULTS.md, issue 16 item 14). The scope check stays the router's dependency.
    services, caller = await get_services(request), await current_caller(request)
    return _with_links(await services.store.status_reads.get(job_id, owner=caller.sees), services, request)


@router.get("/{job_id}/logs", response_model=JobLogs, responses=_ERRORS)
async def job_logs(job_id: str, services: ServicesDep, caller: CallerDep) -> JobLogs:
    """The job's log: the service's events so far while it runs; once it has finished, also the
    worker exception with its traceback, and workers' warnings and errors from while it ran
    (capped at 64 KiB)."""
    stored = await asyncio.to_thread(services.store.logs, job_id, owner=caller.sees)  # 404 for another owner's job
    # A job this service runs keeps its lines in memory until they are stored, which is just
    # after its terminal state is: read them there, so a finished job never shows an empty log.
    live = services.manager.live_log(job_id)
    return JobLogs(id=job_id, lines=live if live is not None else stored)


@router.post("/{job_id}/cancel", response_model=JobView, status_code=202, responses=_ERRORS, dependencies=[require(Scope.SUBMIT)])
async def cancel_job(job_id: str, services: ServicesDep, request: Request, caller: CallerDep) -> JobView:
    """Cancel a pending or running job: its tasks are released and nothing is committed."""
    await asyncio.to_thread(services.store.get, job_id, owner=caller.sees)  # 404 for another owner's job
    job = await services.manager.cancel(job_id, timeout=services.settings.cancel_timeout_s)
    return _with_links(job, services, request)


@router.get("/{job_id}/events", responses=_ERRORS)
@accepts_query_token
async def job_events(job_id: str, services: ServicesDep, request: Request, caller: CallerDep) -> StreamingResponse:
    """Server-sent events: ``progress`` on every change, then one ``end`` when the job is terminal.

    The ``end`` event also carries the whole job, as ``GET /jobs/{id}`` answers it (under ``job``),
    so a client waiting for the end needs no second request for the result.
    """
    await asyncio.to_thread(services.store.get, job_id, owner=caller.sees)  # 404 before the stream starts

    async def stream() -> AsyncIterator[str]:
        last: str | None = None
        quiet = 0.0
        loop = asyncio.get_running_loop()
        async with services.changes.watch(job_id) as changed:
            while True:
                job = await asyncio.to_thread(services.store.get, job_id)
                changed.seen(job_version(job))
                fields = {
                    "id": job.id,
                    "state": job.state.value,
                    "progress": job.progress.model_dump(mode="json"),
                    "error": job.error.model_dump(mode="json") if job.error else None,
                }
                if job.state.is_terminal():
                    fields["job"] = _with_links(job, services, request).model_dump(mode="json")
                    yield f"event: end\ndata: {json.dumps(fields)}\n\n"
                    return
                data = json.dumps(fields)
                if data != last:
                    yield f"event: progress\ndata: {data}\n\n"
                    last, quiet = data, 0.0
                while True:  # until the job changes; a keep-alive for each _KEEPALIVE_S sent nothing
                    started = loop.time()
                    woke = await changed.wait(max(0.0, _KEEPALIVE_S - quiet))
                    quiet += loop.time() - started
                    if woke:
                        break
                    yield ": keep-alive\n\n"
                    quiet = 0.0

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.delete("/{job_id}", response_model=JobDeleted, responses=_ERRORS, dependencies=[require(Scope.SUBMIT)])
async def delete_job(
    job_id: str,
    services: ServicesDep,
    caller: CallerDep,
    output: Annotated[
        bool, Query(description="Also delete the committed output: the files the job's manifest lists, its _manifest.json and _SUCCESS.")
    ] = False,
) -> JobDeleted:
    """Delete a finished job's record and logs (a PENDING or RUNNING job answers 409: cancel it first).

    With ``output=true`` its committed files go first, only while the sink still holds this job's
    commit: after a later append or overwrite to the same sink the answer is 409 and nothing is deleted.
    """
    job = await asyncio.to_thread(services.store.get, job_id, owner=caller.sees)
    if not job.state.is_terminal():
        raise JobActive(f"job {job_id} is {job.state.value}: cancel it first (POST /jobs/{job_id}/cancel), then delete it", field="id")
    removed = None
    if output:
        if job.result is None:
            removed = OutputDeletion(note=f"the job is {job.state.value} and committed nothing")
        else:
            done = await asyncio.to_thread(delete_output, job.result, job.id, services.settings.allowed_roots)
            removed = OutputDeletion(location=done.location, files_deleted=done.files, bytes_deleted=done.bytes, note=done.note)
    await asyncio.to_thread(delete_record, services.store, job_id, owner=caller.sees)
    return JobDeleted(id=job_id, state=job.state, output=removed)
