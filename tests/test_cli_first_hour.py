"""A user's first hour (issue 17): the CLI and SDK against the live service, through real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from spillway.service.cli_common import plural
from spillway.service.client import SpecFileError, SpillwayClient, load_spec
from tests.conftest import ROOT, ServiceProcess, wait_for

CLI = [sys.executable, "-m", "spillway"]
ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
SERVER_LIBRARIES = ("fastapi", "sqlalchemy", "dask", "distributed", "pandas", "uvicorn", "polars")


def spillway(service: ServiceProcess | None, *args: str) -> subprocess.CompletedProcess[str]:
    url = ["--url", service.url] if service is not None else []
    return subprocess.run([*CLI, *args, *url], cwd=ROOT, capture_output=True, text=True, timeout=180, env=ENV)


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def groupby_spec(sample_data: dict[str, Path], out: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "first_hour",
        "source": {"format": "parquet", "path": str(sample_data["sales"])},
        "steps": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}}}, {"op": "sort", "by": ["region"]}],
        "sink": {"path": str(out)},
        **extra,
    }


def job_id_of(stdout: str) -> str:
    return stdout.split("submitted ")[1].split()[0]


def imported_modules(*args: str) -> set[str]:
    done = subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"})
    return {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_client_commands_load_no_server_library(service: ServiceProcess) -> None:
    # The start-up time itself is measured in bench/cli_startup.py; here: what makes it slow stays out.
    for args in (["--help"], ["pipeline", "--help"], ["list", "--url", service.url], ["status", "nope", "--url", service.url]):
        loaded = imported_modules(*args)
        assert "typer" in loaded, args
        assert not loaded & set(SERVER_LIBRARIES), (args, loaded & set(SERVER_LIBRARIES))


def test_pipeline_help_keeps_brackets() -> None:
    for args in (["pipeline", "--help"], ["pipeline", "backfill", "--help"]):
        done = spillway(None, *args)
        assert done.returncode == 0, done.stderr
        assert "every interval starting in [start, end]" in done.stdout


def test_unknown_op_is_worded_as_rest_words_it(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = groupby_spec(sample_data, tmp_path / "out")
    spec["steps"][0]["op"] = "group_by"
    rest = httpx.post(f"{service.url}/jobs", json=spec).json()["error"]
    assert rest["code"] == "unknown_step" and rest["field"] == "steps[0].op"
    assert "did you mean 'groupby'?" in rest["message"]

    done = spillway(service, "submit", str(write_spec(tmp_path / "bad.yaml", spec)))
    assert done.returncode == 2
    assert rest["message"] in " ".join(done.stderr.split())  # rich may wrap the line
    assert "Input tag" not in done.stderr

    with pytest.raises(SpecFileError) as info:
        load_spec(tmp_path / "bad.yaml")
    assert info.value.details[0].model_dump(exclude_none=True) == rest


def test_sdk_load_spec_reads_yaml_1_2(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    # Written by hand: `on:` unquoted, as users write it (yaml.safe_load would make it True).
    spec_file = tmp_path / "join.yaml"
    spec_file.write_text(
        f"name: sdk_join\n"
        f"source: {{format: parquet, path: {sample_data['sales']}}}\n"
        f"steps:\n"
        f"  - {{op: join, right: {{format: csv, path: {sample_data['products']}}}, on: [product_id]}}\n"
        f"  - {{op: groupby, by: [category], aggs: {{n: {{func: size}}}}}}\n"
        f"sink: {{path: {tmp_path / 'out'}}}\n"
    )
    spec = load_spec(spec_file)
    assert spec.steps[0].on == ["product_id"]  # type: ignore[union-attr]
    with SpillwayClient(service.url) as client:
        accepted = client.submit_file(spec_file)
        job = client.wait(accepted.id, timeout=120)
        assert job.state.value == "SUCCEEDED", job.error
        assert client.head(accepted.id, 2).num_rows == 2
        assert client.logs(accepted.id)  # the service's events at least


def test_logs_result_head_list_state(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path / "job.yaml", groupby_spec(sample_data, tmp_path / "out"))
    done = spillway(service, "submit", str(spec_file), "--wait")
    assert done.returncode == 0, done.stderr
    job_id = job_id_of(done.stdout)

    head = spillway(service, "result", job_id, "--head", "2")
    assert head.returncode == 0, head.stderr
    assert "first 2 rows of 5" in head.stdout and "region" in head.stdout
    assert "east" in head.stdout and "north" in head.stdout and "west" not in head.stdout  # sorted by region

    with SpillwayClient(service.url) as client:
        lines = client.logs(job_id)
    logs = spillway(service, "logs", job_id)
    assert logs.returncode == 0, logs.stderr
    assert lines and lines[0].split()[0] in logs.stdout

    listing = spillway(service, "list", "--state", "succeeded", "--limit", "100")
    assert listing.returncode == 0, listing.stderr
    assert job_id in listing.stdout and "jobs" in listing.stdout.splitlines()[0]


def test_plural_wording() -> None:
    assert (plural(1, "job"), plural(0, "job"), plural(2, "file")) == ("1 job", "0 jobs", "2 files")


def test_submit_set_overrides_a_field(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path / "job.yaml", groupby_spec(sample_data, tmp_path / "out"))
    assert spillway(service, "submit", str(spec_file), "--wait").returncode == 0
    again = spillway(service, "submit", str(spec_file), "--wait")
    assert again.returncode == 2 and "sink_exists" in again.stderr
    overwrite = spillway(service, "submit", str(spec_file), "--wait", "--set", "sink.mode=overwrite", "--set", "name=second")
    assert overwrite.returncode == 0, overwrite.stderr
    assert "(second)" in overwrite.stdout


def test_a_set_value_that_is_not_yaml_is_one_line_naming_it(sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path / "job.yaml", groupby_spec(sample_data, tmp_path / "out"))
    refused = spillway(None, "validate", str(spec_file), "--set", "sink.path=[1,2")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "--set sink.path" in refused.stderr and "'[1,2'" in refused.stderr and "not YAML" in refused.stderr


def test_ctrl_c_detaches_and_wait_reattaches(service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path) -> None:
    heavy = {
        "name": "long_one",
        "engine": "dask",
        "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "sort", "by": ["amount"]}, {"op": "sort", "by": ["order_id"]}],
        "sink": {"path": str(tmp_path / "out")},
    }
    spec_file = write_spec(tmp_path / "heavy.yaml", heavy)
    follower = subprocess.Popen(
        [*CLI, "submit", str(spec_file), "--wait", "--url", service.url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    assert follower.stdout is not None
    first = follower.stdout.readline()  # "submitted <id> (long_one)", printed before following
    job_id = job_id_of(first)
    with SpillwayClient(service.url) as client:
        wait_for(lambda: client.get(job_id).state.value == "RUNNING", timeout=60, what="the job to run")
        follower.send_signal(signal.SIGINT)
        _, stderr = follower.communicate(timeout=60)
        assert follower.returncode == 130, stderr
        assert "the job keeps running" in stderr
        assert f"spillway wait {job_id}" in stderr and f"spillway cancel {job_id}" in stderr
        assert client.get(job_id).state.value in ("RUNNING", "SUCCEEDED")  # not cancelled by the Ctrl-C

    reattached = spillway(service, "wait", job_id)
    assert reattached.returncode == 0, reattached.stderr
    # The heavy job's 1,200,000 rows, not the small sample's; a bare "40,000" check matched file sizes such as 1,240,000.
    assert "result:" in reattached.stdout and "1,200,000" in reattached.stdout


def test_demo_jobs_are_seen_by_serve_and_readme_submit_works(tmp_path: Path, sample_data: dict[str, Path]) -> None:
    """README, "Using it", after `make demo`: the demo's job is listed and the same spec can be submitted."""
    database = f"sqlite:///{tmp_path / 'spillway.db'}"
    env = {
        **os.environ,
        "COLUMNS": "200",
        "SPILLWAY_DATABASE_URL": database,
        "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]',
        "SPILLWAY_CLUSTER__BACKEND": "pandas",
        "SPILLWAY_CLUSTER__N_WORKERS": "1",
        "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "",
    }
    workdir = tmp_path / "demo"
    spec_file = write_spec(tmp_path / "demo.yaml", groupby_spec({"sales": workdir / "data" / "sales"}, workdir / "out" / "by_region"))
    demo = subprocess.run([*CLI, "demo", "--rows", "20000", "--workdir", str(workdir), "--spec", str(spec_file)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    demo_job = job_id_of(demo.stdout)

    from spillway.service.launcher import launch_service

    served = launch_service(tmp_path / "serve", {k: v for k, v in env.items() if k.startswith("SPILLWAY_")})
    try:
        listing = spillway(served, "list")
        assert demo_job in listing.stdout, listing.stdout
        readme = spillway(served, "submit", str(spec_file), "--wait", "--set", "sink.mode=overwrite")
        assert readme.returncode == 0, readme.stderr
    finally:
        served.stop()
    assert json.loads((workdir / "out" / "by_region" / "_manifest.json").read_text())["version"] == 2


def test_the_cli_s_copies_of_the_state_names_are_the_service_s() -> None:
    """The CLI spells the states out so that --help imports no pydantic model; they must not drift."""
    from spillway.jobs.status import JobStatus
    from spillway.service.cli import JOB_STATES
    from spillway.service.cli_pipelines import RUN_STATES
    from spillway.service.pipelines.models import RunState

    assert JOB_STATES == tuple(state.value for state in JobStatus)
    assert RUN_STATES == tuple(state.value for state in RunState)


def test_submit_with_the_same_idempotency_key_twice_is_one_job(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    """A nightly script that submits again after a timeout, with its own key, gets the job of the first submit."""
    spec_file = write_spec(tmp_path / "job.yaml", groupby_spec(sample_data, tmp_path / "out"))
    first = spillway(service, "submit", str(spec_file), "--idempotency-key", "nightly-sales-2026-12-05")
    again = spillway(service, "submit", str(spec_file), "--idempotency-key", "nightly-sales-2026-12-05")
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    assert job_id_of(first.stdout) == job_id_of(again.stdout)


def test_a_spec_file_that_is_not_utf8_is_named_without_a_traceback(service: ServiceProcess, tmp_path: Path) -> None:
    spec_file = tmp_path / "latin1.yaml"
    spec_file.write_bytes("name: caf\xe9\n".encode("latin-1"))
    answer = spillway(service, "submit", str(spec_file))
    assert answer.returncode != 0 and "is not UTF-8 text" in answer.stderr and "Traceback" not in answer.stderr, answer.stderr


def test_ctrl_c_before_the_submit_is_answered_says_how_to_submit_again_safely(sample_data: dict[str, Path], tmp_path: Path) -> None:
    """A service that takes the connection and has not answered yet (busy checking a large source): the job may exist."""
    import re
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    spec_file = write_spec(tmp_path / "job.yaml", groupby_spec(sample_data, tmp_path / "out"))
    try:
        submitting = subprocess.Popen([*CLI, "submit", str(spec_file), "--url", url], cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=ENV)
        connection, _ = listener.accept()  # the CLI is waiting for an answer now
        try:
            wait_for(lambda: connection.recv(65536, socket.MSG_PEEK), timeout=30, what="the POST")
            # Signalled between its send and its poll, Python runs the handler only once poll returns (300 s, the submit
            # timeout): a race of the test, not of a person's Ctrl-C. So wait until the CLI is blocked in the poll.
            wait_for(lambda: "poll" in Path(f"/proc/{submitting.pid}/wchan").read_text(), timeout=30, what="the CLI to wait in poll")
            submitting.send_signal(signal.SIGINT)
            _, stderr = submitting.communicate(timeout=60)
        finally:
            connection.close()
    finally:
        listener.close()
    assert submitting.returncode == 130, stderr
    assert "may have been created" in stderr and "Traceback" not in stderr, stderr
    assert re.search(rf"spillway submit {re.escape(str(spec_file))} --idempotency-key [0-9a-f]{{32}} --url {re.escape(url)}", stderr), stderr
