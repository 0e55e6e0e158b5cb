"""``POST /jobs:validate``: every check of ``POST /jobs``, and the engine choice, without creating a job."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from jobs.engine_choice import choose_engine
from jobs.spec import JobSpec
from jobs.validate import check_spec, validate_submission
from service.auth import Scope, require
from service.routes.deps import ServicesDep
from service.schemas import ErrorBody
from service.validation import CHECKS, ValidationReport

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
    await asyncio.to_thread(validate_submission, spec, services.settings.allowed_roots)
    schema = await asyncio.to_thread(check_spec, spec)  # metadata only: cheap to read twice
    engine = choose_engine(spec, services.settings.default_engine, services.cluster.backend)
    return ValidationReport(name=spec.name, checks=list(CHECKS), engine=engine, columns=dict(schema))
