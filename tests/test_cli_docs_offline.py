"""/docs and /redoc need nothing from the internet: every asset they reference is the service's own."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import ServiceProcess


def referenced_assets(html: str) -> list[str]:
    """Every URL a page loads: script src, stylesheet and icon href (Swagger UI's inline bootstrap names none)."""
    return re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_only_local_assets(service: ServiceProcess, page: str) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        response = http.get(page)
        assert response.status_code == 200 and "text/html" in response.headers["content-type"]
        assets = referenced_assets(response.text)
        assert any(a.endswith(".js") for a in assets), assets
        for url in assets:
            assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
            asset = http.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 1000, url
        assert "https://" not in response.text  # no CDN, no web fonts
        assert http.get("/openapi.json").json()["openapi"].startswith("3.1")  # what Swagger UI 5 reads


def test_only_named_docs_assets_are_served(service: ServiceProcess) -> None:
    for name in ("core.py", "..%2F__init__.py", "nope.js"):
        response = httpx.get(f"{service.url}/docs/static/{name}")
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
