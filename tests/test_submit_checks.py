"""Bad input refused at submit with a 422 naming the field (issue 16 item 12), and
``GET /jobs?state=`` in any case (issue 17 item 13)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from spillway.jobs.spec import JobSpec
from tests.conftest import ServiceProcess


def post(service: ServiceProcess, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{service.url}/jobs", json=body, timeout=60)


def refused(service: ServiceProcess, body: dict[str, Any]) -> dict[str, Any]:
    response = post(service, body)
    assert response.status_code == 422, response.text
    return dict(response.json()["error"])


@pytest.mark.parametrize("blocksize", ["0", "1", "1023", "0.5KiB", "-1", "-64MiB"])
def test_a_tiny_or_negative_blocksize_is_a_422(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, blocksize: str) -> None:
    body = {"source": {"format": "csv", "path": str(sample_data["products"]), "blocksize": blocksize}, "sink": {"path": str(tmp_path / "out")}}
    error = refused(service, body)
    assert error["field"] == "source.blocksize", error
    if not blocksize.startswith("-"):
        assert "under the minimum of 1KiB" in error["message"]


@pytest.mark.parametrize("blocksize", ["1KiB", "1024", "16MiB", "1.5GB"])
def test_blocksizes_from_1KiB_are_accepted(blocksize: str) -> None:
    JobSpec.model_validate({"source": {"format": "csv", "path": "x.csv", "blocksize": blocksize}, "sink": {"path": "out"}})


def test_a_blocksize_in_a_named_source_is_named_there() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"sources": {"p": {"format": "csv", "path": "x.csv", "blocksize": "0"}}, "source": "p", "sink": {"path": "out"}})
    assert [e["loc"] for e in caught.value.errors()] == [("sources", "p", "blocksize")]


def test_a_self_join_repeated_is_refused_naming_the_step_and_column(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    # The second join would add region_right again: the Dask engine failed at run time with MergeError.
    join = {"op": "join", "right": "sales", "on": ["order_id"]}
    body = {"sources": {"sales": {"format": "parquet", "path": str(sample_data["sales"])}}, "source": "sales",
            "steps": [join] * 50, "sink": {"path": str(tmp_path / "out")}}
    error = refused(service, body)
    assert error["field"] == "steps[1].right_suffix"
    assert "two columns named 'ts_right'" in error["message"] and "step 1 (join)" in error["message"]


def test_a_suffix_that_clashes_with_a_column_is_refused(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    sales = {"format": "parquet", "path": str(sample_data["sales"])}
    body = {"sources": {"sales": sales, "products": {"format": "csv", "path": str(sample_data["products"])}}, "source": "sales",
            "steps": [{"op": "assign", "column": "category", "expr": "region"}, {"op": "assign", "column": "category_x", "expr": "region"},
                      {"op": "join", "right": "products", "on": ["product_id"], "right_suffix": "_x"}],
            "sink": {"path": str(tmp_path / "out")}}
    error = refused(service, body)
    assert error["field"] == "steps[2].right_suffix" and "'category_x'" in error["message"]
    # Another suffix: the same join is fine.
    body["steps"][2]["right_suffix"] = "_product"
    assert post(service, {**body, "sink": {"path": str(tmp_path / "ok")}}).status_code == 202


def test_a_right_side_whose_own_column_takes_the_suffixed_name_is_refused(tmp_path: Path) -> None:
    from spillway.jobs.errors import SpecError
    from spillway.jobs.validate import check_spec

    spec = JobSpec.model_validate({
        "sources": {"l": {"format": "csv", "path": "l.csv"}, "r": {"format": "csv", "path": "r.csv"}},
        "source": "l", "steps": [{"op": "join", "right": "r", "on": ["k"]}], "sink": {"path": str(tmp_path / "out")},
    })
    schemas = {"sources.l": {"k": "numeric", "v": "numeric"}, "sources.r": {"k": "numeric", "v": "numeric", "v_right": "numeric"}}
    with pytest.raises(SpecError, match="two columns named 'v_right'") as caught:
        check_spec(spec, lambda source, field: schemas[field])
    assert caught.value.field == "steps[0].right_suffix"


@pytest.mark.parametrize("typed", ["running", "Running", "RUNNING", "succeeded"])
def test_list_filters_by_state_in_any_case(service: ServiceProcess, typed: str) -> None:
    response = httpx.get(f"{service.url}/jobs", params={"state": typed}, timeout=30)
    assert response.status_code == 200, response.text
    assert all(item["state"] == typed.upper() for item in response.json()["items"])


def test_an_unknown_state_is_a_422_naming_it(service: ServiceProcess) -> None:
    response = httpx.get(f"{service.url}/jobs", params={"state": "runing"}, timeout=30)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "query.state"
