"""API models shared by the server, the SDK and the CLI."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ErrorDetail, JobProgress, JobResources, JobStatus, ResultManifest


class ErrorBody(BaseModel):
    """Every 4xx/5xx body: ``{"error": {"code", "message", "field"?}}``."""

    error: ErrorDetail


class JobLinks(BaseModel):
    """Where to look next for a job."""

    self: str
    events: str
    cancel: str
    dashboard: str | None = Field(default=None, description="The Dask dashboard's status page.")


class JobView(BaseModel):
    """A job as the API shows it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    state: JobStatus
    backend: str
    spec: JobSpec
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime
    progress: JobProgress
    error: ErrorDetail | None = None
    result: ResultManifest | None = None
    resources: JobResources | None = Field(default=None, description="GPU backend: peak device memory and bytes spilled, and how they were measured.")
    owner: str | None = Field(default=None, description="The token that submitted the job, as name#id (auth on).")
    replica: str | None = Field(default=None, description="The service replica that claimed the job and runs (or ran) it.")
    links: JobLinks | None = None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at or self.updated_at
        return (end - self.started_at).total_seconds()


class JobAccepted(BaseModel):
    """The answer to ``POST /jobs``."""

    id: str
    state: JobStatus
    links: JobLinks


class JobLogs(BaseModel):
    """``GET /jobs/{id}/logs``."""

    id: str
    lines: list[str]


class JobPage(BaseModel):
    """One page of ``GET /jobs``, newest first."""

    items: list[JobView]
    total: int
    limit: int
    offset: int


class Health(BaseModel):
    status: str
    backend: str
    workers: int
    details: dict[str, Any] = Field(default_factory=dict)


class OutputDeletion(BaseModel):
    """What ``DELETE /jobs/{id}?output=true`` removed of the job's committed output."""

    location: str | None = Field(default=None, description="The sink directory or URL; none when the job committed nothing.")
    files_deleted: int = Field(default=0, description="Data files removed: those the job's manifest lists that were still there.")
    bytes_deleted: int = Field(default=0, description="Their size, as the manifest records it.")
    note: str | None = Field(default=None, description="Why nothing, or not everything, was removed.")


class JobDeleted(BaseModel):
    """The answer to ``DELETE /jobs/{id}``: the job's record and logs are gone."""

    id: str
    state: JobStatus = Field(description="The state the job was in.")
    output: OutputDeletion | None = Field(default=None, description="Only with output=true.")
