"""The README's example pipeline through the CLI on the live service: its run sums its own day only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from spillway.service.pipelines.client import PipelineClient
from tests.conftest import ROOT, ServiceProcess, wait_for


def spillway(service: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spillway", *args, "--url", service.url], cwd=ROOT, capture_output=True, text=True, timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    )


def test_nightly_revenue_sums_the_day_of_its_logical_date(service: ServiceProcess, sample_data: dict[str, Path], sales_frame: pd.DataFrame, tmp_path: Path) -> None:
    text = (ROOT / "examples" / "nightly_revenue_pipeline.yaml").read_text()
    text = text.replace("var/demo/data/sales/*.parquet", f"{sample_data['sales']}/*.parquet").replace("var/demo/out", str(tmp_path / "out"))
    text = text.replace("name: nightly_revenue", "name: nightly_revenue_example")
    (tmp_path / "pipeline.yaml").write_text(text)
    created = spillway(service, "pipeline", "create", str(tmp_path / "pipeline.yaml"))
    assert created.returncode == 0, created.stderr
    triggered = spillway(service, "pipeline", "trigger", "nightly_revenue_example", "--date", "2026-03-05")
    assert triggered.returncode == 0, triggered.stderr

    with PipelineClient(service.url) as client:
        run = wait_for(lambda: next((r for r in client.runs("nightly_revenue_example").items if r.state.is_terminal()), None), timeout=120, what="the run")
    assert run.state.value == "SUCCEEDED", run.reason
    got = pd.read_parquet(tmp_path / "out" / "nightly" / "2026-03-05").set_index("region")["revenue"].sort_index()

    day = sales_frame[(sales_frame.ts >= "2026-03-05") & (sales_frame.ts < "2026-03-06") & (sales_frame.amount > 0) & (sales_frame.region != "test")]
    expected = day.groupby("region")["amount"].sum().sort_index()
    assert len(day) < len(sales_frame) / 100  # one day of a year, not all of it
    pd.testing.assert_series_equal(got, expected, check_names=False, check_dtype=False, check_index_type=False, rtol=1e-9)
