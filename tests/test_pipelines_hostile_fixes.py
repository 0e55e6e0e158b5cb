"""Pipeline bugs found by a hostile test run (S1, S2, E1, E2, W6, C2), through the real router,
its error handlers and the CLI: each answer is a 422 (or a one-line CLI error) naming the field."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from spillway.service.pipelines.errors import InvalidSchedule, TemplateError
from spillway.service.pipelines.schedule import CronSchedule
from spillway.service.pipelines.templating import render_spec
from tests.test_pipelines_api import NOW, body, error_of, make_app
from tests.test_pipelines_fakes import FakeClock, FakeJobs, spec_template
from tests.test_pipelines_templating import context

pytest_plugins = ["tests.test_pipelines_fakes"]  # sqlite_url

BIG = "{% set a = 'x' * 10000 %}{% set a = a * 10 %}"  # 100,000 characters: the most a value may hold
# Depth 7: each level calls the one below 10 times; unbounded, this runs for tens of seconds.
MACRO_BOMB = (
    "{% macro m0() %}x{% endmacro %}"
    + "".join(f"{{% macro m{i}() %}}" + f"{{{{ m{i - 1}() }}}}" * 10 + "{% endmacro %}" for i in range(1, 8))
    + "{{ m7() | length }}"
)


@pytest.fixture()
def client(sqlite_url: str) -> Iterator[TestClient]:
    app = make_app(sqlite_url, FakeClock(NOW), FakeJobs())
    yield TestClient(app)
    app.state.pipelines.store.close()


# S1 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "{% set a = ds ~ ds %}" + "{% set a = a ~ a %}" * 20 + "{{ a | length }}",
        "{% set a = ds + ds %}" + "{% set a = a + a %}" * 20 + "{{ a | length }}",
        "{% set a = [ds, ds] %}" + "{% set a = a + a %}" * 20 + "{{ a | length }}",
        BIG + "{% set b %}{% for c in a %}{{ a }}{% endfor %}{% endset %}{{ b | length }}",
        BIG + "{% macro m(s) %}{% for c in s %}{{ s }}{% endfor %}{% endmacro %}{{ m(a) | length }}",
        BIG + "{{ a.join(a) | length }}",
        BIG + "{{ a | join(a) | length }}",
        BIG + "{{ a.replace('', a) | length }}",
        BIG + "{{ ('{0}' * 1000).format(a) | length }}",
        BIG + "{% set b = [a, a, a, a, a, a, a, a, a, a] %}{% set c = [b, b, b, b, b, b, b, b, b, b] %}{% set d = [c, c, c, c, c, c, c, c, c, c] %}{{ d | string | length }}",
        "{% set a = [ds] %}{{ a.extend(a) }}",
    ],
    ids=["tilde", "plus", "list-plus", "set-block", "macro-loop", "str-join", "join-filter", "replace", "format-fields",
         "list-literal", "list-extend"],
)
def test_every_way_of_growing_a_value_respects_the_size_cap(path: str) -> None:
    """Found by a hostile run: '~', '+' and {% set %} built strings of any size (hundreds of MB)."""
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError) as caught:
            render_spec(spec_template(sink={"path": path}), context())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.field == "spec.sink.path" and caught.value.code == "invalid_template"
    message = caught.value.message
    assert "not allowed in a template" in message and ("over 100000" in message or "unsafe" in message), message
    assert peak < 20_000_000, f"refused after building {peak} bytes, not before"


def test_templates_that_stay_small_still_render() -> None:
    path = "out/{{ ds ~ '-' ~ ds_nodash }}/{{ [ds, ds] | join('_') }}/{{ '%s' % ds }}/{{ ds.replace('-', '') + 'x' }}/{{ '{0}{0}'.format(ds_nodash) }}"
    spec = render_spec(spec_template(sink={"path": path}), context())
    assert spec.sink.path == "out/2026-03-28-20260328/2026-03-28_2026-03-28/2026-03-28/20260328x/2026032820260328"


def test_a_concatenation_bomb_is_a_422_naming_the_field(client: TestClient) -> None:
    name = "{% set a = ds ~ ds %}" + "{% set a = a ~ a %}" * 20 + "x{{ a | length }}"
    response = client.post("/pipelines", json=body(spec=spec_template(name=name)))
    assert response.status_code == 422, response.text
    assert error_of(response)["code"] == "invalid_template" and error_of(response)["field"] == "spec.name"
    assert "over 100000" in error_of(response)["message"]


# S2 ---------------------------------------------------------------------------------------------


def test_a_cpu_bomb_stops_at_its_budget_and_does_not_starve_other_pipelines(sqlite_url: str) -> None:
    """Found by a hostile run: two bombs got their 422 but kept both render threads busy, so every
    other save (and scheduled firing) failed with 'took more than 2 s' for most of a minute."""
    app = make_app(sqlite_url, FakeClock(NOW), FakeJobs())

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://spillway", timeout=60) as http:
            bombs = [body(name=f"bomb{i}", spec=spec_template(name=MACRO_BOMB)) for i in range(2)]
            answers = await asyncio.gather(*(http.post("/pipelines", json=b) for b in bombs))
            for answer in answers:
                assert answer.status_code == 422, answer.text
                assert error_of(answer)["field"] == "spec.name" and "took more than 2 s" in error_of(answer)["message"]
            # Before, both render threads were still busy with the bombs: this save got 422 "took more than 2 s".
            trivial = await http.post("/pipelines", json=body(name="trivial", spec=spec_template(name="ok_{{ ds_nodash }}")))
            assert trivial.status_code == 201, trivial.text

    try:
        asyncio.run(scenario())
    finally:
        app.state.pipelines.store.close()


def test_a_recursive_loop_stops_at_its_budget() -> None:
    path = "{% for c in ds_nodash recursive %}{% if loop.depth < 12 %}{{ loop(ds_nodash) }}{% endif %}{% endfor %}"
    started = time.monotonic()
    with pytest.raises(TemplateError) as caught:
        render_spec(spec_template(sink={"path": path}), context())
    assert "took more than 2 s" in caught.value.message and caught.value.field == "spec.sink.path"
    assert time.monotonic() - started < 60, "a hang guard: the loop ran on past its budget"  # not a speed test


# E1, E2 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"schedule": "0 0 30 2 *"}, "schedule", "never fires"),
        ({"schedule": "0 0 31 4 *"}, "schedule", "never fires"),
        ({"schedule": "0 0 31 2,4,6 *"}, "schedule", "never fires"),
        ({"timezone": "a" * 300}, "timezone", "unknown time zone"),
        ({"timezone": "Europe/" + "b" * 5000}, "timezone", "unknown time zone"),
        ({"timezone": "localtime"}, "timezone", "this host's own setting"),
        ({"timezone": "Factory"}, "timezone", "placeholder"),
    ],
    ids=["30-feb", "31-apr", "31-feb-apr-jun", "zone-300", "zone-5000", "localtime", "Factory"],
)
def test_schedules_that_never_fire_and_overlong_zones_are_a_422_not_a_500(client: TestClient, fields: dict[str, str], field: str, words: str) -> None:
    """Found by a hostile run: CroniterBadDateError and OSError (file name too long) were 500s."""
    created = client.post("/pipelines", json=body(**fields))
    assert created.status_code == 422, created.text
    assert error_of(created)["code"] == "invalid_schedule" and error_of(created)["field"] == field and words in error_of(created)["message"]
    assert client.post("/pipelines", json=body()).status_code == 201
    definition = {k: v for k, v in body(**fields).items() if k not in ("name", "paused")}
    updated = client.put("/pipelines/sales", json=definition)
    assert updated.status_code == 422, updated.text
    assert error_of(updated)["code"] == "invalid_schedule" and error_of(updated)["field"] == field
    assert client.get("/pipelines/sales").json()["version"] == 1


def test_a_schedule_that_fires_once_in_four_years_is_still_valid() -> None:
    assert CronSchedule("0 0 29 2 *").next_after(NOW).year == 2028
    with pytest.raises(InvalidSchedule):
        CronSchedule("0 0 30 2 *")


# W6 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "payload", "field"),
    [
        ("runs", {"logical_date": "20261128"}, "logical_date"),
        ("runs", {"logical_date": 20261128}, "logical_date"),
        ("runs", {"logical_date": "1e9"}, "logical_date"),
        ("backfill", {"start": "20261128", "end": "2026-11-30"}, "start"),
        ("backfill", {"start": "2026-11-28", "end": 1796083200}, "end"),
    ],
    ids=["compact-text", "number", "float-text", "backfill-start", "backfill-end"],
)
def test_logical_dates_must_be_iso(client: TestClient, path: str, payload: dict[str, Any], field: str) -> None:
    """Found by a hostile run: '20261128' was read as Unix seconds (1970-08-23) and answered 201."""
    client.post("/pipelines", json=body(schedule="@daily"))
    answer = client.post(f"/pipelines/sales/{path}", json=payload)
    assert answer.status_code == 422, answer.text
    assert error_of(answer)["field"] == field and "ISO date" in error_of(answer)["message"]
    assert client.get("/pipelines/sales/runs").json()["total"] == 0
    assert client.post("/pipelines/sales/runs", json={"logical_date": "2026-11-28"}).status_code == 201


# C2 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "document", "field"),
    [
        ("create", {"name": "ok", "source": {"format": "csv", "path": "a.csv"}, "sink": {"path": "out"}}, "spec"),
        ("update", {"name": "dst", "schedule": "x"}, "spec"),
        ("create", {"name": "p", "spec": {}, "schedule": "@daily", "retries": "many"}, "retries"),
    ],
    ids=["job-spec-not-pipeline", "update-missing-spec", "bad-retries"],
)
def test_an_invalid_pipeline_file_is_a_one_line_cli_error(tmp_path: Path, command: str, document: dict[str, Any], field: str) -> None:
    """Found by a hostile run: the SDK's local validation printed a pydantic traceback."""
    from tests.test_pipelines_cli import root

    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(root, ["pipeline", command, str(file), "--url", "http://127.0.0.1:9"], env={"COLUMNS": "200"})
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output and "errors.pydantic.dev" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"is not a valid pipeline: {field}:" in lines[0], result.output
