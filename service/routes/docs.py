"""``/docs`` (Swagger UI) and ``/redoc``, with their assets served by the service: no CDN.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so they are blank without internet; the
app turns them off (``docs_url=None, redoc_url=None``) and includes this router instead. The
assets are the ones the ``fastapi-offline`` package ships (Swagger UI 5, which reads OpenAPI 3.1);
only the named files below can be served.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

STATIC_URL = "/docs/static"
#: The files under ``/docs/static/`` and their media types; anything else is a 404.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}

router = APIRouter(include_in_schema=False)


def assets_dir() -> Path:
    """Where the installed ``fastapi-offline`` package keeps Swagger UI's and ReDoc's files."""
    return Path(str(files("fastapi_offline") / "static"))


def _urls(request: Request) -> tuple[str, str]:
    root = request.scope.get("root_path", "")
    return f"{root}{request.app.openapi_url}", f"{root}{STATIC_URL}"


@router.get("/docs", response_class=HTMLResponse)
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over ``/openapi.json``."""
    openapi, static = _urls(request)
    return get_swagger_ui_html(
        openapi_url=openapi,
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{static}/swagger-ui-bundle.js",
        swagger_css_url=f"{static}/swagger-ui.css",
        swagger_favicon_url=f"{static}/favicon.png",
        oauth2_redirect_url=request.app.swagger_ui_oauth2_redirect_url,
        swagger_ui_parameters=request.app.swagger_ui_parameters,
    )


@router.get("/docs/oauth2-redirect", response_class=HTMLResponse)
async def swagger_ui_redirect() -> HTMLResponse:
    """Swagger UI's OAuth2 redirect page (FastAPI's default path for it)."""
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc", response_class=HTMLResponse)
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc over ``/openapi.json``, without Google Fonts."""
    openapi, static = _urls(request)
    return get_redoc_html(
        openapi_url=openapi,
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{static}/redoc.standalone.js",
        redoc_favicon_url=f"{static}/favicon.png",
        with_google_fonts=False,
    )


@router.get(STATIC_URL + "/{name}", response_class=FileResponse)
async def asset(name: str) -> FileResponse:
    """One of the pages' script, stylesheet or icon."""
    media_type = ASSETS.get(name)
    path = assets_dir() / name
    if media_type is None or not path.is_file():
        raise HTTPException(404, f"no docs asset {name!r}")
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})
