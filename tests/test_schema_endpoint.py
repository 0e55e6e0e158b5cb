"""``GET /schema/jobspec``: the JobSpec's JSON Schema, served open like ``/openapi.json``,
in the OpenAPI document, and in agreement with the model on the specs we ship and document."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from spillway.jobs.spec import JobSpec
from spillway.service.app import create_app
from spillway.service.config import Settings
from spillway.service.documents import read_mapping
from spillway.service.pipelines.templating import interval_context, render_spec
from tests.conftest import ROOT, ServiceProcess
from tests.test_docs_spec import EXAMPLES

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


@pytest.fixture(scope="module")
def served(service: ServiceProcess) -> httpx.Response:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        return http.get("/schema/jobspec")


def test_schema_is_the_models_and_cacheable(served: httpx.Response, service: ServiceProcess) -> None:
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("application/json")
    schema = served.json()
    assert schema.pop("$schema") == DRAFT_2020_12
    assert schema == JobSpec.model_json_schema()
    assert "public" in served.headers["cache-control"]
    with httpx.Client(base_url=service.url, timeout=30) as http:
        again = http.get("/schema/jobspec", headers={"If-None-Match": served.headers["etag"]})
        stale = http.get("/schema/jobspec", headers={"If-None-Match": '"something-else"'})
        paths = http.get("/openapi.json").json()["paths"]
    assert again.status_code == 304 and again.content == b""
    assert stale.status_code == 200 and stale.json() == served.json()
    assert "get" in paths["/schema/jobspec"]


def test_schema_needs_no_token_when_auth_is_on() -> None:
    # Open like /openapi.json, which publishes the same schema. The auth dependency reads
    # app.state.services, so a stand-in is enough to tell an open route from a guarded one.
    app = create_app(Settings(auth="on"))
    app.state.services = SimpleNamespace(settings=SimpleNamespace(auth_required=True), store=None)
    client = TestClient(app)
    assert client.get("/jobs").status_code == 401
    assert client.get("/openapi.json").status_code == 200
    response = client.get("/schema/jobspec")
    assert response.status_code == 200 and response.json()["title"] == "JobSpec"


def _shipped_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every spec under examples/, as the CLI reads it; a pipeline's template rendered for one day."""
    specs = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        document = read_mapping(path, "a job spec")
        if "schedule" in document:
            start = datetime(2026, 11, 28, tzinfo=UTC)
            context = interval_context(start, start, UTC, document.get("params", {}))
            document = render_spec(document["spec"], context).model_dump(mode="json")
        specs.append((str(path.relative_to(ROOT)), document))
    return specs


def test_shipped_and_documented_specs_validate(served: httpx.Response) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(served.json())
    validator.check_schema(served.json())
    shipped = _shipped_specs()
    assert len(shipped) >= 10
    for name, spec in shipped:
        assert not list(validator.iter_errors(spec)), name
    documented = [e for e in EXAMPLES if e.output is not None]
    for example in documented:
        assert not list(validator.iter_errors(example.spec)), f"docs/spec.md:{example.line}"


INVALID: list[dict[str, Any]] = [
    {"source": {"format": "parquet", "path": "x"}},  # no sink
    {"source": {"format": "xlsx", "path": "x"}, "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x", "colour": "red"}, "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x"}, "steps": [{"op": "pivot"}], "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x"}, "steps": [{"op": "limit", "n": -1}], "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x"}, "steps": [{"op": "sort", "by": ["a"], "descnding": True}], "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x"}, "steps": [{"op": "join", "right": "y", "how": "cross", "on": ["a"]}], "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x"}, "steps": [{"op": "groupby", "by": ["a"], "aggs": {"m": {"func": "mode_value", "column": "b"}}}], "sink": {"path": "o"}},
    {"name": "no spaces allowed", "source": {"format": "parquet", "path": "x"}, "sink": {"path": "o"}},
    {"source": {"format": "parquet", "path": "x", "blocksize": "lots"}, "sink": {"path": "o"}},
]


@pytest.mark.parametrize("spec", INVALID)
def test_schema_refuses_what_the_model_refuses(served: httpx.Response, spec: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(ValidationError):
        JobSpec.model_validate(spec)
    assert list(jsonschema.Draft202012Validator(served.json()).iter_errors(spec))

