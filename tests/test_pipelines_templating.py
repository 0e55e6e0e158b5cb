"""Rendering spec templates: the variables, the sandbox, and errors that name the field."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from spillway.service.pipelines.errors import TemplateError
from spillway.service.pipelines.models import PipelineDefinition
from spillway.service.pipelines.plans import check_definition
from spillway.service.pipelines.templating import check_param_names, interval_context, render_spec
from tests.test_pipelines_fakes import UTC, spec_template

pytest_plugins = ["tests.test_pipelines_fakes"]  # sqlite_url

BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET
END = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST


def context(**params: Any) -> dict[str, Any]:
    return interval_context(START, END, BERLIN, {"region": "north", **params})


def test_interval_variables_are_strings_in_the_pipeline_zone() -> None:
    ctx = context()
    assert ctx["ds"] == "2026-03-28" and ctx["ds_nodash"] == "20260328"
    assert ctx["data_interval_start"] == ctx["logical_date"] == "2026-03-28T02:30:00+01:00"
    assert ctx["data_interval_end"] == "2026-03-29T03:00:00+02:00"


def test_spec_renders_paths_expressions_and_params() -> None:
    template = spec_template(steps=[{"op": "filter", "expr": "region == '{{ params.region }}' and day == '{{ ds }}'"}, {"op": "limit", "n": "{{ n }}"}])
    spec = render_spec(template, context(n=5, out="s3://b/{{ ds_nodash }}"))
    assert spec.source.path == "data/sales/2026-03-28/*.parquet"
    assert spec.steps[0].expr == "region == 'north' and day == '2026-03-28'"  # type: ignore[union-attr]
    assert spec.steps[1].n == 5  # type: ignore[union-attr]
    assert spec.sink.path == "out/north/20260328"
    assert context(out="s3://b/{{ ds_nodash }}")["out"] == "s3://b/20260328"  # params may use the date variables


@pytest.mark.parametrize(
    ("template", "field", "words"),
    [
        (spec_template(sink={"path": "out/{{ ds "}), "spec.sink.path", "syntax error"),
        (spec_template(steps=[{"op": "filter", "expr": "x == {{ nope }}"}]), "spec.steps[0].expr", "'nope' is undefined"),
        (spec_template(sink={"path": "out/{{ params.nope }}"}), "spec.sink.path", "nope"),
        (spec_template(steps=[{"op": "limit", "n": "{{ region }}"}]), "spec.steps[0].n", "valid integer"),
        (spec_template(sink={"path": "{{ ds.__class__ }}"}), "spec.sink.path", "not allowed"),
        (spec_template(sink={"path": "{{ 'a' * 100000000 }}"}), "spec.sink.path", "not allowed"),
        (spec_template(sink={"path": "{{ 9 ** 999999999 }}"}), "spec.sink.path", "not allowed"),
        (spec_template(sink={"path": "{{ range(3) | list }}"}), "spec.sink.path", "'range' is undefined"),
        (spec_template(sink={"path": "{{ 1 / 0 }}"}), "spec.sink.path", "ZeroDivisionError"),
    ],
    ids=["syntax", "unknown-name", "unknown-param", "invalid-after-render", "dunder", "repeat-bomb", "power-bomb", "no-globals", "runtime"],
)
def test_template_errors_name_the_field(template: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_spec(template, context())
    assert caught.value.field == field
    assert words in caught.value.message
    assert caught.value.code == "invalid_template"


@pytest.mark.parametrize("name", ["ds", "params", "not-an-identifier"])
def test_param_names_cannot_hide_variables(name: str) -> None:
    with pytest.raises(TemplateError) as caught:
        check_param_names({name: "x"})
    assert caught.value.field == f"params.{name}"


def test_check_definition_renders_for_the_next_run() -> None:
    definition = PipelineDefinition(spec=spec_template(), schedule="30 2 * * *", timezone="Europe/Berlin", params={"region": "west"})
    spec = check_definition(definition, datetime(2026, 3, 28, 12, tzinfo=UTC))
    # The next run fires 2026-03-29 03:00 CEST; the one after it starts then: ds = 2026-03-29.
    assert spec.sink.path == "out/west/20260329"


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("{% for a in ds %}{% for b in ds %}x{% endfor %}{% endfor %}", "inside another {% for %}"),
        ("{{ (ds * 10000) * 2000 }}", "over 100000"),  # each repeat under the cap, their product not
        ("{{ ds | center(300000000) }}", "the filter 'center' was given 300000000"),
        ("{{ ds.zfill(300000000) }}", "'zfill' was given 300000000"),
        ("{{ '{:>300000000}'.format(ds) }}", "width of 300000000"),
        ("{{ '%300000000s' | format(ds) }}", "width of 300000000"),
        ("{% for a in ds * 9000 %}{{ ds }}{% endfor %}", "renders to more than 100000 characters"),
    ],
    ids=["nested-for", "nested-repeat", "center", "zfill", "format-width", "printf-width", "long-output"],
)
def test_template_blow_ups_are_refused_naming_the_field(path: str, words: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_spec(spec_template(sink={"path": path}), context())
    assert caught.value.field == "spec.sink.path" and caught.value.code == "invalid_template"
    assert words in caught.value.message


def test_bounded_templates_still_render_numbers_widths_and_loops() -> None:
    path = "out/{{ '%d' | format(20260101) }}/{{ '{}-20260101'.format(ds) }}/{{ ds.center(12) | trim }}/{% for c in ds_nodash %}{{ c }}{% endfor %}"
    assert render_spec(spec_template(sink={"path": path}), context()).sink.path == "out/20260101/2026-03-28-20260101/2026-03-28/20260328"


def test_a_render_past_its_time_budget_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from spillway.service.pipelines import templating

    monkeypatch.setattr(templating, "RENDER_BUDGET_S", -1.0)  # the deadline has passed before the first chunk
    with pytest.raises(TemplateError) as caught:
        render_spec(spec_template(), context())
    assert caught.value.field is not None and caught.value.field.startswith("spec") and "took more than" in caught.value.message


def test_saving_a_pipeline_with_a_template_blow_up_is_a_422_naming_the_field(sqlite_url: str) -> None:
    from fastapi.testclient import TestClient

    from tests.test_pipelines_api import NOW, make_app
    from tests.test_pipelines_fakes import FakeClock, FakeJobs, pipeline

    app = make_app(sqlite_url, FakeClock(NOW), FakeJobs())
    try:
        nested = "{% for a in ds %}{% for b in ds %}{% for c in ds %}x{% endfor %}{% endfor %}{% endfor %}"
        body = pipeline(spec=spec_template(sink={"path": nested})).model_dump(mode="json")
        response = TestClient(app).post("/pipelines", json=body)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_template" and error["field"] == "spec.sink.path" and "inside another" in error["message"]
    finally:
        app.state.pipelines.store.close()


def test_saving_a_pipeline_renders_and_checks_off_the_event_loop(sqlite_url: str) -> None:
    """While one save is still rendering and checking its template, the same event loop answers other requests."""
    import asyncio
    import threading

    import httpx

    from tests.test_pipelines_api import NOW, make_app
    from tests.test_pipelines_fakes import FakeClock, FakeJobs, pipeline

    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def slow_check(spec: Any) -> None:  # the job check after the render, in the same thread
        entered.set()
        release.wait(10)  # on the event loop this would hold every other request for the 10 s
        returned.set()

    app = make_app(sqlite_url, FakeClock(NOW), FakeJobs(), check_job=slow_check)

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://spillway") as client:
            saving = asyncio.create_task(client.post("/pipelines", json=pipeline().model_dump(mode="json")))
            assert await asyncio.to_thread(entered.wait, 30), "the save never reached its check"
            answered = await asyncio.wait_for(client.get("/ping"), 30)
            assert answered.status_code == 200 and not returned.is_set(), "the other request waited for the save's check"
            release.set()
            assert (await saving).status_code == 201

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        app.state.pipelines.store.close()
