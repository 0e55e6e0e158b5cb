"""``GET /jobs/{id}/result?head=N`` through the live service: the manifest's first rows as JSON."""

from __future__ import annotations

import datetime as dt
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from spillway.jobs.status import JobStatus
from spillway.service.launcher import ServiceProcess
from spillway.service.routes.result import _json_value
from tests.conftest import wait_terminal


def _succeeded(service: ServiceProcess, spec: dict[str, Any]) -> str:
    with service.client() as client:
        job_id = client.submit(spec).id
        job = wait_terminal(client, job_id)
    assert job.state == JobStatus.SUCCEEDED, job.error
    return job_id


def test_head_is_the_first_rows_of_the_manifest(service: ServiceProcess, sample_data: dict[str, Path], sales_frame: pd.DataFrame, tmp_path: Path) -> None:
    spec = {
        "name": "preview-sorted",
        "source": {"format": "parquet", "path": str(sample_data["sales"] / "*.parquet")},
        "steps": [{"op": "sort", "by": ["order_id"], "descending": True}, {"op": "select", "columns": ["order_id", "ts", "region", "discount"]}],
        "sink": {"path": str(tmp_path / "out")},
    }
    job_id = _succeeded(service, spec)
    answer = httpx.get(f"{service.url}/jobs/{job_id}/result", params={"head": 7})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [c["name"] for c in body["columns"]] == ["order_id", "ts", "region", "discount"]
    assert body["total_rows"] == len(sales_frame) and len(body["rows"]) == 7
    expected = sales_frame.sort_values("order_id", ascending=False).head(7)
    assert [row[0] for row in body["rows"]] == expected["order_id"].tolist()
    assert [row[1] for row in body["rows"]] == [t.isoformat() for t in expected["ts"]]  # timestamps as ISO text
    assert [row[2] for row in body["rows"]] == expected["region"].tolist()
    assert [row[3] for row in body["rows"]] == [None if pd.isna(d) else d for d in expected["discount"]]
    # The same rows as the SDK's head(), which reads the files on the client's side.
    with service.client() as client:
        assert client.head(job_id, 7).column("order_id").to_pylist() == [row[0] for row in body["rows"]]

    assert len(httpx.get(f"{service.url}/jobs/{job_id}/result").json()["rows"]) == 20  # the default


def test_partition_columns_come_from_the_paths(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = {
        "name": "preview-partitioned",
        "source": {"format": "parquet", "path": str(sample_data["sales"] / "*.parquet")},
        "steps": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}}}],
        "sink": {"path": str(tmp_path / "out"), "partition_on": ["region"]},
    }
    body = httpx.get(f"{service.url}/jobs/{_succeeded(service, spec)}/result", params={"head": 100}).json()
    names = [c["name"] for c in body["columns"]]
    assert set(names) == {"region", "n"}
    regions = sorted(row[names.index("region")] for row in body["rows"])
    assert regions == ["east", "north", "south", "test", "west"]


def test_a_csv_sink_reads_back_the_same_rows_as_the_sdk(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = {
        "name": "preview-csv",
        "source": {"format": "parquet", "path": str(sample_data["sales"] / "*.parquet")},
        "steps": [{"op": "sort", "by": ["order_id"]}, {"op": "select", "columns": ["order_id", "region", "amount"]}],
        "sink": {"path": str(tmp_path / "csv"), "format": "csv"},
    }
    job_id = _succeeded(service, spec)
    body = httpx.get(f"{service.url}/jobs/{job_id}/result", params={"head": 5}).json()
    with service.client() as client:
        head = client.head(job_id, 5)
    assert [c["name"] for c in body["columns"]] == ["order_id", "region", "amount"]
    assert body["rows"] == [list(r.values()) for r in head.to_pylist()] and [r[0] for r in body["rows"]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("head", ["0", "1001", "ten"])
def test_head_out_of_range_is_a_422_naming_it(service: ServiceProcess, head: str) -> None:
    answer = httpx.get(f"{service.url}/jobs/nosuchjob/result", params={"head": head})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "query.head", answer.text


def test_no_rows_for_a_missing_failed_or_deleted_result(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    missing = httpx.get(f"{service.url}/jobs/nosuchjob/result")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "job_not_found"

    failing = {  # passes the checks at submit, fails in a worker: int64 overflow
        "name": "preview-failed",
        "source": {"format": "parquet", "path": str(sample_data["sales"] / "*.parquet")},
        "steps": [{"op": "assign", "column": "big", "expr": "order_id * 9223372036854775807"}],
        "sink": {"path": str(tmp_path / "failed")},
    }
    with service.client() as client:
        job = wait_terminal(client, client.submit(failing).id)
    assert job.state == JobStatus.FAILED, job.state
    answer = httpx.get(f"{service.url}/jobs/{job.id}/result")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "no_result"
    assert "FAILED" in answer.json()["error"]["message"]

    out = tmp_path / "gone"
    job_id = _succeeded(service, {**failing, "name": "preview-gone", "steps": [], "sink": {"path": str(out)}})
    shutil.rmtree(out)
    gone = httpx.get(f"{service.url}/jobs/{job_id}/result")
    assert gone.status_code == 409 and "gone" in gone.json()["error"]["message"], gone.text


def test_values_json_cannot_hold_come_as_text() -> None:
    assert _json_value(float("nan")) == "nan" and _json_value(float("-inf")) == "-inf" and _json_value(1.5) == 1.5
    assert _json_value(dt.date(2026, 1, 2)) == "2026-01-02" and _json_value(dt.datetime(2026, 1, 2, 3, 4)) == "2026-01-02T03:04:00"
    assert _json_value(Decimal("1.10")) == "1.10" and _json_value(b"\x00\xff") == "AP8="
    assert _json_value([1, float("nan"), {"k": dt.timedelta(seconds=90)}]) == [1, "nan", {"k": "0:01:30"}]
    assert _json_value(True) is True and _json_value(None) is None
