"""Pipeline and run models shared by the routes, the SDK, the CLI and the scheduler."""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from spillway.service.pipelines.templating import ParamValue

CatchupPolicy = Literal["skip", "latest", "all"]
#: Default ``catchup_grace_s``: six ticks of the service's scheduler (every 5 s), so a tick that
#: runs late on a busy loop is not an outage, and a restart that takes longer is.
CATCHUP_GRACE_S = 30.0
PIPELINE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ].*)?$", re.DOTALL)


def iso_datetime(value: Any) -> Any:
    """Accept only an ISO date or date-time (``2026-11-28``, ``2026-11-28T02:30+01:00``) or a datetime.

    Pydantic alone would read a number, or text such as ``20261128``, as Unix seconds (1970-08-23).
    """
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATE.match(value.strip())):
        return value
    raise ValueError("give an ISO date or date-time, e.g. 2026-11-28 or 2026-11-28T02:30+01:00")


class PipelineDefinition(BaseModel):
    """What a pipeline does and when: the versioned part, replaced as a whole by PUT."""

    model_config = ConfigDict(extra="forbid")

    spec: dict[str, Any] = Field(description="A JobSpec whose strings may use templates such as `{{ ds }}` or `{{ params.region }}`.")
    schedule: str = Field(min_length=1, max_length=200, description="Cron (`30 2 * * *`) or an alias (`@daily`).")
    timezone: str = Field(default="UTC", description="IANA time zone the schedule and `ds` are read in, e.g. `Europe/Berlin`.")
    params: dict[str, ParamValue] = Field(default_factory=dict, description="Default parameters; a trigger may override them.")
    catchup: CatchupPolicy = Field(
        default="skip",
        description="Intervals missed while no scheduler ran: `skip` records them as SKIPPED, "
        "`latest` runs only the most recent one, `all` runs every one.",
    )
    catchup_grace_s: float = Field(
        default=CATCHUP_GRACE_S,
        ge=0,
        le=86_400,
        description="A firing the scheduler first sees more than this many seconds after its time was missed (an outage, "
        "a slow restart) and follows `catchup`; a younger one runs as on time. The scheduler ticks every few seconds, "
        "so a firing it was up for is seen well within the default.",
    )
    max_active_runs: int = Field(default=1, ge=1, le=100, description="Runs in flight at once; the rest wait QUEUED.")
    retries: int = Field(default=0, ge=0, le=20, description="New job attempts after a FAILED one.")
    retry_backoff_s: float = Field(default=60.0, ge=0, le=7 * 86400, description="Retry n waits retry_backoff_s * 2**(n-1) seconds.")

    def definition(self) -> PipelineDefinition:
        """Only the versioned fields: a PipelineCreate or a PipelineView is a PipelineDefinition too."""
        return PipelineDefinition.model_validate(self.model_dump(include=set(PipelineDefinition.model_fields)))


class PipelineCreate(PipelineDefinition):
    """The body of ``POST /pipelines``."""

    name: str = Field(pattern=PIPELINE_NAME, description="Unique; used in URLs.")
    paused: bool = Field(default=False, description="A paused pipeline starts no runs.")


class PipelineView(PipelineCreate):
    """A pipeline as the API shows it."""

    version: int = Field(description="Bumped by every update; each run records the version it ran.")
    created_at: datetime
    updated_at: datetime
    next_run_at: datetime | None = Field(default=None, description="When the next scheduled run fires (none while paused).")
    owner: str | None = Field(default=None, description="The token that created the pipeline, as name#id (auth on); its runs' jobs are that token's.")


class RunState(str, Enum):
    """Where a run is: QUEUED → RUNNING (→ UP_FOR_RETRY → RUNNING)* → SUCCEEDED | FAILED | CANCELLED; or SKIPPED."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    UP_FOR_RETRY = "UP_FOR_RETRY"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"

    def is_terminal(self) -> bool:
        """A terminal run never changes again."""
        return self in {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.SKIPPED}


#: Runs that hold one of the pipeline's ``max_active_runs`` slots.
ACTIVE_RUN_STATES = (RunState.RUNNING, RunState.UP_FOR_RETRY)


class RunTrigger(str, Enum):
    """Why a run exists."""

    SCHEDULED = "scheduled"
    MANUAL = "manual"
    BACKFILL = "backfill"


class AttemptView(BaseModel):
    """One job attempt of a run."""

    attempt: int = Field(description="1 for the first job, 2 for the first retry, ...")
    job_id: str | None = Field(description="The job; none while it is being submitted or when submission failed.")
    state: str = Field(description="SUBMITTING, then the job's state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED).")
    created_at: datetime
    finished_at: datetime | None = None
    error: str | None = None


class RunView(BaseModel):
    """A run: one data interval of one pipeline, and its job attempts."""

    id: int
    pipeline: str
    logical_date: datetime = Field(description="The start of the data interval; with the pipeline, the run's unique key.")
    data_interval_start: datetime
    data_interval_end: datetime
    state: RunState
    trigger: RunTrigger
    version: int = Field(description="The pipeline version the run was rendered from.")
    params: dict[str, ParamValue]
    reason: str | None = Field(default=None, description="Why it was skipped, or the last error.")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    next_attempt_at: datetime | None = None
    result_location: str | None = Field(default=None, description="The committed sink directory from the job's result manifest.")
    attempts: list[AttemptView] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration_s(self) -> float | None:
        """From the first job submitted to the end, retries and their waits included."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class RunPage(BaseModel):
    """One page of ``GET /pipelines/{name}/runs``, newest logical date first."""

    items: list[RunView]
    total: int
    limit: int
    offset: int


class TriggerRequest(BaseModel):
    """The body of ``POST /pipelines/{name}/runs``: one manual run."""

    model_config = ConfigDict(extra="forbid")

    logical_date: datetime = Field(description="Start of the data interval; without an offset it is read in the pipeline's zone.")
    params: dict[str, ParamValue] = Field(default_factory=dict, description="Overrides of the pipeline's parameters.")

    _iso = field_validator("logical_date", mode="before")(iso_datetime)


class BackfillRequest(BaseModel):
    """The body of ``POST /pipelines/{name}/backfill``: runs for every interval starting in a range."""

    model_config = ConfigDict(extra="forbid")

    start: datetime = Field(description="Earliest logical date (inclusive); without an offset, read in the pipeline's zone.")
    end: datetime = Field(description="Latest logical date (inclusive).")
    params: dict[str, ParamValue] = Field(default_factory=dict)

    _iso = field_validator("start", "end", mode="before")(iso_datetime)


class BackfillResult(BaseModel):
    """What a backfill queued; the runs wait for ``max_active_runs`` slots."""

    created: list[datetime] = Field(description="Logical dates of the new QUEUED runs.")
    existing: list[datetime] = Field(description="Logical dates that already had a run (left as they are).")
    not_ended: list[datetime] = Field(default_factory=list, description="Intervals in the range that have not ended yet: left to the schedule.")


class PipelineList(BaseModel):
    """``GET /pipelines``: every pipeline, by name."""

    items: list[PipelineView]
