"""Every error becomes ``{"error": {"code", "message", "field"?}}`` here, in one place."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobs.errors import (
    ClusterConfigError,
    InvalidTransition,
    JobNotFound,
    SinkExists,
    SpecError,
    SpillwayError,
)
from jobs.spec import STEP_OPS
from jobs.status import ErrorDetail

log = logging.getLogger(__name__)

_STATUS = {JobNotFound: 404, SinkExists: 409, InvalidTransition: 409, SpecError: 422, ClusterConfigError: 503}


def error_response(status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON response in the stable error shape."""
    detail = ErrorDetail(code=code, message=message, field=field)
    return JSONResponse({"error": detail.model_dump(exclude_none=True)}, status_code=status, headers=headers)


def field_path(loc: Sequence[Any]) -> str:
    """``("body", "steps", 2, "filter", "expr")`` → ``steps[2].expr``."""
    parts: list[str] = []
    previous: Any = None
    for item in loc:
        if item == "body" and not parts:
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif isinstance(previous, int) and item in STEP_OPS:
            pass  # the discriminated union's tag, not a field
        else:
            parts.append(("." if parts else "") + str(item))
        previous = item
    return "".join(parts)


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        first = next(e for e in errors if e.get("type") == "json_invalid")
        reason = (first.get("ctx") or {}).get("error", "invalid JSON")
        return error_response(400, "malformed_json", f"the request body is not valid JSON: {reason}")
    first = errors[0]
    field = field_path(first.get("loc", ()))
    if first.get("type") == "union_tag_invalid":
        field = f"{field}.op"
        tag = (first.get("ctx") or {}).get("tag")
        message = f"{field}: unknown step '{tag}'; known steps: {', '.join(STEP_OPS)}"
        return error_response(422, "unknown_step", message, field)
    message = f"{field or 'body'}: {first.get('msg', 'invalid value')}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return error_response(422, "invalid_spec", message, field or None)


def install_error_handlers(app: FastAPI) -> None:
    """Map domain errors, validation errors and HTTP errors to the stable shape."""

    @app.exception_handler(SpillwayError)
    async def _domain(_: Request, exc: SpillwayError) -> JSONResponse:
        status = next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)
        return error_response(status, exc.code, exc.message, exc.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, "internal_error", f"unexpected {type(exc).__name__}; see the service log")
