"""The Dask dashboard through the service (issue 18 item 4): a real service, auth on, a real LocalCluster.

Every request to ``/dashboard/...`` is checked for a token (header, ``?token=`` once, then the
cookie it sets) and forwarded to the scheduler's own dashboard; the Bokeh websocket is relayed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from spillway.service.routes.dashboard import COOKIE
from tests.conftest import ROOT, ServiceProcess, start_service

pytestmark = pytest.mark.slow

# The first render of a Bokeh page builds its document on the scheduler: seconds on 2 busy cores.
TIMEOUT = 90.0


def _create_token(service: ServiceProcess, name: str, scope: str) -> str:
    created = subprocess.run(
        [sys.executable, "-m", "spillway", "token", "create", "--scope", scope, "--name", name],
        cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60, check=True,
    )
    return created.stdout.strip()


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, dict[str, str]]]:
    """A service with auth on (dashboard scope: admin, the default) and an admin and a read token."""
    service = start_service(tmp_path_factory.mktemp("dashboard"), extra_env={"SPILLWAY_AUTH": "on"})
    try:
        yield service, {scope: _create_token(service, scope, scope) for scope in ("admin", "read")}
    finally:
        service.stop()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _ws_url(service: ServiceProcess, path: str) -> str:
    return "ws" + service.url.removeprefix("http") + path


def _bokeh_session_token(page: str) -> str:
    """The session token Bokeh embeds in a page; its websocket sends it back as a subprotocol."""
    found = re.search(r'"token":\s*"([^"]+)"', page)
    assert found, "the page embeds a Bokeh session"
    return found.group(1)


def test_the_dashboard_needs_a_token_of_its_scope(proxied: tuple[ServiceProcess, dict[str, str]]) -> None:
    service, tokens = proxied
    with httpx.Client(base_url=service.url, timeout=TIMEOUT) as http:
        bare = http.get("/dashboard/status")
        assert bare.status_code == 401 and bare.json()["error"]["code"] == "unauthenticated"
        assert bare.headers["www-authenticate"] == "Bearer"
        assert "?token=" in bare.json()["error"]["message"], "it says how a browser gets in"
        assert http.get("/dashboard/status", headers=_bearer("spw_not-a-token")).status_code == 401
        assert http.get("/dashboard/status", headers={"Cookie": f"{COOKIE}=spw_not-a-token"}).status_code == 401
        assert http.get("/dashboard/static/js/bokeh.min.js").status_code == 401, "static files are behind the token too"
        reader = http.get("/dashboard/status", headers=_bearer(tokens["read"]))
        assert reader.status_code == 403 and "admin" in reader.json()["error"]["message"]
        # Only GET and HEAD reach the dashboard: a cookie never carries a state-changing request.
        posted = http.post("/dashboard/status", headers=_bearer(tokens["admin"]))
        assert posted.status_code == 405 and set(posted.headers["allow"].split(", ")) == {"GET", "HEAD"}


def test_a_dashboard_page_and_its_static_files_load_through_the_proxy(proxied: tuple[ServiceProcess, dict[str, str]]) -> None:
    service, tokens = proxied
    with httpx.Client(base_url=service.url, timeout=TIMEOUT, headers=_bearer(tokens["admin"])) as http:
        cluster = http.get("/cluster").json()
        assert cluster["dashboard_link"] == f"{service.url}/dashboard/status", "GET /cluster links the proxy, not the dashboard's port"
        page = http.get("/dashboard/status")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "Dask" in page.text and "render_items" in page.text, "the scheduler's Bokeh status page"
        page_url = f"{service.url}/dashboard/status"
        assets = {urljoin(page_url, ref) for ref in re.findall(r'(?:src|href)="([^"]+\.(?:js|css|svg)(?:\?[^"]*)?)"', page.text)}
        local = sorted(a for a in assets if a.startswith(service.url))
        assert any("/dashboard/static/js/bokeh" in a for a in local) and any("/dashboard/statics/css/" in a for a in local), local
        for asset in local:
            answer = http.get(asset)
            assert answer.status_code == 200 and answer.content, asset
        assert all(a.startswith(f"{service.url}/dashboard/") for a in local), "every asset of the page is under the proxy's prefix"
        assert http.get("/dashboard").headers["location"] == "/dashboard/status"
        assert http.get("/dashboard/status", params={"x": "1"}, follow_redirects=False).status_code == 200


def test_a_query_token_becomes_a_cookie_for_the_dashboard_only(proxied: tuple[ServiceProcess, dict[str, str]]) -> None:
    service, tokens = proxied
    admin = tokens["admin"]
    with httpx.Client(base_url=service.url, timeout=TIMEOUT) as http:
        first = http.get("/dashboard/workers", params={"token": admin})
        assert first.status_code == 302 and first.headers["location"] == "/dashboard/workers", "the token leaves the address bar"
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}={admin};")
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "path=/dashboard", "samesite=strict"} <= attributes, cookie
        assert http.cookies.get(COOKIE) == admin
        assert http.get("/dashboard/workers").status_code == 200, "the cookie lets the browser in"
        # The cookie and the query token are the dashboard's own: no other route takes them.
        assert http.get("/jobs", headers={"Cookie": f"{COOKIE}={admin}"}).status_code == 401
        assert http.get("/cluster", params={"token": admin}).status_code == 401
        # A revoked token is refused at once, cookie or not.
        victim = _create_token(service, "short-lived", "admin")
        http.cookies.clear()
        assert http.get("/dashboard/status", params={"token": victim}).status_code == 302
        token_id = next(t["id"] for t in http.get("/tokens", headers=_bearer(admin)).json() if t["name"] == "short-lived")
        assert http.post(f"/tokens/{token_id}/revoke", headers=_bearer(admin)).status_code == 200
        assert http.get("/dashboard/status").status_code == 401


def test_the_bokeh_websocket_reaches_the_dashboard_through_the_proxy(proxied: tuple[ServiceProcess, dict[str, str]]) -> None:
    service, tokens = proxied
    with httpx.Client(base_url=service.url, timeout=TIMEOUT, headers=_bearer(tokens["admin"])) as http:
        session = _bokeh_session_token(http.get("/dashboard/status").text)
    url = _ws_url(service, "/dashboard/status/ws")
    # As the page's own script connects: the "bokeh" subprotocol with the session token, and
    # the dashboard cookie the browser holds for this path.
    with connect(url, subprotocols=["bokeh", session], additional_headers={"Cookie": f"{COOKIE}={tokens['admin']}"}, open_timeout=TIMEOUT) as socket:
        assert socket.subprotocol == "bokeh"
        header = socket.recv(timeout=TIMEOUT)
        assert isinstance(header, str) and '"msgtype":"ACK"' in header.replace(" ", ""), header
    with pytest.raises(InvalidStatus) as refused:
        connect(url, subprotocols=["bokeh", session], open_timeout=TIMEOUT)
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as reader:
        connect(url, subprotocols=["bokeh", session], additional_headers=_bearer(tokens["read"]), open_timeout=TIMEOUT)
    assert reader.value.response.status_code == 403


def test_the_proxy_can_be_turned_off(tmp_path: Path) -> None:
    service = start_service(tmp_path, extra_env={"SPILLWAY_CLUSTER__DASHBOARD_PROXY": "false"})
    try:
        with httpx.Client(base_url=service.url, timeout=TIMEOUT) as http:
            link = http.get("/cluster").json()["dashboard_link"]
            assert urlsplit(link).port != urlsplit(service.url).port and link.endswith("/status"), "the dashboard's own port"
            assert http.get(link).status_code == 200, "the dashboard answers there, without a prefix"
            off = http.get("/dashboard/status")
            assert off.status_code == 404 and off.json()["error"]["code"] == "dashboard_off"
    finally:
        service.stop()
