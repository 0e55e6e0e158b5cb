"""Counting HTTP requests by route template, so job ids in paths cannot explode the series; and
uvicorn's access line, written for less."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.logging import AccessFormatter

#: The route label of a request that no route answered: unknown paths, bodies refused before routing.
UNMATCHED = "unmatched"
#: Methods counted by name; any other is counted as ``OTHER`` (a client may send anything there).
METHODS = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"})

Observe = Callable[[str, str, int, float], None]


def route_template(scope: Scope) -> str:
    """The path template of the route that answered (``/jobs/{job_id}``), or :data:`UNMATCHED`."""
    route = scope.get("route")
    if route is None and (endpoint := scope.get("endpoint")) is not None and (app := scope.get("app")) is not None:
        # Plain Starlette routes (FastAPI's /openapi.json) name only their endpoint in the scope.
        route = next((r for r in getattr(app, "routes", ()) if getattr(r, "endpoint", None) is endpoint), None)
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class HttpMetrics:
    """ASGI middleware: ``observe(method, route, status, seconds)`` once per HTTP request.

    ``seconds`` runs to the response's first byte: an event stream counts when it starts, not
    when it ends. A request the app fails on without answering counts as a 500 (the error
    handler outside this middleware sends that).
    """

    def __init__(self, app: ASGIApp, observe: Observe) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, first_byte = 500, None

        async def timed_send(message: Message) -> None:
            nonlocal status, first_byte
            if message["type"] == "http.response.start":
                status, first_byte = int(message["status"]), time.perf_counter()
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            self.observe(method, route_template(scope), status, (first_byte or time.perf_counter()) - started)


#: uvicorn's format of its access line (``uvicorn.config.LOGGING_CONFIG``).
UVICORN_ACCESS_FORMAT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'


class AccessLine(AccessFormatter):
    """uvicorn's access line, character for character, without the two copies of each record its
    own formatter makes: 13 µs → 2 µs a line, 3 % of a status read's CPU instructions in the
    service (bench/RESULTS.md, issue 16 item 14).

    Colours (a terminal), another format, or a record not of uvicorn's five arguments take
    uvicorn's own path.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        args = record.args
        if self.use_colors or self._fmt != UVICORN_ACCESS_FORMAT or not isinstance(args, tuple) or len(args) != 5:
            return super().formatMessage(record)
        client_addr, method, full_path, http_version, status_code = args
        level = record.levelname
        request_line = f"{method} {full_path} HTTP/{http_version}"
        return f'{level}:{" " * (8 - len(level))} {client_addr} - "{request_line}" {self.get_status_code(int(status_code))}'
