"""The web page in a real headless Chromium against the real service: live bars, manifest, cancel, token.

Needs Debian's chromium and chromedriver and selenium in the venv (``.ci/install-browser.sh``);
without them every test here skips and says so. Screenshots go to ``artifacts/ui/`` so a person
can look at what the page showed.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spillway.jobs.status import JobStatus
from spillway.service.client import SpillwayClient
from tests.conftest import ROOT, ServiceProcess, start_service, wait_for, wait_terminal

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = ROOT / "artifacts" / "ui"
WIDTH, HEIGHT = 1400, 900

_missing = [
    what
    for what, present in (
        ("chromium", Path(CHROMIUM).exists()),
        ("chromedriver", Path(CHROMEDRIVER).exists()),
        ("selenium", importlib.util.find_spec("selenium") is not None),
    )
    if not present
]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing), reason=f"the browser test needs {', '.join(_missing)}: run .ci/install-browser.sh"),
]


# ---------------------------------------------------------------- the service, with the UI


def ui_wired() -> bool:
    """Whether create_app already includes the UI router (building the app starts nothing)."""
    from spillway.service.app import create_app

    return any(getattr(route, "path", None) == "/ui/static/{name}" for route in create_app().routes)


# The real `spillway serve`, with the UI router added to the app it builds. Only used while
# create_app does not include the router yet; mount_ui is a no-op once it does.
_SERVE_WITH_UI = """
import sys
import spillway.service.app
from spillway.service.routes.ui import mount_ui
build = spillway.service.app.create_app
def create_app(settings=None):
    app = build(settings)
    mount_ui(app)
    return app
spillway.service.app.create_app = create_app
sys.argv = ["spillway", "serve"]
from spillway.service.cli import main
main()
"""


def start_ui_service(workdir: Path, env: dict[str, str]) -> ServiceProcess:
    """conftest's start_service (same env, health wait, log and stop), with the UI wired in.

    Until create_app includes the router, the command that launch_service runs is swapped for
    the same CLI behind a few lines that add the router: everything else stays the real thing.
    """
    if ui_wired():
        return start_service(workdir, extra_env=env)
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        assert list(args[1:]) == ["-m", "spillway", "serve"], f"launch_service runs something new: {args}"
        return real_popen([args[0], "-c", _SERVE_WITH_UI], **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "Popen", popen)
        return start_service(workdir, extra_env=env)


@pytest.fixture(scope="module")
def ui_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    # Its own service, so the jobs page lists only this module's jobs; two slots so the job
    # being watched and the job being cancelled run side by side.
    # The Dask engine: these tests watch a progress bar move through partitions and cancel a job
    # mid-way; a Polars job shows its stages 0 of 1 until done and finishes these sorts too fast.
    proc = start_ui_service(tmp_path_factory.mktemp("ui-service"), {"SPILLWAY_MAX_CONCURRENT_JOBS": "2", "SPILLWAY_DEFAULT_ENGINE": "dask"})
    yield proc
    proc.stop()


@pytest.fixture()
def api(ui_service: ServiceProcess) -> Iterator[SpillwayClient]:
    with ui_service.client() as client:
        yield client


def sort_spec(data: dict[str, Path], out: Path, name: str, sort_keys: list[str]) -> dict[str, Any]:
    """Each sort is a full shuffle of the 1.2M rows: about 2.5 s apiece on two CPU workers."""
    return {
        "name": name,
        "source": {"format": "parquet", "path": str(data["sales"] / "*.parquet")},
        "steps": [{"op": "sort", "by": [key]} for key in sort_keys],
        "sink": {"path": str(out)},
    }


@pytest.fixture(scope="module")
def watched_job(ui_service: ServiceProcess, big_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A job of about 5 s, submitted just before the test that watches it opens the page."""
    with ui_service.client() as client:
        return client.submit(sort_spec(big_data, tmp_path_factory.mktemp("watched") / "out", "sorted-twice", ["amount", "customer_id"])).id


# ---------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",  # containers have a small /dev/shm
        "--disable-quic",
        "--no-first-run",
        # No network but loopback at test time: nothing may try to phone home.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",  # fresh: no state between runs
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    log = tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER, log_output=str(log)))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


@pytest.fixture(autouse=True)
def no_console_errors(browser: Any) -> Iterator[None]:
    """A script error fails the test that caused it, even if the page still looked right."""
    browser.get_log("browser")  # drop what earlier tests left
    yield
    severe = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, f"errors in the browser console: {severe}"


def js(browser: Any, script: str, *args: Any) -> Any:
    """Read the page in one script: no element handles that a re-render could make stale."""
    return browser.execute_script(script, *args)


def until(browser: Any, script: str, *args: Any, what: str, timeout: float = 30.0, check: Callable[[Any], bool] = bool) -> Any:
    """Poll ``script`` in the page until ``check`` accepts what it returns."""
    return wait_for(lambda: (value := js(browser, script, *args)) is not None and check(value) and (value or True), timeout=timeout, interval=0.05, what=what)


def screenshot(browser: Any, name: str) -> Path:
    """The whole page, not just the window: grow the window to the page's height for the shot."""
    height = js(browser, "return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, max(HEIGHT, min(height + 120, 5000)))
    path = SHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    browser.set_window_size(WIDTH, HEIGHT)
    return path


def open_page(browser: Any, url: str, ready: str) -> None:
    """Load the page fresh (not just a hash change) and wait for the CSS selector ``ready``."""
    browser.get("about:blank")
    browser.get(url)
    until(browser, "return document.querySelector(arguments[0]) !== null", ready, what=f"{ready} on {url}")


# ---------------------------------------------------------------- tests

_ROW_BAR = """
const bar = document.querySelector(`tr[data-job-id="${arguments[0]}"] [role=progressbar]`);
return bar && {now: Number(bar.getAttribute("aria-valuenow")), width: bar.querySelector(".fill").style.width,
               text: bar.textContent, state: bar.closest("tr").dataset.state};
"""


def test_jobs_page_progress_bar_follows_the_job_to_100(ui_service: ServiceProcess, browser: Any, watched_job: str) -> None:
    open_page(browser, f"{ui_service.url}/#/jobs", "table#jobs")
    seen: list[int] = []

    def complete() -> bool:
        bar = js(browser, _ROW_BAR, watched_job)
        if bar is None:
            return False
        if not seen or seen[-1] != bar["now"]:
            seen.append(bar["now"])
            if 0 < bar["now"] < 100 and not (SHOTS / "jobs-running.png").exists():
                screenshot(browser, "jobs-running")
        return bar["now"] == 100

    (SHOTS / "jobs-running.png").unlink(missing_ok=True)
    wait_for(complete, timeout=120, interval=0.05, what="the job's bar to reach 100%")
    assert seen == sorted(seen), f"the bar went backwards: {seen}"
    assert any(0 < v < 100 for v in seen), f"the bar jumped without moving through the middle: {seen}"
    bar = until(browser, _ROW_BAR, watched_job, what="the row to say SUCCEEDED", check=lambda b: b["state"] == "SUCCEEDED")
    assert bar["width"] == "100%" and bar["text"].startswith("100%")
    # The moving bar was fed by the job's event stream, not only by the list's polling.
    assert f"GET /jobs/{watched_job}/events" in ui_service.log()
    screenshot(browser, "jobs-finished")

    # The state filter: only SUCCEEDED rows, the watched job among them.
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "state-filter")).select_by_value("SUCCEEDED")
    states = until(
        browser,
        "return location.hash.endsWith('SUCCEEDED') && [...document.querySelectorAll('#jobs tbody tr[data-job-id]')].map(r => [r.dataset.jobId, r.dataset.state])",
        what="the filtered list",
        check=lambda rows: any(job_id == watched_job for job_id, _ in rows),
    )
    assert {state for _, state in states} == {"SUCCEEDED"}


def test_job_detail_shows_the_result_manifest(ui_service: ServiceProcess, browser: Any, api: SpillwayClient, watched_job: str) -> None:
    job = wait_terminal(api, watched_job)
    assert job.state == JobStatus.SUCCEEDED and job.result is not None, job.error
    open_page(browser, f"{ui_service.url}/#/jobs/{watched_job}", "#result-files")
    page = js(
        browser,
        """return {
          files: [...document.querySelectorAll('#result-files tbody tr')].map(r => [...r.cells].map(c => c.textContent)),
          totalRows: document.getElementById('total-rows').textContent,
          columns: [...document.querySelectorAll('#result-schema tbody tr td:first-child')].map(c => c.textContent),
          stages: [...document.querySelectorAll('#stages [role=progressbar]')].map(b => b.getAttribute('aria-valuenow')),
          spec: document.getElementById('job-spec').textContent,
          links: [...document.querySelectorAll('.dashboard a')].map(a => a.href),
          cancel: document.getElementById('cancel-job') !== null,
          engine: document.getElementById('engine')?.textContent,
          stageNames: [...document.querySelectorAll('#stages li')].map(li => li.dataset.stage),
          types: [...document.querySelectorAll('#result-schema tbody tr td:nth-child(2)')].map(c => c.textContent),
        }""",
    )
    listed = page["files"][:-1]  # the last row is the total
    assert [row[0] for row in listed] == [f.path for f in job.result.files]
    assert [row[2] for row in listed] == [f"{f.rows:,}" for f in job.result.files]
    assert page["totalRows"] == f"{job.result.total_rows:,}" == "1,200,000"
    assert page["files"][-1][0] == f"{len(job.result.files)} files" and page["files"][-1][2] == "1,200,000"
    assert page["columns"] == [c.name for c in job.result.columns]
    assert page["stages"] and set(page["stages"]) == {"100"}, "every stage is done"
    # Stages named after the spec (issue 17 item 3), Arrow's large_string shown as string (item 13).
    assert page["stageNames"] == [s.name for s in job.progress.stages] and page["stageNames"][0] == "read source"
    assert "steps[0] sort" in page["stageNames"] and page["stageNames"][-1] == "write parquet"
    assert page["types"] == [c.type.replace("large_string", "string") for c in job.result.columns]
    assert '"op": "sort"' in page["spec"] and job.name in page["spec"]
    base = job.links.dashboard.removesuffix("/status")
    assert {f"{base}/tasks", f"{base}/individual-progress"} <= set(page["links"])
    assert not page["cancel"], "a finished job has no cancel button"
    assert job.progress.engine is not None and page["engine"] == f"dask on cpu — {job.progress.engine.reason}"
    screenshot(browser, "job-detail")


def test_cancel_button_cancels_a_running_job(ui_service: ServiceProcess, browser: Any, api: SpillwayClient, big_data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cancelled"
    job_id = api.submit(sort_spec(big_data, out, "cancel-me", ["amount", "customer_id", "product_id"])).id
    # About 8 s of work is left once the tasks exist: time enough to open the page and click twice.
    wait_for(lambda: (j := api.get(job_id)).state == JobStatus.RUNNING and j.progress.total > 0, timeout=60, what="the job to run")
    open_page(browser, f"{ui_service.url}/#/jobs/{job_id}", "#cancel-job")
    until(browser, "return Number(document.querySelector('#overall-progress')?.getAttribute('aria-valuenow'))", what="the detail page's bars to move")
    screenshot(browser, "job-running-detail")
    assert "left" in js(browser, "return document.querySelector('#overall-progress .bar-text').textContent"), "an ETA while it runs"

    button = browser.find_element("id", "cancel-job")
    button.click()
    assert "again" in button.text, "the first click only arms the button"
    button.click()
    until(browser, "return document.querySelector('#job-state [data-state]')?.dataset.state", what="the page to say CANCELLED", check=lambda s: s == "CANCELLED")
    assert api.get(job_id).state == JobStatus.CANCELLED
    assert not out.exists(), "a cancelled job commits nothing"
    assert js(browser, "return document.getElementById('cancel-job')") is None
    fill = "return getComputedStyle(document.querySelector('#overall-progress .fill')).backgroundColor"
    until(browser, fill, what="the cancelled job's bar to turn amber", check=lambda colour: colour == "rgb(240, 194, 122)")
    assert "left" not in js(browser, "return document.querySelector('#overall-progress .bar-text').textContent")
    screenshot(browser, "job-cancelled")


_RECORD_REQUESTS = """
window.__fetches = []; window.__streams = [];
const realFetch = window.fetch;
window.fetch = (url, options) => {
  const auth = (options && options.headers && options.headers.Authorization) || null;
  window.__fetches.push({url: String(url), auth, stored: sessionStorage.getItem("spillway.token")});
  return realFetch(url, options);
};
const RealEventSource = window.EventSource;
window.EventSource = class extends RealEventSource {
  constructor(url, init) { super(url, init); window.__streams.push(String(url)); }
};
"""


def test_token_is_sent_as_bearer_header_and_on_event_streams(ui_service: ServiceProcess, browser: Any, api: SpillwayClient, big_data: dict[str, Path], tmp_path: Path) -> None:
    job_id = api.submit(sort_spec(big_data, tmp_path / "out", "token-check", ["amount", "customer_id", "product_id"])).id
    try:
        open_page(browser, f"{ui_service.url}/#/jobs", f'tr[data-job-id="{job_id}"]')
        js(browser, _RECORD_REQUESTS)
        browser.find_element("id", "token").send_keys("s3cret token")
        browser.find_element("css selector", "#token-form button").click()  # saving re-opens the view
        # A poll may have fired between installing the recorder and saving: judge only fetches
        # made while the token was stored.
        fetches = until(browser, "return window.__fetches.filter(f => f.stored)", what="a fetch after saving the token")
        assert all(f["auth"] == "Bearer s3cret token" for f in fetches), fetches
        assert js(browser, "return sessionStorage.getItem('spillway.token')") == "s3cret token"
        if not api.get(job_id).state.is_terminal():
            streams = until(browser, "return window.__streams", what="the job's event stream to reopen")
            assert any(url.endswith(f"/jobs/{job_id}/events?token=s3cret%20token") for url in streams), streams
        # Clearing the field forgets the token: later requests carry no header.
        browser.find_element("id", "token").clear()
        browser.find_element("css selector", "#token-form button").click()
        assert js(browser, "return sessionStorage.getItem('spillway.token')") is None
        js(browser, "window.__fetches = []")
        assert all(f["auth"] is None for f in until(browser, "return window.__fetches", what="a fetch without the token"))
    finally:
        if not api.get(job_id).state.is_terminal():
            api.cancel(job_id)


def test_cluster_page_shows_workers_and_memory(ui_service: ServiceProcess, browser: Any, api: SpillwayClient) -> None:
    open_page(browser, f"{ui_service.url}/#/cluster", "#workers tbody tr")
    page = js(
        browser,
        """return {
          backend: document.getElementById('cluster-backend').textContent,
          protocol: document.getElementById('cluster-protocol').textContent,
          workers: [...document.querySelectorAll('#workers tbody tr')].map(r => ({
            name: r.cells[0].textContent, threads: r.cells[1].textContent,
            memory: r.querySelector('[role=progressbar]')?.textContent,
            pct: r.querySelector('[role=progressbar]')?.getAttribute('aria-valuenow')})),
          dashboard: [...document.querySelectorAll('.dashboard a')].map(a => a.href),
        }""",
    )
    assert page["backend"] == "pandas" and page["protocol"] == "tcp"
    assert sorted(w["name"] for w in page["workers"]) == ["0", "1"]
    for worker in page["workers"]:
        assert worker["threads"] == "1"
        assert " / " in worker["memory"] and worker["memory"].endswith("GiB"), worker  # used / limit
        assert 0 <= int(worker["pct"]) < 100
    assert any(link.endswith("/status") for link in page["dashboard"])
    screenshot(browser, "cluster")


_STUB_FETCH = """
// Answer these paths from the test, everything else from the service.
const stubs = arguments[0];
const realFetch = window.fetch;
window.fetch = (url, options) => {
  const path = new URL(String(url), location.href).pathname;
  if (!(path in stubs)) return realFetch(url, options);
  return Promise.resolve(new Response(JSON.stringify(stubs[path]), {status: 200, headers: {"Content-Type": "application/json"}}));
};
"""
GIB = 1 << 30


def gpu_worker(index: int) -> dict[str, Any]:
    return {
        "name": str(index), "address": f"ucx://127.0.0.1:{40000 + index}", "threads": 1, "memory_limit": 64 * GIB,
        "memory_used": 9 * GIB, "spilled_to_disk_bytes": 0, "tasks_processing": 1,
        "gpu": {"name": "NVIDIA H200", "index": str(index), "memory_total": 140 * GIB, "memory_used": (90 + 20 * index) * GIB,
                "device_memory_limit": 112 * GIB, "cudf_spill_device_limit": None, "spilled_to_host_bytes": 3 * GIB * index},
    }  # fmt: skip


def test_gpu_readings_and_errors_render_when_present(ui_service: ServiceProcess, browser: Any, api: SpillwayClient, watched_job: str) -> None:
    """CI has no GPU and no job that fails at run time: feed the page those API shapes by stubbing fetch."""
    job = wait_terminal(api, watched_job).model_dump(mode="json")
    failed = {**job, "id": "f00dfeedf00dfeed", "name": "broken-join", "state": "FAILED", "result": None,
              "error": {"code": "task_failed", "message": "KeyError: 'product_id' in join-shuffle (partition 3)", "field": "steps[2].on"}}  # fmt: skip
    job["resources"] = {"peak_device_memory_bytes": 200 * GIB, "peak_device_memory_per_worker": {"0": 90 * GIB, "1": 110 * GIB},
                        "spilled_to_host_bytes": 3 * GIB, "samples": 42, "method": "NVML sampling + cuDF spill statistics"}  # fmt: skip
    cluster = {"backend": "cudf", "kind": "LocalCUDACluster", "scheduler_address": "ucx://127.0.0.1:8786", "protocol": "ucx",
               "dashboard_link": "http://127.0.0.1:8787/status", "workers": [gpu_worker(1), gpu_worker(0)],
               "total_threads": 2, "total_memory_limit": 128 * GIB}  # fmt: skip
    open_page(browser, f"{ui_service.url}/#/jobs", "table#jobs")
    traceback = 'Traceback (most recent call last):\n  File "/w/join.py", line 3, in shuffle\n    key = row["product_id"]\nKeyError: \'product_id\''
    logs = {"id": failed["id"], "lines": ["2026-12-01T10:00:00.000+00:00 engine: dask on gpu (the spec says engine: dask)", traceback,
                                         "[tcp://127.0.0.1:40001] 2026-12-01 10:00:01,000 - distributed.worker - WARNING - spilling"]}  # fmt: skip
    stubs = {"/cluster": cluster, f"/jobs/{watched_job}": job, f"/jobs/{failed['id']}": failed, f"/jobs/{failed['id']}/logs": logs}
    js(browser, _STUB_FETCH, stubs)

    js(browser, "location.hash = '#/cluster'")  # a hash change keeps the stub; a page load would drop it
    rows = until(
        browser,
        """return document.getElementById('cluster-protocol')?.textContent === 'ucx' &&
                  [...document.querySelectorAll('#workers tbody tr')].map(r => [...r.cells].map(c => c.textContent))""",
        what="the GPU cluster page",
    )
    assert [r[0] for r in rows] == ["0", "1"], "workers in name order"
    assert rows[0][5] == "NVIDIA H200 #0" and rows[0][6] == "90.0 GiB / 112.0 GiB limit (140.0 GiB total)" and rows[1][7] == "3.0 GiB"
    device_pcts = js(browser, "return [...document.querySelectorAll('[aria-label^=\"device memory\"]')].map(b => b.getAttribute('aria-valuenow'))")
    assert device_pcts == ["80", "98"]
    screenshot(browser, "gpu-cluster")

    js(browser, f"location.hash = '#/jobs/{watched_job}'")
    text = until(browser, "return document.getElementById('resources')?.textContent", what="the job's GPU memory section")
    assert "Peak device memory200.0 GiB" in text and "Spilled to host3.0 GiB" in text and "110.0 GiB" in text
    screenshot(browser, "gpu-job")

    js(browser, f"location.hash = '#/jobs/{failed['id']}'")
    error = until(browser, "return document.getElementById('job-error')?.textContent", what="the failed job's error")
    assert "task_failed" in error and "steps[2].on" in error and "KeyError: 'product_id' in join-shuffle (partition 3)" in error
    assert js(browser, "return document.getElementById('result')") is None
    assert js(browser, "return document.getElementById('preview')") is None, "no rows to preview for a failed job"
    # The log view: the engine line, the worker's traceback as one block, the worker's warning.
    kinds = until(browser, "return [...document.querySelectorAll('#job-logs .log-line')].map(l => [l.className, l.textContent])", what="the failed job's log")
    assert kinds == [["log-line log-engine", logs["lines"][0]], ["log-line log-traceback", traceback], ["log-line log-worker", logs["lines"][2]]]
    screenshot(browser, "job-failed")
