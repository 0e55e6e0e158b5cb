"""The CLI, through the SDK, against the live service."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT, ServiceProcess


def spillway(service: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spillway", *args, "--url", service.url] if args[0] != "--help" else [sys.executable, "-m", "spillway", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_submit_wait_prints_manifest_then_status_result_list(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "name": "cli_job",
                "source": {"format": "parquet", "path": str(sample_data["sales"])},
                "steps": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}}}],
                "sink": {"path": str(tmp_path / "out")},
            }
        )
    )
    done = spillway(service, "submit", str(spec_file), "--wait")
    assert done.returncode == 0, done.stderr
    assert "result:" in done.stdout and str(tmp_path / "out") in done.stdout
    job_id = done.stdout.split("submitted ")[1].split()[0]

    status = spillway(service, "status", job_id)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout
    assert "engine: polars on cpu" in status.stdout  # the service's default, auto, picks Polars for local files
    assert "read source" in status.stdout and " MiB" in status.stdout  # what the Polars engine's read stage counts
    result = spillway(service, "result", job_id, "--json")
    manifest = json.loads(result.stdout)
    assert manifest["total_rows"] == 5  # north, south, east, west, test
    listing = spillway(service, "list", "--state", "SUCCEEDED")
    assert listing.returncode == 0 and job_id in listing.stdout
    cancel = spillway(service, "cancel", job_id)
    assert cancel.returncode == 1 and "already SUCCEEDED" in cancel.stderr


def test_malformed_yaml_is_a_clear_error(service: ServiceProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: [unclosed\n")
    result = spillway(service, "submit", str(bad))
    assert result.returncode == 2
    assert "is not valid YAML" in result.stderr


def test_invalid_spec_file_names_the_field(service: ServiceProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: {format: parquet, path: x}\nsteps: [{op: limit, n: many}]\nsink: {path: y}\n")
    result = spillway(service, "submit", str(bad))
    assert result.returncode == 2
    assert "steps[0].n" in result.stderr


def test_server_side_rejection_exit_code(service: ServiceProcess, tmp_path: Path) -> None:
    spec = tmp_path / "missing.json"
    spec.write_text(json.dumps({"source": {"format": "parquet", "path": str(tmp_path / "nope")}, "sink": {"path": str(tmp_path / "o")}}))
    result = spillway(service, "submit", str(spec))
    assert result.returncode == 2
    assert "source_not_found" in result.stderr and "source.path" in result.stderr


def test_help_teaches(service: ServiceProcess) -> None:
    result = spillway(service, "--help")
    assert result.returncode == 0
    for command in ("submit", "status", "list", "cancel", "result", "serve", "demo"):
        assert command in result.stdout
