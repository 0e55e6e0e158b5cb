"""``/`` and ``/ui/static/*``: the web page for people (plain HTML, CSS and JavaScript from ``service/ui``).

The page is a client of the same REST API as the SDK and the CLI, so it needs nothing from the
server but its files: the page, its stylesheet and its ES modules (one per view, importing their
siblings). They are served by explicit routes rather than a ``StaticFiles`` mount so that
``app.include_router(router)`` is all the wiring there is, and so that only these named files can
ever be served (no path from the URL reaches the file system).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import FileResponse

UI_DIR = Path(__file__).resolve().parents[1] / "ui"

#: The files under ``/ui/static/`` and their media types; anything else is a 404.
STATIC_FILES = {
    **{
        f"{module}.js": "text/javascript; charset=utf-8"
        for module in ("app", "api", "dom", "jobs", "job", "job_output", "cluster", "pipelines", "submit", "spec_lines")
    },
    "style.css": "text/css; charset=utf-8",
}

# "no-cache" still lets the browser keep a copy, but it revalidates (ETag) on each load,
# so a new release of the page is picked up without a hard refresh.
_CACHE = {"Cache-Control": "no-cache"}
# Job names, specs and error messages are user input: the page only ever sets them as text,
# and this policy forbids inline or foreign scripts in case that is ever got wrong.
_CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

router = APIRouter(include_in_schema=False)


def _ui_file(name: str) -> Path:
    path = UI_DIR / name
    if not path.is_file():
        # An install that left out the package data: say so instead of a bare 500.
        raise HTTPException(500, f"the web page's file {name} is not installed in {UI_DIR}: the package must ship service/ui")
    return path


@router.get("/", response_class=FileResponse)
async def index() -> FileResponse:
    """The single page; it routes between jobs, job detail and cluster by the URL's #fragment."""
    return FileResponse(_ui_file("index.html"), media_type="text/html; charset=utf-8", headers={**_CACHE, "Content-Security-Policy": _CSP})


@router.get("/ui/static/{name}", response_class=FileResponse)
async def static(name: str) -> FileResponse:
    """The page's script modules and stylesheet."""
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        # The service's error handlers turn this into the stable {"error": {...}} shape.
        raise HTTPException(404, f"no UI file {name!r}")
    return FileResponse(_ui_file(name), media_type=media_type, headers=_CACHE)


def mount_ui(app: FastAPI) -> None:
    """Add the UI routes to ``app`` unless they are already there (safe to call twice)."""
    if not any(getattr(route, "path", None) == "/ui/static/{name}" for route in app.routes):
        app.include_router(router)
