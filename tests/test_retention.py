"""Retention (issue 18 item 5): delete a job and optionally its output, prune old jobs, bound run history.

The store tests run on SQLite and, with SPILLWAY_TEST_POSTGRES_URL set, on PostgreSQL. The
service tests run a real service (auth on, a real Dask cluster, SQLite) and real files; the
retention pass runs every half second there, against job rows whose finish is moved back.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import JobNotFound
from spillway.jobs.sandbox import PathNotAllowed
from spillway.jobs.sink_delete import OutputSuperseded, delete_output
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus, ResultFile, ResultManifest
from spillway.service.pipelines import PipelineStore
from spillway.service.pipelines.models import RunState, RunTrigger
from spillway.service.pipelines.runs import NewRun
from spillway.service.pipelines.tables import attempts_table, runs_table
from spillway.service.retention import JobActive, RetentionTask, delete_job, prune_jobs, prune_runs
from spillway.service.store import JobStore
from tests.conftest import ROOT, ServiceProcess, start_service, wait_for
from tests.test_auth import call
from tests.test_pipelines_fakes import pipeline, spec_template

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _spec(tmp: Path, name: str = "out") -> JobSpec:
    return JobSpec.model_validate({"source": {"format": "parquet", "path": str(tmp / "in.parquet")}, "sink": {"path": str(tmp / name)}})


# --- the store: delete and prune ---------------------------------------------------------------


def test_delete_refuses_active_jobs_and_other_owners(database_url: str, tmp_path: Path) -> None:
    store = JobStore(database_url)
    try:
        job, _ = store.create(_spec(tmp_path), "pandas", owner="alice#1")
        with pytest.raises(JobActive, match="cancel it first"):
            delete_job(store, job.id, owner="alice#1")
        store.transition(job.id, JobStatus.RUNNING)
        with pytest.raises(JobActive):
            delete_job(store, job.id)
        store.finish(job.id, JobStatus.FAILED)
        with pytest.raises(JobNotFound):  # bob's token: as if there were no such job
            delete_job(store, job.id, owner="bob#2")
        assert delete_job(store, job.id, owner="alice#1").state == JobStatus.FAILED
        with pytest.raises(JobNotFound):
            store.get(job.id)
        with pytest.raises(JobNotFound):
            delete_job(store, job.id)
    finally:
        store.close()


def test_prune_deletes_only_terminal_jobs_finished_before_the_cutoff(database_url: str, tmp_path: Path) -> None:
    clock = Clock(T0)
    store = JobStore(database_url, clock=clock)
    try:
        old_done, _ = store.create(_spec(tmp_path, "a"), "pandas")
        old_running, _ = store.create(_spec(tmp_path, "b"), "pandas")
        store.transition(old_done.id, JobStatus.RUNNING)
        store.transition(old_running.id, JobStatus.RUNNING)
        store.finish(old_done.id, JobStatus.SUCCEEDED)
        store.save_logs(old_done.id, ["a line"])
        clock.now = T0 + timedelta(days=10)
        recent, _ = store.create(_spec(tmp_path, "c"), "pandas")
        store.transition(recent.id, JobStatus.CANCELLED)
        pending, _ = store.create(_spec(tmp_path, "d"), "pandas")

        assert prune_jobs(store, T0 + timedelta(days=3)) == 1
        left = {j.id for j in store.list(limit=10)[0]}
        assert left == {old_running.id, recent.id, pending.id}
        assert prune_jobs(store, T0 + timedelta(days=3)) == 0  # idempotent: every replica may run it
    finally:
        store.close()


def test_run_history_keeps_the_newest_finished_runs_and_every_active_one(database_url: str) -> None:
    store = PipelineStore(database_url, clock=Clock(T0))
    try:
        record = store.create(pipeline("hourly"))
        other = store.create(pipeline("other"))
        hours = [T0 + timedelta(hours=h) for h in range(6)]
        states = [RunState.SUCCEEDED, RunState.FAILED, RunState.QUEUED, RunState.SKIPPED, RunState.SUCCEEDED, RunState.CANCELLED]
        runs = [NewRun(h, h + timedelta(hours=1), s, RunTrigger.SCHEDULED, 1, {}) for h, s in zip(hours, states)]
        store.runs.insert(record.id, runs, now=T0)
        store.runs.insert(other.id, runs[:2], now=T0)
        with store.engine.begin() as conn:
            first = conn.execute(runs_table.select().where(runs_table.c.pipeline_id == record.id, runs_table.c.logical_date == hours[0])).mappings().one()
            conn.execute(attempts_table.insert().values(run_id=first["id"], attempt=1, state="SUCCEEDED", created_at=T0))

        assert prune_runs(store, keep=3) == 2  # hours 0 and 1; 3 (SKIPPED), 4, 5 stay, and the QUEUED run 2
        page, total = store.runs.list(record.id, "hourly", limit=50)
        assert total == 4
        assert {r.logical_date for r in page} == {hours[2], hours[3], hours[4], hours[5]}
        assert store.runs.list(other.id, "other")[1] == 2  # under the bound: untouched
        with store.engine.connect() as conn:
            assert conn.execute(attempts_table.select().where(attempts_table.c.run_id == first["id"])).first() is None
        assert prune_runs(store, keep=3) == 0
    finally:
        store.close()


def test_a_retention_pass_with_both_settings_off_deletes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    jobs, pipelines = JobStore(url, clock=Clock(T0)), PipelineStore(url)
    try:
        job, _ = jobs.create(_spec(tmp_path), "pandas")
        jobs.transition(job.id, JobStatus.CANCELLED)
        task = RetentionTask(jobs, pipelines, retention_days=None, runs_kept=None, interval_s=1, clock=Clock(T0 + timedelta(days=999)))
        assert not task.enabled
        assert task.run_once().jobs == 0
        assert jobs.get(job.id).state == JobStatus.CANCELLED
        task.retention_days = 30
        assert task.run_once().jobs == 1
    finally:
        jobs.close()
        pipelines.close()


# --- output deletion on real files ---------------------------------------------------------------


def _write_sink(sink: Path, files: dict[str, bytes], job_id: str = "job1", version: int = 1) -> ResultManifest:
    """A committed sink as jobs.sink leaves it: data files, _manifest.json and _SUCCESS."""
    for relative, data in files.items():
        (sink / relative).parent.mkdir(parents=True, exist_ok=True)
        (sink / relative).write_bytes(data)
    manifest = ResultManifest(
        location=str(sink),
        files=[ResultFile(path=p, size_bytes=len(d), rows=1, job_id=job_id) for p, d in files.items()],
        total_rows=len(files),
        total_bytes=sum(len(d) for d in files.values()),
        columns=[],
        partition_on=["region"] if any("/" in p for p in files) else [],
        version=version,
    )
    (sink / "_manifest.json").write_text(manifest.model_dump_json())
    (sink / "_SUCCESS").write_text("")
    return manifest


def test_a_link_swapped_in_for_a_partition_folder_does_not_lead_the_deletion_outside(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (outside / "part.0.parquet").write_bytes(b"not yours")
    manifest = _write_sink(root / "sink", {"region=north/part.0.parquet": b"n", "region=south/part.0.parquet": b"s"})
    south = root / "sink" / "region=south"
    (south / "part.0.parquet").unlink()
    south.rmdir()
    south.symlink_to(outside)

    deleted = delete_output(manifest, "job1", [str(root)])

    assert (outside / "part.0.parquet").read_bytes() == b"not yours"
    assert deleted.files == 1 and "already gone" not in (deleted.note or ""), deleted.note  # it is not gone: it was left
    assert "1 left where a link or a folder now stands" in (deleted.note or "") and "region=south/part.0.parquet" in (deleted.note or "")
    assert sorted(p.name for p in (root / "sink").iterdir()) == ["region=south"]  # the link stays: not ours


def test_a_file_deleted_by_hand_is_said_gone_and_a_link_in_its_place_left(tmp_path: Path) -> None:
    root = tmp_path / "root"
    manifest = _write_sink(root / "sink", {"a.parquet": b"a", "b.parquet": b"b", "c.parquet": b"c"})
    (root / "sink" / "a.parquet").unlink()
    (root / "sink" / "b.parquet").unlink()
    (root / "sink" / "b.parquet").symlink_to(tmp_path / "elsewhere")

    deleted = delete_output(manifest, "job1", [str(root)])

    assert deleted.files == 1 and deleted.note == ("1 listed file(s) were already gone; 1 left where a link or a folder now stands in "
                                                   "place of the file (b.parquet): not the job's to remove")


def test_a_sink_outside_the_roots_is_refused(tmp_path: Path) -> None:
    manifest = _write_sink(tmp_path / "elsewhere" / "sink", {"part.0.parquet": b"x"})
    (tmp_path / "root").mkdir()
    with pytest.raises(PathNotAllowed):
        delete_output(manifest, "job1", [str(tmp_path / "root")])
    assert (tmp_path / "elsewhere" / "sink" / "part.0.parquet").exists()


def test_only_listed_files_go_and_a_later_commit_is_never_deleted(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    first = _write_sink(sink, {"part.000000.parquet": b"one"})
    (sink / "notes.txt").write_text("someone's notes")
    later = _write_sink(sink, {"part.000000.parquet": b"one", "part.job2.000000.parquet": b"two"}, job_id="job2", version=2)

    with pytest.raises(OutputSuperseded, match="version 2") as refused:
        delete_output(first, "job1", [str(tmp_path)])
    assert refused.value.field == "output"
    assert (sink / "part.000000.parquet").exists()

    deleted = delete_output(later, "job2", [str(tmp_path)])
    assert (deleted.files, deleted.bytes) == (2, 6)
    assert sorted(p.name for p in sink.iterdir()) == ["notes.txt"]
    assert delete_output(first, "job1", [str(tmp_path)]).files == 0  # no manifest any more: nothing to do


# --- through the real service ------------------------------------------------------------------------


TOKENS = {"alice": "submit", "bob": "submit", "reader": "read"}


def _token(service: ServiceProcess, name: str, scope: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "spillway", "token", "create", "--scope", scope, "--name", name],
        cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60, check=True,
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Auth on; data roots = one folder; jobs kept 1 day and 3 runs per pipeline, checked every 0.5 s."""
    workdir = tmp_path_factory.mktemp("retention")
    data = workdir / "data"
    data.mkdir()
    env = {
        "SPILLWAY_AUTH": "on",
        "SPILLWAY_ALLOWED_ROOTS": f'["{data}"]',
        "SPILLWAY_RETENTION_DAYS": "1",
        "SPILLWAY_RETENTION_INTERVAL_S": "0.5",
        "SPILLWAY_PIPELINE_RUNS_KEPT": "3",
    }
    service = start_service(workdir, extra_env=env)
    tokens = {name: _token(service, name, scope) for name, scope in TOKENS.items()}
    yield service, tokens, data, workdir / "spillway.db"
    service.stop()


@pytest.fixture(scope="module")
def sales(live: Any, sample_data: dict[str, Path]) -> Path:
    """The sample sales copied under the service's one data root."""
    import shutil

    target = live[2] / "sales"
    shutil.copytree(sample_data["sales"], target)
    return target


def _run(service: ServiceProcess, token: str, sales: Path, sink: Path, mode: str = "error", **spec: Any) -> dict[str, Any]:
    body = {"source": {"format": "parquet", "path": str(sales)}, "steps": [{"op": "limit", "n": 5}], "sink": {"path": str(sink), "mode": mode}, **spec}
    response = call(service, "POST", "/jobs", token, json=body)
    assert response.status_code == 202, response.text
    return _finished(service, token, response.json()["id"])


def _finished(service: ServiceProcess, token: str, job_id: str) -> dict[str, Any]:
    def terminal() -> dict[str, Any] | None:
        job = call(service, "GET", f"/jobs/{job_id}", token).json()
        return job if JobStatus(job["state"]).is_terminal() else None

    return wait_for(terminal, timeout=120, what=f"job {job_id} to finish")


def test_delete_a_running_job_is_409_until_it_is_cancelled(live: Any, sales: Path, big_data: dict[str, Path]) -> None:
    service, tokens, data, _ = live
    import shutil

    big = data / "big"
    if not big.exists():
        shutil.copytree(big_data["sales"], big)
    body = {"source": {"format": "parquet", "path": str(big)}, "steps": [{"op": "sort", "by": ["amount"]}], "sink": {"path": str(data / "big-out")}}
    job_id = call(service, "POST", "/jobs", tokens["alice"], json=body).json()["id"]

    refused = call(service, "DELETE", f"/jobs/{job_id}", tokens["alice"])
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "job_active" and "cancel it first" in refused.json()["error"]["message"]
    assert call(service, "POST", f"/jobs/{job_id}/cancel", tokens["alice"]).status_code in (200, 202)
    _finished(service, tokens["alice"], job_id)

    assert call(service, "DELETE", f"/jobs/{job_id}", tokens["bob"]).status_code == 404  # another owner's: as if missing
    assert call(service, "DELETE", f"/jobs/{job_id}", tokens["reader"]).status_code == 403
    deleted = call(service, "DELETE", f"/jobs/{job_id}", tokens["alice"])
    assert deleted.status_code == 200 and deleted.json() == {"id": job_id, "state": "CANCELLED", "output": None}
    assert call(service, "GET", f"/jobs/{job_id}", tokens["alice"]).status_code == 404
    assert call(service, "GET", f"/jobs/{job_id}/logs", tokens["alice"]).status_code == 404
    assert call(service, "DELETE", f"/jobs/{job_id}", tokens["alice"]).status_code == 404


def test_delete_with_output_removes_the_listed_files_and_refuses_after_a_later_append(live: Any, sales: Path) -> None:
    service, tokens, data, _ = live
    sink = data / "appended"
    first = _run(service, tokens["alice"], sales, sink)
    second = _run(service, tokens["alice"], sales, sink, mode="append")
    assert first["state"] == second["state"] == "SUCCEEDED", (first.get("error"), second.get("error"))
    (sink / "README.txt").write_text("kept: no manifest lists it")

    refused = call(service, "DELETE", f"/jobs/{first['id']}", tokens["alice"], params={"output": "true"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"] == {"code": "output_superseded", "field": "output", "message": refused.json()["error"]["message"]}
    assert second["id"] in refused.json()["error"]["message"]
    assert sum(pq.read_metadata(sink / f["path"]).num_rows for f in second["result"]["files"]) == 10 and call(service, "GET", f"/jobs/{first['id']}", tokens["alice"]).status_code == 200

    listed = {f["path"] for f in second["result"]["files"]}
    deleted = call(service, "DELETE", f"/jobs/{second['id']}", tokens["alice"], params={"output": "true"})
    assert deleted.status_code == 200, deleted.text
    output = deleted.json()["output"]
    assert output["files_deleted"] == len(listed) >= 2 and output["bytes_deleted"] == second["result"]["total_bytes"]
    assert sorted(os.listdir(sink)) == ["README.txt"]  # the data files, _manifest.json and _SUCCESS are gone

    # The earlier job's output went with the later one (its manifest listed both): nothing left to delete.
    again = call(service, "DELETE", f"/jobs/{first['id']}", tokens["alice"], params={"output": "true"})
    assert again.status_code == 200 and again.json()["output"]["files_deleted"] == 0
    assert "already deleted" in again.json()["output"]["note"]


def test_cli_delete_with_output_and_the_sdk(live: Any, sales: Path) -> None:
    service, tokens, data, _ = live
    sink = data / "cli-sink"
    job = _run(service, tokens["bob"], sales, sink)
    env = {**service.env, "SPILLWAY_TOKEN": tokens["bob"], "SPILLWAY_URL": service.url}
    result = subprocess.run([sys.executable, "-m", "spillway", "delete", job["id"], "--output"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"{job['id']}: deleted (SUCCEEDED)" in result.stdout and f"removed from {sink}" in result.stdout
    assert not sink.exists()  # emptied by the deletion, so removed

    failed = subprocess.run([sys.executable, "-m", "spillway", "delete", job["id"]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "404 job_not_found" in failed.stderr

    from spillway.service.client import ApiError, SpillwayClient

    kept = _run(service, tokens["bob"], sales, data / "sdk-sink")
    with SpillwayClient(service.url, token=tokens["bob"]) as client:
        assert client.delete(kept["id"]).output is None
        with pytest.raises(ApiError) as missing:
            client.delete(kept["id"])
    assert missing.value.status == 404
    assert (data / "sdk-sink" / "_manifest.json").exists()  # without output=true, the data stays


def test_the_service_prunes_jobs_finished_before_the_retention_period(live: Any, sales: Path) -> None:
    service, tokens, data, database = live
    old = _run(service, tokens["alice"], sales, data / "old-out")
    recent = _run(service, tokens["alice"], sales, data / "recent-out")
    with sqlite3.connect(database) as conn:  # as if it had finished two days ago
        conn.execute("UPDATE spillway_jobs SET finished_at = ? WHERE id = ?", ((datetime.now(timezone.utc) - timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S.%f"), old["id"]))
    wait_for(lambda: call(service, "GET", f"/jobs/{old['id']}", tokens["alice"]).status_code == 404, timeout=30, what="the old job to be pruned")
    assert call(service, "GET", f"/jobs/{recent['id']}", tokens["alice"]).status_code == 200
    assert (data / "old-out" / "_manifest.json").exists()  # retention deletes records and logs, never data


def test_the_service_keeps_pipeline_run_history_within_its_bound(live: Any) -> None:
    service, tokens, data, database = live
    source = {"format": "parquet", "path": f"{data}/daily/{{{{ ds }}}}/*.parquet"}
    body = pipeline("bounded", paused=True, spec=spec_template(source=source, sink={"path": f"{data}/daily-out/{{{{ ds_nodash }}}}"})).model_dump(mode="json")
    assert call(service, "POST", "/pipelines", tokens["alice"], json=body).status_code == 201
    store = PipelineStore(f"sqlite:///{database}")
    try:
        record = store.get("bounded")
        days = [T0 + timedelta(days=d) for d in range(5)]
        store.runs.insert(record.id, [NewRun(d, d + timedelta(days=1), RunState.SUCCEEDED, RunTrigger.BACKFILL, 1, {}) for d in days], now=T0)
    finally:
        store.close()

    def kept() -> list[str] | None:
        runs = call(service, "GET", "/pipelines/bounded/runs", tokens["alice"]).json()["items"]
        return [r["logical_date"] for r in runs] if len(runs) == 3 else None

    dates = wait_for(kept, timeout=30, what="the run history to be cut to 3")
    assert [datetime.fromisoformat(d.replace("Z", "+00:00")) for d in dates] == days[:1:-1]


def test_bad_delete_input_is_a_422_naming_the_parameter(live: Any) -> None:
    service, tokens, _, _ = live
    response = httpx.delete(f"{service.url}/jobs/abc", params={"output": "maybe"}, headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=30)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "query.output"
