"""The answer of ``POST /jobs:validate``: shared by the route, the SDK and the CLI (no FastAPI here)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from spillway.jobs.status import EngineChoice

#: What a valid spec has passed, in the order the service checks it on ``POST /jobs``.
CHECKS = (
    "spec shape: fields, types and steps",
    "data roots: every source and the sink inside SPILLWAY_ALLOWED_ROOTS",
    "sources: every path matches files, whose schemas are read",
    "steps: every column, expression and join key against its input's schema and kinds",
    "sink: free for its mode (error refuses existing data; append needs the same schema)",
)


class InputFiles(BaseModel):
    """What one source of the job would read."""

    field: str = Field(description="Where the source is in the spec: `source`, `sources.products`, `steps[2].right`.")
    path: str
    files: int
    bytes: int = Field(description="Their size on disk (compressed, for parquet).")


class StepColumns(BaseModel):
    """The columns after one step of the job, as the check found them."""

    field: str = Field(description="`steps[i]`.")
    op: str
    columns: dict[str, str]


class ValidationReport(BaseModel):
    """A spec that would be accepted, and how it would run; nothing was created or run."""

    name: str
    valid: bool = True
    checks: list[str] = Field(description="What the spec passed, in order.")
    engine: EngineChoice = Field(description="The engine the job would run on, and why (as `progress.engine` of a job).")
    inputs: list[InputFiles] = Field(default_factory=list, description="Every source of files, with its file count and bytes.")
    steps: list[StepColumns] = Field(default_factory=list, description="The job's steps, each with the columns after it.")
    columns: dict[str, str] = Field(description="The output's columns and their kinds (numeric, string, bool, datetime, ...).")
