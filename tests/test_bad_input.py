"""Bad input gets a 4xx with {"error": {"code", "message", "field"?}}, or a FAILED job with a clear reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.status import JobStatus
from tests.conftest import ServiceProcess, wait_terminal


def base_spec(data: dict[str, Path], tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"format": "parquet", "path": str(data["sales"])},
        "steps": [{"op": "filter", "expr": "amount > 0"}],
        "sink": {"path": str(tmp_path / "out")},
    }
    spec.update(overrides)
    return spec


def post(service: ServiceProcess, **kwargs: Any) -> httpx.Response:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        return http.post("/jobs", **kwargs)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]) <= {"code", "message", "field"}
    return body["error"]


def test_malformed_json(service: ServiceProcess) -> None:
    error = error_of(post(service, content=b'{"source": {', headers={"content-type": "application/json"}), 400)
    assert error["code"] == "malformed_json"


def test_unknown_step(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, steps=[{"op": "explode", "column": "x"}])), 422)
    assert error["code"] == "unknown_step" and error["field"] == "steps[0].op"
    assert "explode" in error["message"] and "filter" in error["message"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"steps": [{"op": "limit", "n": "ten"}]}, "steps[0].n"),
        ({"steps": "filter"}, "steps"),
        ({"source": {"format": "xlsx", "path": "x"}}, "source.format"),
        ({"sink": {"path": "x", "compression": 5}}, "sink.compression"),
        ({"name": "bad name!"}, "name"),
        ({"unexpected": 1}, "unexpected"),
    ],
)
def test_wrong_types_name_the_field(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, patch: dict[str, Any], field: str) -> None:
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, **patch)), 422)
    assert error["code"] == "invalid_spec" and error["field"] == field
    assert error["message"].startswith(field)


def test_missing_source_files(service: ServiceProcess, tmp_path: Path) -> None:
    spec = {"source": {"format": "parquet", "path": str(tmp_path / "none/*.parquet")}, "sink": {"path": str(tmp_path / "o")}}
    error = error_of(post(service, json=spec), 422)
    assert error["code"] == "source_not_found" and error["field"] == "source.path"


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("open('/etc/passwd')", "open"),
        ("__import__('os').system('true')", "'.system' is not allowed"),
        ("__import__('os')", "__import__"),
        ("amount.__class__", "__class__"),
        ("amount.sum()", "sum"),
        ("(lambda: 1)()", "lambda"),
    ],
)
def test_unsafe_expressions(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, expr: str, fragment: str) -> None:
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, steps=[{"op": "filter", "expr": expr}])), 422)
    assert error["code"] == "invalid_expression" and error["field"] == "steps[0].expr"
    assert fragment in error["message"]


def test_unknown_column_names_step_and_column(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    steps = [{"op": "select", "columns": ["region", "amount"]}, {"op": "assign", "column": "x", "expr": "quantity * 2"}]
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, steps=steps)), 422)
    assert error["code"] == "unknown_column" and error["field"] == "steps[1].expr"
    assert "step 1 (assign)" in error["message"] and "'quantity'" in error["message"]


def test_sink_that_holds_data(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "existing.parquet").write_bytes(b"precious")
    error = error_of(post(service, json=base_spec(sample_data, tmp_path)), 409)
    assert error["code"] == "sink_exists" and error["field"] == "sink.path"
    assert (tmp_path / "out" / "existing.parquet").read_bytes() == b"precious"


def test_unknown_job_and_route(service: ServiceProcess) -> None:
    with httpx.Client(base_url=service.url) as http:
        assert error_of(http.get("/jobs/nope"), 404)["code"] == "job_not_found"
        assert error_of(http.post("/jobs/nope/cancel"), 404)["code"] == "job_not_found"
        assert error_of(http.get("/jobs/nope/events"), 404)["code"] == "job_not_found"
        assert error_of(http.get("/no/such/route"), 404)["code"] == "not_found"
        bad_state = error_of(http.get("/jobs", params={"state": "DONE"}), 422)
        assert (bad_state["field"], bad_state["code"]) == ("query.state", "invalid_parameter")


def test_runtime_failure_is_a_failed_job_with_a_reason(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    # 'region' holds words: the cast can only fail on the workers, at run time.
    spec = base_spec(sample_data, tmp_path, steps=[{"op": "assign", "column": "r", "expr": "cast(region, 'int64')"}])
    with service.client() as client:
        job = wait_terminal(client, client.submit(spec).id)
        assert job.state == JobStatus.FAILED and job.error is not None
        assert job.error.code == "job_failed" and ("north" in job.error.message or "int" in job.error.message)
        assert job.result is None
        with pytest.raises(Exception, match="409"):
            client.cancel(job.id)
    assert not (tmp_path / "out").exists()


def test_a_polars_panic_is_a_failed_job_not_a_wait(service: ServiceProcess, tmp_path: Path) -> None:
    """A date past the range of the datetimes it is read as makes Polars panic (a BaseException, which a Dask
    task did not report: the job stayed RUNNING until its timeout). It is now the job's failure, with Polars' words."""
    days = pa.array([18262, 2**31 - 1], pa.int32()).cast(pa.date32())  # 2020-01-01 and a day ~5.9 million years on
    pq.write_table(pa.table({"id": [1, 2], "day": days}), tmp_path / "days.parquet")
    spec = {"name": "far_dates", "engine": "polars", "source": {"format": "parquet", "path": str(tmp_path / "days.parquet")},
            "sink": {"path": str(tmp_path / "out")}}
    with service.client() as client:
        job = wait_terminal(client, client.submit(spec).id, timeout=60)
    assert job.state == JobStatus.FAILED and job.error is not None
    assert job.error.code == "job_failed" and "internal error" in job.error.message and "range" in job.error.message, job.error
    assert not (tmp_path / "out").exists()


def test_failed_job_logs_carry_the_worker_traceback(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = base_spec(sample_data, tmp_path, steps=[{"op": "assign", "column": "r", "expr": "cast(region, 'int64')"}])
    with service.client() as client:
        job = wait_terminal(client, client.submit(spec).id)
    with httpx.Client(base_url=service.url) as http:
        lines = http.get(f"/jobs/{job.id}/logs").json()["lines"]
    text = "\n".join(lines)
    assert job.state == JobStatus.FAILED
    assert "RUNNING on LocalCluster" in text and "Traceback" in text and "FAILED" in text
    # pandas' astype on the Dask engine, Polars' "conversion from `str` to `i64`" on Polars
    assert "astype" in text or "int64" in text or "i64" in text, "the worker-side frames are in the traceback"
    assert sum(len(line) for line in lines) <= 64 * 1024 + 100


def test_an_unknown_engine_is_a_422_naming_the_field(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, engine="spark")), 422)
    assert error["field"] == "engine" and "polars" in error["message"] and "dask" in error["message"], error


@pytest.mark.parametrize(("steps", "field"), [
    ([{"op": "assign", "column": "__spillway_row", "expr": "amount + 1"}], "steps[0]"),
    ([{"op": "rename", "columns": {"amount": "__spillway_one"}}], "steps[0]"),
    ([{"op": "filter", "expr": "amount > 0"},
      {"op": "groupby", "by": ["region"], "aggs": {"__spillway_peer": {"func": "sum", "column": "amount"}}}], "steps[1]"),
])
def test_a_column_named_like_the_engines_working_columns_is_a_422(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, steps: list[dict[str, Any]], field: str,
) -> None:
    """A window step's row index and ones (and a join's row numbers) are `__spillway_` columns: a user's column of that
    name made the window step fail with a DuplicateError; now it is refused at submit, naming the step."""
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, steps=steps)), 422)
    assert error["code"] == "invalid_spec" and error["field"] == field and "__spillway_" in error["message"]


@pytest.mark.parametrize(("steps", "field"), [
    ([{"op": "rename", "columns": {"amount": "x\u0000y"}}], "steps[0]"),
    ([{"op": "assign", "column": "a\u0000", "expr": "amount + 1"}], "steps[0]"),
])
def test_a_column_name_with_a_nul_byte_is_a_422(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, steps: list[dict[str, Any]], field: str,
) -> None:
    """Accepted, such a name made Polars panic as it wrote the result (a C string), after all the work."""
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, steps=steps)), 422)
    assert error["code"] == "invalid_spec" and error["field"] == field and "NUL byte" in error["message"]


def test_a_sql_output_column_with_a_nul_byte_is_a_422(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = {"sources": {"sales": {"format": "parquet", "path": str(sample_data["sales"])},
                        "q": {"sql": 'SELECT region AS "r\u0000x" FROM sales'}},
            "source": "q", "sink": {"path": str(tmp_path / "out")}, "engine": "polars"}
    error = error_of(post(service, json=spec), 422)
    assert error["field"] == "sources.q" and "NUL byte" in error["message"], error


def test_a_source_column_named_like_the_engines_working_columns_is_a_422(service: ServiceProcess, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "reserved.parquet"
    pq.write_table(pa.table({"g": [1, 1, 2], "__spillway_row": [9, 9, 9]}), path)
    spec = {"source": {"format": "parquet", "path": str(path)},
            "steps": [{"op": "window", "partition_by": ["g"], "columns": {"n": {"func": "count", "column": "g"}}}],
            "sink": {"path": str(tmp_path / "out")}}
    error = error_of(post(service, json=spec), 422)
    assert error["field"] == "source" and "rename it in the files" in error["message"]
