"""An unexpected error is a 500 in the stable shape, and the connection it came on stays usable (service/errors.py).

Starlette's handler for ``Exception`` answers and then raises again; uvicorn then closed the keep-alive connection
without saying so, and a client's next request on it failed with a connection reset.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from spillway.service.errors import AnswerUnexpectedErrors, install_error_handlers


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(AnswerUnexpectedErrors)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    @app.get("/fine")
    async def fine() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/cut")
    async def cut() -> StreamingResponse:
        async def chunks() -> Iterator[bytes]:  # type: ignore[misc]
            yield b"first"
            raise RuntimeError("a bug mid-stream")
        return StreamingResponse(chunks())

    return app


@pytest.fixture()
def url() -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(_app(), host="127.0.0.1", port=0, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_an_unexpected_error_is_a_500_and_the_connection_serves_the_next_request(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as http:
        for _ in range(3):
            answer = http.get("/boom")
            assert answer.status_code == 500
            assert answer.json() == {"error": {"code": "internal_error", "message": "unexpected RuntimeError; see the service log"}}
            assert http.get("/fine").json() == {"ok": True}  # on the same kept-alive connection


def test_an_error_after_the_response_began_still_cuts_the_connection(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as http, pytest.raises(httpx.HTTPError):
        http.get("/cut").read()
