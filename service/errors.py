"""Every error becomes ``{"error": {"code", "message", "field"?}}`` here, in one place."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spillway.jobs.errors import (
    ClusterConfigError,
    IdempotencyConflict,
    InvalidTransition,
    JobNotFound,
    QueueFull,
    SinkExists,
    SpecError,
    SpillwayError,
)
from spillway.jobs.sandbox import PathNotAllowed
from spillway.service.auth import Forbidden, Unauthenticated
from spillway.service.dashboard_errors import DashboardOff, DashboardUnavailable
from spillway.service.tokens import TokenNotFound
from spillway.jobs.status import ErrorDetail
from spillway.service.spec_errors import field_path as field_path  # re-exported: its old home
from spillway.service.spec_errors import first_error_detail

log = logging.getLogger(__name__)

_STATUS = {
    Unauthenticated: 401,
    Forbidden: 403,
    JobNotFound: 404,
    TokenNotFound: 404,
    SinkExists: 409,
    InvalidTransition: 409,
    IdempotencyConflict: 409,
    QueueFull: 429,
    PathNotAllowed: 403,  # before SpecError, its base
    SpecError: 422,
    ClusterConfigError: 503,
    DashboardOff: 404,
    DashboardUnavailable: 502,
}
RETRY_AFTER_S = "5"


def status_for(exc: SpillwayError) -> int:
    """The HTTP status of a domain error (400 for one this table does not name)."""
    return next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)


def error_response(status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON response in the stable error shape."""
    detail = ErrorDetail(code=code, message=message, field=field)
    return JSONResponse({"error": detail.model_dump(exclude_none=True)}, status_code=status, headers=headers)


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        first = next(e for e in errors if e.get("type") == "json_invalid")
        reason = (first.get("ctx") or {}).get("error", "invalid JSON")
        return error_response(400, "malformed_json", f"the request body is not valid JSON: {reason}")
    detail = first_error_detail(errors)  # worded once, for the SDK and the CLI too
    code = "invalid_parameter" if errors[0].get("loc", ("body",))[0] in _REQUEST_PARTS else detail.code
    return error_response(422, code, detail.message, detail.field)


#: Where a request's own parameters come from: a bad one is ``invalid_parameter``, not a bad spec (``invalid_spec``).
_REQUEST_PARTS = frozenset({"query", "header", "path", "cookie"})


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method that some route of the app answers on the request's path, sorted.

    Asked of the routes themselves (a full match with the method swapped in), so routes of
    included routers count too.
    """
    routes = request.app.router.routes
    return [m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]


class BodySizeLimit:
    """Refuse request bodies over ``limit`` bytes with a 413 in the stable shape.

    Checks Content-Length up front and counts streamed bytes, so a chunked body
    cannot slip past the header check.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        seen = 0
        refused = False

        async def counting_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit and not refused:
                refused = True
                await self._too_large(scope, receive, send)
                return {"type": "http.disconnect"}  # the app stops reading; its answer is dropped
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counting_receive, guarded_send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "body_too_large", f"the request body is over {self.limit} bytes")
        await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Map domain errors, validation errors and HTTP errors to the stable shape."""

    @app.exception_handler(SpillwayError)
    async def _domain(_: Request, exc: SpillwayError) -> JSONResponse:
        status = status_for(exc)
        headers = {"Retry-After": RETRY_AFTER_S} if status == 429 else {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return error_response(status, exc.code, exc.message, exc.field, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            # Starlette names only the first route whose path matched; /jobs has GET and POST.
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error_response(exc.status_code, code, str(exc.detail), headers=headers or None)


class AnswerUnexpectedErrors:
    """Answer an unexpected error with a 500 in the stable shape, and keep the connection.

    Starlette's own handler for ``Exception`` answers and then raises again, so uvicorn closed the
    connection without a ``Connection: close``: a client's next request on it failed with a reset.
    Here the error ends with the answer. One raised after the response began (a stream) still
    closes the connection: nothing else can tell the client its response is cut short.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.exception("unexpected error")
            if started:
                raise
            await error_response(500, "internal_error", f"unexpected {type(exc).__name__}; see the service log")(scope, receive, send)
