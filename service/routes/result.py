"""``GET /jobs/{id}/result``: the first rows of a succeeded job's output, read through its manifest.

The same reading as ``spillway result --head`` and the SDK's ``head()`` (service/result_preview.py),
done by the service, so a browser that cannot reach the sink's files can still see them.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import math
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from spillway.jobs.errors import InvalidTransition
from spillway.jobs.status import ColumnSchema, JobStatus, ResultManifest
from spillway.service.auth import CallerDep, Scope, require
from spillway.service.result_preview import read_head
from spillway.service.routes.deps import ServicesDep
from spillway.service.schemas import ErrorBody

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[require(Scope.READ)])

#: Rows a preview may ask for: a look at the data, not an export (the files are for that).
MAX_HEAD = 1000

_ERRORS = {
    401: {"model": ErrorBody, "description": "No bearer token, or an unknown one."},
    403: {"model": ErrorBody, "description": "``path_not_allowed``: the sink now lies outside the data roots, or a link stands in it."},
    404: {"model": ErrorBody, "description": "No such job, or another token's job."},
    409: {"model": ErrorBody, "description": "``no_result``: the job has not succeeded, or its committed files are gone; "
                                              "``result_unreadable``: a file differs from the manifest, or cannot be read."},
    422: {"model": ErrorBody, "description": "``head`` out of range."},
}


class NoResult(InvalidTransition):
    """The job has no committed output to read: not SUCCEEDED, or its files were deleted since."""

    code = "no_result"


class ResultPreview(BaseModel):
    """``GET /jobs/{id}/result``: rows as lists in the order of ``columns``."""

    id: str
    columns: list[ColumnSchema] = Field(description="The output schema, as in the manifest.")
    rows: list[list[Any]] = Field(description="Values that JSON cannot hold (dates, decimals, NaN, bytes) are given as text.")
    total_rows: int = Field(description="Rows in the whole result (the manifest's count).")


@router.get("/{job_id}/result", response_model=ResultPreview, responses=_ERRORS)
async def result_preview(
    job_id: str,
    services: ServicesDep,
    caller: CallerDep,
    head: Annotated[int, Query(ge=1, le=MAX_HEAD, description="How many rows, from the first file of the manifest on.")] = 20,
) -> ResultPreview:
    """The first ``head`` rows of a SUCCEEDED job's committed output, read from the files its manifest lists."""
    job = await asyncio.to_thread(services.store.get, job_id, owner=caller.sees)
    if job.state != JobStatus.SUCCEEDED or job.result is None:
        raise NoResult(f"job {job_id} is {job.state.value}: only a SUCCEEDED job has rows to show", field="id")
    manifest = job.result
    try:
        # Reading the files and building the rows are off the event loop: a wide result takes a while.
        return await asyncio.to_thread(_preview, job_id, manifest, head, services.settings.allowed_roots)
    except FileNotFoundError as exc:
        raise NoResult(f"the committed files of job {job_id} are gone from {manifest.location} (deleted or overwritten?): {exc}", field="id") from exc


def _preview(job_id: str, manifest: ResultManifest, head: int, roots: list[str]) -> ResultPreview:
    """The preview of ``manifest``'s first ``head`` rows, in the manifest's column order; linear in the columns."""
    table = read_head(manifest, head, roots)
    index = {name: i for i, name in enumerate(table.column_names)}
    # The manifest's order; a partition column read from the paths comes last in the file, as in the schema.
    shown = [c for c in manifest.columns if c.name in index] or [ColumnSchema(name=f.name, type=str(f.type)) for f in table.schema]
    columns = [table.column(index[c.name]).to_pylist() for c in shown]
    rows = [[_json_value(v) for v in row] for row in zip(*columns, strict=True)]
    return ResultPreview(id=job_id, columns=shown, rows=rows, total_rows=manifest.total_rows)


def _json_value(value: Any) -> Any:
    """``value`` as JSON can hold it; otherwise as its text (JSON has no NaN, dates or bytes)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal | dt.timedelta):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)
