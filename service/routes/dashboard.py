"""``/dashboard/...``: the Dask dashboard through the service, behind its bearer-token auth.

A reverse proxy in the manner of JupyterHub's and Dask Gateway's: every request and the
Bokeh websocket are checked here, then forwarded to the scheduler's own dashboard, which
serves under the same prefix (:data:`cluster.settings.DASHBOARD_PREFIX`) so that the pages'
links, static files and websocket URLs all lead back through this route.

A browser cannot send an ``Authorization`` header on a plain link, so the first visit may
carry ``?token=``: it is checked, set as an HttpOnly cookie scoped to the dashboard's path,
and the browser is redirected to the same URL without it. Header, query token and cookie
are accepted by these routes only (matched by route, as the SSE routes' query token is: no
other path can get them by its shape). Only GET and HEAD are forwarded: the dashboard's
pages need nothing else, and so a cookie can never carry a state-changing request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import urlencode

import httpx
import websockets
from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.requests import HTTPConnection
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect

from spillway.cluster.settings import DASHBOARD_PREFIX
from spillway.jobs.errors import SpillwayError
from spillway.service.auth import Forbidden, Scope, Unauthenticated, identify
from spillway.service.dashboard_errors import DashboardOff, DashboardUnavailable
from spillway.service.errors import error_response, status_for

#: The cookie a first visit with ``?token=`` sets; sent back only under the dashboard's path.
COOKIE = "spillway_dashboard"

# RFC 9110 §7.6.1 connection-specific headers, plus what must not reach the dashboard (our
# credentials, the client's Host) or be sent back as it came (the upstream's framing).
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "authorization", "cookie"}
_NOT_RETURNED = _HOP_BY_HOP | {"set-cookie"}

router = APIRouter(include_in_schema=False)


class DashboardProxy:
    """The connection pool the dashboard routes forward through, one per app; closed with it."""

    def __init__(self) -> None:
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        """The client, made on first use (inside the server's event loop)."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0), follow_redirects=False)
        return self._http

    async def close(self) -> None:
        """Close the pool; safe when it was never used."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def dashboard_link(connection: HTTPConnection) -> str | None:
    """The dashboard's status page as users should open it: through this proxy when it is on."""
    services = connection.app.state.services
    cluster = services.cluster
    if not cluster.dashboard_proxy:
        return cluster.dashboard_link
    if cluster.dashboard_upstream is None:
        return None
    base = (services.settings.public_url or str(connection.base_url)).rstrip("/")
    return f"{base}{DASHBOARD_PREFIX}/status"


def _upstream(connection: HTTPConnection) -> str:
    """``scheme://host:port`` of the dashboard's own server.

    Raises
    ------
    DashboardOff
        When the proxy is off or the cluster runs no dashboard.
    """
    cluster = connection.app.state.services.cluster
    if not cluster.dashboard_proxy:
        raise DashboardOff("the dashboard proxy is off (SPILLWAY_CLUSTER__DASHBOARD_PROXY=false): open the dashboard's own address")
    upstream = cluster.dashboard_upstream
    if upstream is None:
        raise DashboardOff("this cluster runs no dashboard (SPILLWAY_CLUSTER__DASHBOARD_ADDRESS is empty)")
    return upstream


def _presented_token(connection: HTTPConnection) -> tuple[str, bool]:
    """The token a request carries and whether it came as ``?token=``: header, then query, then cookie.

    A query token wins over the cookie so that a visit with a new token replaces an old one.
    """
    header = connection.headers.get("authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("send 'Authorization: Bearer <token>'")
        return token, False
    if query := connection.query_params.get("token"):
        return query, True
    if cookie := connection.cookies.get(COOKIE):
        return cookie, False
    raise Unauthenticated(
        f"the dashboard needs a token: send 'Authorization: Bearer <token>', or open {DASHBOARD_PREFIX}/status?token=<token> once in a browser"
    )


def authorize(connection: HTTPConnection) -> tuple[str, bool] | None:
    """Check a dashboard request's token for the dashboard's scope; None when auth is off.

    Returns the token and whether it came as ``?token=`` (to be turned into the cookie).

    Raises
    ------
    Unauthenticated
        Without a token, or with an unknown, revoked or expired one.
    Forbidden
        When the token's scope is below ``SPILLWAY_DASHBOARD_SCOPE``.
    """
    settings = connection.app.state.services.settings
    if not settings.auth_required:
        return None
    token, from_query = _presented_token(connection)
    identity = identify(connection, token)
    needed = Scope(settings.dashboard_scope)
    if not identity.scope.allows(needed):
        raise Forbidden(f"the dashboard needs a token of scope '{needed.value}' (SPILLWAY_DASHBOARD_SCOPE); this one has '{identity.scope.value}'")
    return token, from_query


def _forwarded_query(connection: HTTPConnection) -> str:
    """The query string without our token: the dashboard never sees Spillway credentials."""
    items = [(k, v) for k, v in connection.query_params.multi_items() if k != "token"]
    return ("?" + urlencode(items)) if items else ""


def _upstream_path(connection: HTTPConnection) -> str:
    """The request's path as sent (still percent-encoded), refused if a ``..`` would climb out of the prefix."""
    raw = connection.scope.get("raw_path") or connection.url.path.encode()
    path = raw.decode("latin-1").split("?", 1)[0]
    if ".." in path.split("/"):
        raise DashboardOff(f"no dashboard page {path!r}")
    return path


async def _proxy(request: Request) -> DashboardProxy:
    return request.app.state.dashboard_proxy


ProxyDep = Annotated[DashboardProxy, Depends(_proxy)]


@router.get(DASHBOARD_PREFIX)
async def dashboard_root(request: Request) -> RedirectResponse:
    """``/dashboard`` → its status page (keeping a ``?token=`` for the cookie)."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{DASHBOARD_PREFIX}/status{query}", status_code=302)


@router.api_route(DASHBOARD_PREFIX + "/{path:path}", methods=["GET", "HEAD"])
async def dashboard_page(path: str, request: Request, proxy: ProxyDep) -> Response:
    """A page, a JSON feed or a static file of the dashboard, streamed from its own server."""
    # In a thread: the token check reads the store (and may write its last use), like require()'s.
    checked = await asyncio.to_thread(authorize, request)
    upstream = _upstream(request)
    if not path:
        return await dashboard_root(request)
    if checked is not None and checked[1]:
        # First visit from a link: keep the token in a cookie and take it out of the address bar.
        response = RedirectResponse(_upstream_path(request) + _forwarded_query(request), status_code=302)
        secure = request.url.scheme == "https" or (request.app.state.services.settings.public_url or "").startswith("https:")
        response.set_cookie(COOKIE, checked[0], path=DASHBOARD_PREFIX, httponly=True, samesite="strict", secure=secure)
        return response
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
    outgoing = proxy.http.build_request(request.method, upstream + _upstream_path(request) + _forwarded_query(request), headers=headers)
    try:
        answer = await proxy.http.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        raise DashboardUnavailable(f"the dashboard at {upstream} did not answer: {exc}") from exc
    returned = {k: v for k, v in answer.headers.items() if k.lower() not in _NOT_RETURNED}
    if location := returned.get("location"):
        returned["location"] = location.removeprefix(upstream)  # absolute redirects stay on this proxy
    return StreamingResponse(_body(answer), status_code=answer.status_code, headers=returned)


async def _body(answer: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream body as it comes (still encoded, so its length holds); the connection goes back to the pool
    however the stream ends, a browser that leaves mid-file included."""
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    finally:
        await answer.aclose()


@router.websocket(DASHBOARD_PREFIX + "/{path:path}")
async def dashboard_socket(websocket: WebSocket, path: str) -> None:
    """The Bokeh websocket of a dashboard page, relayed frame by frame in both directions."""
    try:
        await asyncio.to_thread(authorize, websocket)
        upstream = _upstream(websocket)
        url = "ws" + upstream.removeprefix("http") + _upstream_path(websocket) + _forwarded_query(websocket)
    except SpillwayError as exc:
        await _deny(websocket, exc)
        return
    # Bokeh sends its session token as a subprotocol ("bokeh", token): pass them on as offered.
    offered = list(websocket.scope.get("subprotocols") or [])
    try:
        # The dashboard's server may be gone (a restarted cluster): refuse rather than fail later.
        upstream_socket = await connect(url, subprotocols=offered or None, open_timeout=10, max_size=None, compression=None)
    except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as exc:
        await _deny(websocket, DashboardUnavailable(f"the dashboard's websocket at {upstream} did not open: {exc}"))
        return
    async with upstream_socket:
        await websocket.accept(subprotocol=upstream_socket.subprotocol)
        await _relay(websocket, upstream_socket)


async def _deny(websocket: WebSocket, exc: SpillwayError) -> None:
    """Refuse an upgrade with the HTTP status and error body a plain request would get."""
    status = status_for(exc)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(status, exc.code, str(exc)))
    else:  # a server without the denial extension: a bare close, which the client sees as 403
        await websocket.close(code=1008, reason=exc.code)


async def _relay(client: WebSocket, upstream: ClientConnection) -> None:
    """Copy frames both ways until either side closes, then close the other."""

    async def from_client() -> None:
        try:
            while True:
                message = await client.receive()
                if message["type"] == "websocket.disconnect":
                    return
                await upstream.send(message["text"] if message.get("text") is not None else message["bytes"])
        except WebSocketDisconnect:
            return

    async def from_upstream() -> None:
        try:
            async for frame in upstream:
                if isinstance(frame, str):
                    await client.send_text(frame)
                else:
                    await client.send_bytes(frame)
        except websockets.exceptions.ConnectionClosed:
            pass

    tasks = [asyncio.create_task(from_client()), asyncio.create_task(from_upstream())]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await upstream.close()
    if tasks[1] in done:  # the dashboard closed it: tell the browser (it left otherwise, and needs nothing)
        try:
            await client.close(code=upstream.close_code or 1000)
        except RuntimeError:  # the client had already gone
            pass
