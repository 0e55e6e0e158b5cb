"""``POST /jobs:validate``: every check of ``POST /jobs``, and the engine choice, without creating a job."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from spillway.jobs.engine_choice import EngineName, choose_engine
from spillway.jobs.gpu_support import plan_gpu_refusal, settle_on_gpu
from spillway.jobs.sources import resolve_files
from spillway.jobs.spec import JobSpec, SourceSpec
from spillway.jobs.storage import filesystem
from spillway.jobs.validate import plan_spec, validate_submission
from spillway.service.auth import Scope, require
from spillway.service.routes.deps import ServicesDep, submission_limits
from spillway.service.schemas import ErrorBody
from spillway.service.validation import CHECKS, InputFiles, StepColumns, ValidationReport

router = APIRouter(tags=["jobs"], dependencies=[require(Scope.SUBMIT)])

_ERRORS = {
    403: {"model": ErrorBody, "description": "A source or sink outside the allowed data roots."},
    409: {"model": ErrorBody, "description": "The sink holds data (mode: error) or has another schema (append)."},
    422: {"model": ErrorBody, "description": "The spec does not fit its sources: the field and column are named."},
}


@router.post("/jobs:validate", response_model=ValidationReport, responses=_ERRORS)
async def validate_job(spec: JobSpec, services: ServicesDep) -> ValidationReport:
    """Check a JobSpec exactly as ``POST /jobs`` does (a failure is the same error) and say which
    engine would run it; no job is stored, queued or run. Needs the ``submit`` scope, as submitting does."""
    await asyncio.to_thread(validate_submission, spec, **submission_limits(services.settings))
    return await asyncio.to_thread(_report, spec, services.settings.default_engine, services.cluster.backend)


def _report(spec: JobSpec, default_engine: EngineName, backend: str) -> ValidationReport:
    plan = plan_spec(spec)  # reads the sources' metadata again: cheap, and validation has passed
    engine = choose_engine(spec, default_engine, backend)
    if engine.engine == "polars" and engine.device == "gpu":
        # As the job manager decides when the job starts, and as submit refuses `engine: polars`.
        engine = settle_on_gpu(engine, spec.engine or default_engine, plan_gpu_refusal(plan))
    steps = [StepColumns(field=f"steps[{i}]", op=step.op, columns=dict(plan.schemas[f"steps[{i}]"])) for i, step in enumerate(spec.steps)]
    return ValidationReport(
        name=spec.name,
        checks=list(CHECKS),
        engine=engine,
        inputs=[_input_files(field, source) for field, source in spec.source_fields()],
        steps=steps,
        columns=dict(plan.output),
    )


def _input_files(field: str, source: SourceSpec) -> InputFiles:
    files = resolve_files(source, field=field)
    fs, _ = filesystem(files[0], field=f"{field}.path")
    return InputFiles(field=field, path=source.path, files=len(files), bytes=sum(fs.size(f) for f in files))
