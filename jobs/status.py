"""Job lifecycle state, progress and result-manifest models shared by every layer."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


#: The event topic progress travels on to the service: the Dask engine's scheduler plugin
#: and a Polars job's heartbeat on its worker both publish there.
PROGRESS_TOPIC = "spillway-progress"


class JobStatus(str, Enum):
    """Where a job is in its lifecycle: PENDING → RUNNING → SUCCEEDED | FAILED | CANCELLED."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        """A terminal state is final: nothing ever leaves it."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})

#: The states each state may move to; the store enforces this in its UPDATE statements.
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.PENDING: frozenset({JobStatus.RUNNING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.RUNNING: TERMINAL_STATES,
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


class ErrorDetail(BaseModel):
    """The stable error shape: a code to branch on, a message to read, the field at fault."""

    code: str
    message: str
    field: str | None = None


class StageProgress(BaseModel):
    """Work done out of the total for one stage of a job.

    On both engines the stages are the spec's sources, steps and sink (``read source``,
    ``steps[2] groupby``, ``write parquet``). On the Dask engine the counts are partitions
    (tasks) doing that stage's work; Dask fuses stages into one task, which then counts
    for each of them (cluster/stages.py). On the Polars engine a source's stage counts what
    it has read (``unit`` ``MiB``, jobs/read_progress.py).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    done: int = Field(ge=0)
    total: int = Field(ge=0)
    unit: str | None = Field(default=None, description="What done and total count; none: partitions (tasks).")


class EngineChoice(BaseModel):
    """Which engine runs a job, on what, and why it was chosen."""

    model_config = ConfigDict(extra="forbid")

    engine: str = Field(description="`polars` or `dask`.")
    device: str = Field(description="`cpu` or `gpu`: Polars' CPU engine or cudf-polars; pandas or dask-cudf.")
    reason: str = Field(description="Why this engine: asked for by the spec or the service default, or what `auto` found.")


class JobProgress(BaseModel):
    """Progress of a whole job, stage by stage, in the order data flows, and overall."""

    model_config = ConfigDict(extra="forbid")

    stages: list[StageProgress] = Field(default_factory=list)
    tasks_per_worker: dict[str, int] = Field(default_factory=dict, description="Finished tasks by the worker that ran them.")
    engine: EngineChoice | None = Field(default=None, description="The engine running the job, once it started.")
    note: str | None = Field(default=None, description="What the stage counts mean on this engine.")
    elapsed_s: float | None = Field(default=None, description="Seconds the engine has been running the job.")
    tasks_done: int | None = Field(default=None, ge=0, description="Dask engine: distinct tasks finished (a fused task counts once).")
    tasks_total: int | None = Field(default=None, ge=0, description="Dask engine: distinct tasks in the job's graph.")
    eta_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds left at the pace so far (elapsed × left ÷ done, over `done`/`total`); none until something is done.",
    )

    @property
    def counts_stages(self) -> bool:
        """Whether :attr:`done` counts whole stages: they count in different units (a Polars read's MiB beside 1-of-1 stages)."""
        return self.tasks_total is None and len({stage.unit for stage in self.stages}) > 1

    @property
    def done(self) -> int:
        """Work done overall: distinct tasks on the Dask engine; stages finished when they count in
        different units (MiB and steps do not add up); else the stages' counts summed."""
        if self.tasks_done is not None:
            return self.tasks_done
        if self.counts_stages:
            return sum(1 for stage in self.stages if stage.total and stage.done >= stage.total)
        return sum(stage.done for stage in self.stages)

    @property
    def total(self) -> int:
        """All the work, in the units of :attr:`done`."""
        if self.tasks_total is not None:
            return self.tasks_total
        return len(self.stages) if self.counts_stages else sum(stage.total for stage in self.stages)

    @model_validator(mode="after")
    def _estimate(self) -> JobProgress:
        # Filled here, not by each engine: one rule for both, and a stored snapshot keeps its estimate.
        if self.eta_s is None and self.elapsed_s is not None and 0 < self.done <= self.total:
            self.eta_s = round(self.elapsed_s * (self.total - self.done) / self.done, 1)
        return self


class JobResources(BaseModel):
    """GPU memory and spilling seen while a job ran (GPU backend only, best effort)."""

    model_config = ConfigDict(extra="forbid")

    peak_device_memory_bytes: int | None = Field(description="Highest sum over workers of device memory in use in one sample.")
    peak_device_memory_per_worker: dict[str, int] = Field(default_factory=dict)
    spilled_to_host_bytes: int | None = Field(description="Bytes cuDF moved device → host during the job.")
    streaming_spilled_bytes: int | None = Field(
        default=None, description="Bytes cudf-polars' streaming executor (rapidsmpf) spilled device → host: a GPU job too large to run in memory."
    )
    samples: int
    method: str = Field(description="How these were measured.")


class ResultFile(BaseModel):
    """One committed output file."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path relative to the sink directory, '/'-separated.")
    size_bytes: int
    rows: int
    job_id: str | None = Field(default=None, description="The job that wrote the file (appends add files of several jobs).")

    @field_validator("path")
    @classmethod
    def _inside_the_sink(cls, path: str) -> str:
        # Readers join this to the sink directory: a manifest must not lead them elsewhere.
        if not path or path.startswith("/") or "://" in path or "\\" in path or any(p in ("", ".", "..") for p in path.split("/")):
            raise ValueError(f"'{path}' is not a plain relative path inside the sink")
        return path


class ColumnSchema(BaseModel):
    """One output column: its name and its Arrow type as text."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str


class ResultManifest(BaseModel):
    """What a committed sink holds: ``_manifest.json`` in the sink, and a job's result.

    It lists every file of the sink's current contents, so after an append it covers
    the earlier jobs' files too; ``version`` counts the sink's commits. Fields a later
    version adds are ignored when one is read (``job_id`` came after the first releases, whose
    strict reading refuses manifests that carry it: upgrade replicas together).
    """

    model_config = ConfigDict(extra="ignore")

    location: str = Field(description="The committed sink directory or URL.")
    format: str = "parquet"
    files: list[ResultFile]
    total_rows: int
    total_bytes: int
    columns: list[ColumnSchema] = Field(description="The output schema (for CSV, the types the job produced).")
    partition_on: list[str] = Field(default_factory=list)
    mode: str = Field(default="error", description="The write mode of the commit that produced this version.")
    version: int = Field(default=1, ge=1, description="1 for the first commit to the sink, then one more per overwrite or append.")
    job_id: str | None = Field(
        default=None,
        description="The job whose commit made this version (None in manifests written before 2026-12-04): how a restarted "
                    "service recognises its own commit, also one that wrote no file.",
    )
