"""``spillway validate`` and ``POST /jobs:validate``: the checks of a submit and the engine choice, no job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from spillway.service.client import SpillwayClient
from tests.conftest import ROOT, ServiceProcess


def spillway(service: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spillway", *args, "--url", service.url], cwd=ROOT, capture_output=True, text=True, timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    )


def spec(sample_data: dict[str, Path], out: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "checked",
        "source": {"format": "parquet", "path": str(sample_data["sales"])},
        "steps": [{"op": "groupby", "by": ["region"], "aggs": {"revenue": {"func": "sum", "column": "amount"}}}],
        "sink": {"path": str(out)},
        **extra,
    }


def test_validate_reports_engine_and_columns_and_creates_no_job(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(spec(sample_data, tmp_path / "out", engine="dask")))
    with SpillwayClient(service.url) as client:
        before = client.list(limit=1).total
        done = spillway(service, "validate", str(spec_file))
        assert done.returncode == 0, done.stderr
        assert "checked is valid; nothing was run" in done.stdout
        assert "engine: dask on the cpu (engine: dask — the spec asks for it)" in done.stdout
        assert "output: region: string, revenue: numeric" in done.stdout
        report = client.validate(spec(sample_data, tmp_path / "out"))
        assert report.valid and report.engine.engine in ("polars", "dask") and report.engine.reason
        assert list(report.columns) == ["region", "revenue"]
        assert [(i.field, i.files) for i in report.inputs] == [("source", 4)] and report.inputs[0].bytes > 0
        assert [(st.field, st.op, list(st.columns)) for st in report.steps] == [("steps[0]", "groupby", ["region", "revenue"])]
        explained = spillway(service, "explain", str(spec_file))
        assert explained.returncode == 0, explained.stderr
        assert "engine dask on the cpu" in explained.stdout and "4 files" in explained.stdout
        assert "steps[0]   groupby         → region: string, revenue: numeric" in explained.stdout
        assert client.list(limit=1).total == before  # nothing stored
    assert not (tmp_path / "out").exists()  # nothing written


def test_validate_fails_as_submit_fails(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    bad = spec(sample_data, tmp_path / "out")
    bad["steps"][0]["aggs"]["revenue"]["column"] = "amout"
    answers = [httpx.post(f"{service.url}{path}", json=bad) for path in ("/jobs:validate", "/jobs")]
    assert [a.status_code for a in answers] == [422, 422]
    assert answers[0].json() == answers[1].json()
    assert answers[0].json()["error"]["code"] == "unknown_column"

    spec_file = tmp_path / "bad.yaml"
    spec_file.write_text(yaml.safe_dump(bad))
    done = spillway(service, "validate", str(spec_file))
    assert done.returncode == 2 and "unknown_column" in done.stderr and "amout" in done.stderr

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "part.parquet").write_bytes(b"x")
    answer = httpx.post(f"{service.url}/jobs:validate", json=spec(sample_data, taken))
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "sink_exists"
