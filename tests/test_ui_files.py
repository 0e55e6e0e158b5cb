"""The page's files as served: every module it imports is listed in ``STATIC_FILES``, and only those.

Runs without a browser (tests/test_ui_browser.py and test_ui_pages.py load the page in Chromium);
a module left out of the list would be a 404 that only the browser tests would see.
"""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from spillway.service.errors import install_error_handlers
from spillway.service.routes.ui import STATIC_FILES, UI_DIR, mount_ui

_IMPORT = re.compile(r'^import .* from "\./([\w.]+)";$', re.MULTILINE)


def test_every_file_in_the_ui_folder_is_served_and_every_import_is_among_them() -> None:
    on_disk = {p.name for p in UI_DIR.iterdir() if p.suffix in {".js", ".css"}}
    assert set(STATIC_FILES) == on_disk
    for name in (n for n in on_disk if n.endswith(".js")):
        imported = set(_IMPORT.findall((UI_DIR / name).read_text()))
        assert imported <= set(STATIC_FILES), f"{name} imports {imported - set(STATIC_FILES)}"
    assert 'type="module" src="/ui/static/app.js"' in (UI_DIR / "index.html").read_text()


def test_modules_are_served_as_javascript_and_other_names_are_404() -> None:
    app = FastAPI()
    install_error_handlers(app)
    mount_ui(app)
    client = TestClient(app)
    answer = client.get("/ui/static/pipelines.js")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/javascript")
    assert "export function pipelinesView" in answer.text
    for name in ("../app.py", "index.html", "nope.js", "%2e%2e%2fapp.py"):
        missing = client.get(f"/ui/static/{name}")
        assert missing.status_code == 404, name
