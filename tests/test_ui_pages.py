"""The pipelines page, the submit/validate form, a job's log and first rows: in headless Chromium
against the real service, as tests/test_ui_browser.py does (its fixtures; it skips the same way).
Screenshots go to ``artifacts/ui/``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from spillway.jobs.status import JobStatus
from spillway.service.client import SpillwayClient
from spillway.service.launcher import ServiceProcess
from tests.conftest import wait_for, wait_terminal
from tests.test_auth import create_token
from tests.test_ui_browser import api, browser, js, no_console_errors, open_page, pytestmark, screenshot, start_ui_service, ui_service, until

__all__ = ["api", "browser", "no_console_errors", "pytestmark", "ui_service"]  # fixtures and marks, shared

BERLIN = ZoneInfo("Europe/Berlin")


def set_text(browser: Any, element_id: str, value: str) -> None:
    """Set a field's text and fire its input event, as typing would (send_keys of a whole spec is slow)."""
    js(browser, "const el = document.getElementById(arguments[0]); el.value = arguments[1]; el.dispatchEvent(new Event('input'))", element_id, value)


def click(browser: Any, css: str) -> None:
    browser.find_element("css selector", css).click()


def refused_requests(browser: Any, status: int) -> None:
    """Chromium logs every 4xx answer as a console error: drop those of a refusal the test asked
    for, so that no_console_errors still fails on anything else."""
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe and all(f"status of {status} " in m for m in severe), severe


# ---------------------------------------------------------------- pipelines

_RUN_ROWS = """return [...document.querySelectorAll('#runs tbody tr')].map(r => ({
  date: r.dataset.logicalDate, shown: r.cells[0].textContent, state: r.cells[1].textContent, trigger: r.cells[2].textContent,
  jobs: [...r.cells[3].querySelectorAll('a')].map(a => a.getAttribute('href'))}))"""


def test_pipelines_page_shows_schedule_runs_and_triggers_and_backfills(ui_service: ServiceProcess, browser: Any, sample_data: dict[str, Path], tmp_path: Path) -> None:
    body = {
        "name": "ui_daily",
        "schedule": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "spec": {
            "name": "ui_daily_{{ ds }}",
            "source": {"format": "parquet", "path": str(sample_data["sales"] / "*.parquet")},
            "steps": [{"op": "filter", "expr": "ts >= date('{{ ds }}') and ts < date('{{ ds }}') + interval(1, 'day')"}],
            "sink": {"path": str(tmp_path / "out" / "{{ ds }}")},
        },
    }
    http = httpx.Client(base_url=ui_service.url)
    created = http.post("/pipelines", json=body)
    assert created.status_code == 201, created.text
    next_run = created.json()["next_run_at"]
    expected_next = datetime.fromisoformat(next_run).astimezone(BERLIN).strftime("%Y-%m-%d %H:%M")
    assert expected_next.endswith("02:30")

    open_page(browser, f"{ui_service.url}/#/pipelines", "#pipelines tbody tr")
    row = js(browser, "return [...document.querySelectorAll('#pipelines tbody tr')].map(r => [...r.cells].map(c => c.textContent)).find(c => c[0] === 'ui_daily')")
    assert row[1:4] == ["30 2 * * *", "Europe/Berlin", expected_next] and row[4] == "no runs yet" and row[6] == "1"

    click(browser, "#pipelines a[href='#/pipelines/ui_daily']")
    until(browser, "return document.getElementById('runs')", what="the pipeline's runs")
    facts = js(browser, "return document.getElementById('pipeline-facts').textContent")
    assert f"Next run{expected_next} (Europe/Berlin)" in facts and "Schedule30 2 * * *" in facts

    # Pause and resume: no next run while paused, as the API says.
    click(browser, "#pause-toggle")
    until(browser, "return document.getElementById('paused') && document.getElementById('pipeline-facts').textContent.includes('Next runnone while paused')", what="the paused pipeline")
    assert http.get("/pipelines/ui_daily").json()["paused"] is True
    click(browser, "#pause-toggle")
    until(browser, "return !document.getElementById('paused') && document.getElementById('pause-toggle').textContent === 'Pause'", what="the resumed pipeline")
    assert http.get("/pipelines/ui_daily").json()["paused"] is False

    # A manual run for one logical date: the answer beside the form, then the run in the history.
    set_text(browser, "trigger-date", "2026-01-05T00:00")
    click(browser, "#trigger-form button")
    note = until(browser, "return document.getElementById('trigger-form-note').textContent", what="the trigger's answer", check=lambda t: t.startswith("Run "))
    assert "for 2026-01-05 00:00" in note, note
    runs = http.get("/pipelines/ui_daily/runs").json()["items"]
    assert [r["logical_date"] for r in runs] == ["2026-01-04T23:00:00Z"]  # midnight in Berlin

    def run_succeeded() -> Any:
        rows = js(browser, _RUN_ROWS)
        return rows if rows and rows[0]["state"] == "SUCCEEDED" else None

    rows = wait_for(run_succeeded, timeout=90, interval=0.2, what="the manual run to show SUCCEEDED (the page polls)")
    job_id = http.get("/pipelines/ui_daily/runs").json()["items"][0]["attempts"][0]["job_id"]
    assert rows[0]["shown"] == "2026-01-05 00:00" and rows[0]["trigger"] == "manual" and rows[0]["jobs"] == [f"#/jobs/{job_id}"]

    # The same date again is the API's 409, shown in the form.
    click(browser, "#trigger-form button")
    note = until(browser, "return document.querySelector('#trigger-form-note.form-error')?.textContent", what="the trigger's refusal")
    assert note.startswith("409 "), note
    refused_requests(browser, 409)

    set_text(browser, "backfill-start", "2026-01-01T02:30")  # the schedule's firings: 02:30 each day
    set_text(browser, "backfill-end", "2026-01-03T02:30")
    click(browser, "#backfill-form button")
    note = until(browser, "return document.getElementById('backfill-form-note').textContent", what="the backfill's answer", check=lambda t: "queued" in t)
    assert note == "3 runs queued, 0 already there.", note

    def all_succeeded() -> Any:
        rows = js(browser, _RUN_ROWS)
        return rows if len(rows) == 4 and all(r["state"] == "SUCCEEDED" for r in rows) else None

    rows = wait_for(all_succeeded, timeout=120, interval=0.2, what="the backfilled runs to succeed")
    assert [r["shown"] for r in rows] == ["2026-01-05 00:00", "2026-01-03 02:30", "2026-01-02 02:30", "2026-01-01 02:30"], "newest logical date first"
    assert [r["trigger"] for r in rows] == ["manual", "backfill", "backfill", "backfill"]
    screenshot(browser, "pipeline-detail")

    js(browser, "location.hash = '#/pipelines'")
    dots = until(browser, "return [...document.querySelectorAll('#pipelines tbody tr .run-dot')].map(d => d.dataset.state)", what="the recent-runs strip", check=lambda d: len(d) == 4)
    assert dots == ["SUCCEEDED"] * 4
    screenshot(browser, "pipelines")


# ---------------------------------------------------------------- submit and validate

BAD_COLUMN = """\
name: ui_submitted
source: {{format: parquet, path: "{sales}"}}
steps:
  - op: filter
    expr: "amount > 0"
  - op: assign
    column: margin
    expr: "amount - no_such_column"
sink:
  path: "{out}"
"""

_ERROR = """const card = document.getElementById('spec-error');
return card && {status: card.dataset.status, field: document.getElementById('error-field')?.textContent,
  where: document.getElementById('error-where')?.textContent, message: document.getElementById('error-message').textContent,
  bad: [...document.querySelectorAll('#spec-annotated li.bad')].map(li => [li.dataset.line, li.textContent]),
  note: document.querySelector('#spec-annotated li.bad + li.error-note')?.textContent}"""


def refusal(browser: Any, button: str, status: int) -> dict[str, Any]:
    js(browser, "document.getElementById('spec-outcome').replaceChildren()")  # so the wait sees the new answer
    click(browser, button)
    error = until(browser, _ERROR, what="the form's error")
    refused_requests(browser, status)
    return error


def test_submit_form_shows_the_apis_errors_on_their_lines_then_submits(ui_service: ServiceProcess, browser: Any, api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "submitted"
    text = BAD_COLUMN.format(sales=sample_data["sales"] / "*.parquet", out=out)
    open_page(browser, f"{ui_service.url}/#/submit", "#spec-text")
    set_text(browser, "spec-text", text)

    error = refusal(browser, "#validate-spec", 422)
    # The API's own answer for the same spec, word for word.
    parsed = httpx.post(f"{ui_service.url}/specs:parse", content=text, headers={"Content-Type": "application/yaml"}).json()
    answer = httpx.post(f"{ui_service.url}/jobs:validate", json=parsed["spec"]).json()["error"]
    assert error["status"] == "422" and error["field"] == answer["field"] == "steps[1].expr" and error["message"] == answer["message"]
    assert error["where"] == "line 8" and error["bad"] == [["8", '    expr: "amount - no_such_column"']]
    assert error["note"] == f"↑ {answer['code']}: {answer['message']}"
    selected = js(browser, "const t = document.getElementById('spec-text'); return t.value.slice(t.selectionStart, t.selectionEnd)")
    assert selected == '    expr: "amount - no_such_column"', "the editor selects the line too"
    screenshot(browser, "submit-error")

    # A syntax error is placed by the line and column the parser names.
    set_text(browser, "spec-text", text.replace("steps:\n", "steps: [\n"))
    error = refusal(browser, "#validate-spec", 422)
    assert error["where"].startswith("line ") and error["message"].startswith(error["where"].split(",")[0] + ",") and error["bad"]

    # Fixed: valid, with the engine that would run it; nothing is created.
    set_text(browser, "spec-text", text.replace("amount - no_such_column", "amount - quantity"))
    click(browser, "#validate-spec")
    report = until(browser, "return document.getElementById('validation-report')?.textContent", what="the validation report")
    assert "dask on cpu" in report and "margin" in report
    before = api.list(limit=500).total

    click(browser, "#submit-spec")
    href = until(browser, "return document.getElementById('submitted-link')?.getAttribute('href')", what="the accepted job's link")
    assert api.list(limit=500).total == before + 1
    job_id = href.removeprefix("#/jobs/")
    job = wait_terminal(api, job_id)
    assert job.state == JobStatus.SUCCEEDED and job.name == "ui_submitted", job.error

    # The job page: the first rows through the manifest, and the log with the engine chosen.
    click(browser, "#submitted-link")
    until(browser, "return document.querySelector('#preview-rows tbody tr')", what="the first rows")
    page = js(browser, """return {
      header: [...document.querySelectorAll('#preview-rows thead th')].map(th => th.firstChild.textContent),
      rows: [...document.querySelectorAll('#preview-rows tbody tr')].map(r => [...r.cells].map(c => c.textContent)),
      count: document.getElementById('preview-count').textContent,
      log: [...document.querySelectorAll('#job-logs .log-line')].map(l => [l.className, l.textContent])}""")
    preview = httpx.get(f"{ui_service.url}/jobs/{job_id}/result", params={"head": 20}).json()
    assert page["header"] == [c["name"] for c in preview["columns"]] and "margin" in page["header"]
    assert len(page["rows"]) == len(preview["rows"]) == 20
    for shown, row in zip(page["rows"], preview["rows"], strict=True):
        # Numbers as JavaScript writes them (0.0 is "0"), so compared as numbers.
        assert [float(c) if isinstance(v, float) else c for c, v in zip(shown, row, strict=True)] == ["null" if v is None else v if isinstance(v, float) else str(v) for v in row]
    assert page["count"].startswith(f"20 of {job.result.total_rows:,} rows")
    engine_lines = [text for kind, text in page["log"] if "log-engine" in kind]
    assert len(engine_lines) == 1 and "engine: dask on cpu" in engine_lines[0]
    assert [text for _, text in page["log"]] == api.logs(job_id)
    screenshot(browser, "job-preview")

    # Edit as a new job: the spec comes back as JSON; the sink is now taken, a 409 placed on its line.
    click(browser, "#edit-spec")
    until(browser, "return location.hash === '#/submit' && document.getElementById('spec-text')?.value.startsWith('{')", what="the spec in the form")
    error = refusal(browser, "#validate-spec", 409)
    assert error["status"] == "409" and error["field"] == "sink.path", error
    number, line = error["bad"][0]
    assert error["where"] == f"line {number}" and line.strip().startswith('"path"') and str(out) in line


def test_submit_form_places_an_unknown_step_in_json(ui_service: ServiceProcess, browser: Any) -> None:
    text = '{\n  "name": "x",\n  "source": {"format": "csv", "path": "/tmp/x.csv"},\n  "steps": [\n    {"op": "fliter", "expr": "a > 1"}\n  ],\n  "sink": {"path": "/tmp/y"}\n}'
    open_page(browser, f"{ui_service.url}/#/submit", "#spec-text")
    set_text(browser, "spec-text", text)
    error = refusal(browser, "#validate-spec", 422)
    assert error["field"] == "steps[0].op" and "did you mean 'filter'" in error["message"]
    assert error["where"] == "line 5" and error["bad"] == [["5", '    {"op": "fliter", "expr": "a > 1"}']]


# ---------------------------------------------------------------- auth


def test_with_auth_on_the_pages_ask_for_a_token_and_respect_its_scope(browser: Any, sample_data: dict[str, Path], tmp_path_factory: Any) -> None:
    """The new pages go through the same token handling as the old ones: a 401 says where the
    token goes; a saved token is sent; a read token may parse but not validate (the API's 403)."""
    service = start_ui_service(tmp_path_factory.mktemp("ui-auth"), {"SPILLWAY_AUTH": "on"})
    try:
        submit_token, read_token = create_token(service, "submit"), create_token(service, "read")
        open_page(browser, f"{service.url}/#/pipelines", "#token-form")
        alert = until(browser, "return document.getElementById('alert').textContent", what="the 401")
        assert "Could not load pipelines" in alert and "set a token at the top right" in alert, alert
        refused_requests(browser, 401)

        for token in (submit_token, read_token):
            browser.find_element("id", "token").clear()
            browser.find_element("id", "token").send_keys(token)
            click(browser, "#token-form button")
        js(browser, "location.hash = '#/submit'")
        until(browser, "return document.getElementById('spec-text')", what="the submit page")
        set_text(browser, "spec-text", f"name: scoped\nsource: {{format: parquet, path: '{sample_data['sales']}/*.parquet'}}\nsink: {{path: /tmp/never-written}}\n")
        error = refusal(browser, "#validate-spec", 403)  # parsing needs read, validating submit
        assert error["status"] == "403" and error["where"] is None and error["bad"] == []

        browser.find_element("id", "token").clear()
        browser.find_element("id", "token").send_keys(submit_token)
        click(browser, "#token-form button")
        until(browser, "return document.getElementById('spec-text')", what="the submit page again")
        click(browser, "#validate-spec")
        assert "Would run on" in until(browser, "return document.getElementById('validation-report')?.textContent", what="the report")
        js(browser, "location.hash = '#/pipelines'")
        assert "No pipelines yet" in until(browser, "return document.getElementById('pipelines')?.textContent", what="the pipelines page")
        # The dashboard proxy takes the token once as ?token= (then a cookie): the links carry it, to this origin only.
        js(browser, "location.hash = '#/cluster'")
        links = until(browser, "const a = [...document.querySelectorAll('.dashboard a')].map(a => a.href); return a.length ? a : null",
                      what="the dashboard links")
        assert all(link.startswith(f"{service.url}/dashboard/") and link.endswith(f"?token={submit_token}") for link in links), links
    finally:
        js(browser, "sessionStorage.clear()")  # the next test's service has auth off
        browser.get("about:blank")  # stop the page's polling before its service goes
        service.stop()
