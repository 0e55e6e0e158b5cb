"""A service killed between the sink's commit and recording SUCCEEDED: the restart recognises the commit.

The state such a kill leaves is reproduced exactly, with the real commit code: the store says
RUNNING, and ``SinkWriter.commit`` has landed for that job (the manifest lists its files). A
real service is then started on that store, as after the kill, and must finish the job as
SUCCEEDED with the sink's manifest, while a job whose commit had not landed stays FAILED
"interrupted" with its staging removed and the sink as it was.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

from spillway.jobs.commit import OLD_PREFIX
from spillway.jobs.sink import TMP_PREFIX, SinkWriter, read_manifest
from spillway.jobs.spec import JobSpec, SinkSpec
from spillway.jobs.status import JobStatus, ResultManifest
from spillway.service.store import JobStore
from tests.conftest import start_service


def _frame(rows: int = 120, offset: int = 0) -> dd.DataFrame:
    return dd.from_pandas(pd.DataFrame({"k": [i % 3 for i in range(rows)], "v": range(offset, offset + rows)}), npartitions=2)


def _write(writer: SinkWriter, rows: int = 120, offset: int = 0) -> None:
    with dask.config.set(scheduler="sync"):
        dask.compute(writer.write_graph(_frame(rows, offset)))


def _running_job(store: JobStore, source: Path, sink: Path, mode: str = "error") -> tuple[str, SinkWriter]:
    spec = JobSpec.model_validate({"name": "ghost", "source": {"format": "parquet", "path": str(source)}, "sink": {"path": str(sink), "mode": mode}})
    job, _ = store.create(spec, "pandas")
    assert store.transition(job.id, JobStatus.RUNNING)
    return job.id, SinkWriter(spec.sink, job.id)


def _commit_without_a_job(sink: Path, job_id: str) -> ResultManifest:
    writer = SinkWriter(SinkSpec(path=str(sink)), job_id)
    _write(writer)
    return writer.commit()


def test_restart_finishes_a_job_whose_commit_landed_before_it_was_recorded(tmp_path: Path) -> None:
    workdir = tmp_path / "svc"
    source = tmp_path / "src.parquet"
    pd.DataFrame({"k": [1], "v": [1]}).to_parquet(source)
    store = JobStore(f"sqlite:///{workdir / 'spillway.db'}")

    # A first write: the kill came after the rename that made the sink.
    fresh_id, fresh = _running_job(store, source, tmp_path / "fresh")
    _write(fresh)
    fresh_manifest = fresh.commit()

    # An overwrite: the swap landed; the replaced output still sat in staging when the service died.
    _commit_without_a_job(tmp_path / "replaced", "earlier")
    over_id, over = _running_job(store, source, tmp_path / "replaced", mode="overwrite")
    _write(over, rows=30)
    over_manifest = over.commit()
    over.staging.mkdir()
    (over.staging / "part.000000.parquet").write_bytes(b"the replaced output, not yet removed")

    # An append: the new manifest, listing the earlier files and this job's, was in place.
    _commit_without_a_job(tmp_path / "appended", "earlier")
    append_id, append = _running_job(store, source, tmp_path / "appended", mode="append")
    _write(append, rows=6, offset=1000)
    append_manifest = append.commit()

    # Not committed: staged only. And an overwrite whose commit did not land on a sink another job wrote.
    staged_id, staged = _running_job(store, source, tmp_path / "staged")
    _write(staged)
    _commit_without_a_job(tmp_path / "other", "someone_else")
    other_id, other = _running_job(store, source, tmp_path / "other", mode="overwrite")
    _write(other, rows=7)
    store.close()

    service = start_service(workdir)
    try:
        with service.client() as api:
            for job_id, manifest in [(fresh_id, fresh_manifest), (over_id, over_manifest), (append_id, append_manifest)]:
                job = api.get(job_id)
                assert job.state == JobStatus.SUCCEEDED, (job_id, job.error)
                assert job.error is None and job.result == manifest
                assert any("recognised at restart" in line for line in api.logs(job_id))
            for job_id in (staged_id, other_id):
                job = api.get(job_id)
                assert job.state == JobStatus.FAILED and job.error is not None and job.error.code == "interrupted"
        assert "recognised at restart" in service.log()
    finally:
        service.stop()
    assert read_manifest(tmp_path / "fresh")["total_rows"] == 120
    assert read_manifest(tmp_path / "replaced")["total_rows"] == 30 and not over.staging.exists()
    assert read_manifest(tmp_path / "appended")["total_rows"] == 126 and read_manifest(tmp_path / "appended")["version"] == 2
    assert not (tmp_path / "staged").exists() and not staged.staging.exists()
    kept = read_manifest(tmp_path / "other")
    assert {f["job_id"] for f in kept["files"]} == {"someone_else"} and not other.staging.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


@pytest.mark.parametrize("landed", [False, True])
def test_recover_settles_an_overwrite_caught_between_its_two_renames(tmp_path: Path, landed: bool) -> None:
    # Where renameat2 is missing, an overwrite renames the sink aside and then the staging in.
    sink = tmp_path / "out"
    _commit_without_a_job(sink, "earlier")
    writer = SinkWriter(SinkSpec(path=str(sink), mode="overwrite"), "job2")
    _write(writer, rows=9)
    aside = sink.parent / f"{OLD_PREFIX}{writer.staging.name}"
    os.rename(sink, aside)
    if landed:  # the second rename too, with the markers the commit writes first
        from spillway.jobs.commit import write_markers

        manifest = writer._manifest(*_local(writer.staging), _sizes(writer.staging), None)
        write_markers(writer.staging, manifest)
        os.rename(writer.staging, sink)
    recovered = writer.recover()
    assert not aside.exists() and not writer.staging.exists()
    if landed:
        assert recovered is not None and recovered.total_rows == 9 and read_manifest(sink)["total_rows"] == 9
    else:  # rolled back: the previous version is the sink again
        assert recovered is None and read_manifest(sink)["total_rows"] == 120


def _local(path: Path) -> tuple[Any, str]:
    from spillway.jobs.storage import filesystem

    return filesystem(str(path))


def _sizes(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(path.iterdir()) if not p.name.startswith(("_", "."))}


class _SlowWriter:
    """A writer whose commit takes a while in its thread, as a real one on a slow disk."""

    def __init__(self, manifest: ResultManifest) -> None:
        self.manifest = manifest
        self.started = threading.Event()
        self.landed = False
        self.aborted = False

    def commit(self) -> ResultManifest:
        self.started.set()
        time.sleep(0.5)
        self.landed = True
        return self.manifest

    def abort(self) -> None:
        self.aborted = True


class _Store:
    def __init__(self) -> None:
        self.finished: list[tuple[str, JobStatus]] = []

    def get(self, job_id: str) -> Any:
        """The job as the commit's fence reads it: still RUNNING here (no other replica settled it)."""
        return SimpleNamespace(id=job_id, state=JobStatus.RUNNING, replica=None)

    def finish(self, job_id: str, to: JobStatus, **_: Any) -> bool:
        self.finished.append((job_id, to))
        return True


def test_a_stop_during_the_commit_lets_it_land_and_records_it() -> None:
    """A graceful stop (SIGINT) cancels the runners; one that is committing finishes and records SUCCEEDED first."""
    from spillway.cluster.manager import JobManager, _ActiveJob

    manifest = ResultManifest(location="/x", files=[], total_rows=0, total_bytes=0, columns=[])

    async def scenario() -> tuple[_SlowWriter, _Store, bool]:
        store = _Store()
        manager = JobManager(store, cluster=None)  # type: ignore[arg-type]
        writer = _SlowWriter(manifest)
        active = _ActiveJob("job1", writer)  # type: ignore[arg-type]
        job = type("Job", (), {"id": "job1"})()
        committing = asyncio.create_task(manager._commit(job, active, "plan 0 s"))  # type: ignore[arg-type]
        await asyncio.to_thread(writer.started.wait, 10)
        committing.cancel()
        try:
            await committing
        except asyncio.CancelledError:
            pass
        return writer, store, getattr(active, "committed", False)

    writer, store, committed = asyncio.run(scenario())
    assert writer.landed and not writer.aborted
    assert store.finished == [("job1", JobStatus.SUCCEEDED)], "the commit landed, so the job must be recorded as SUCCEEDED"
    assert committed


def test_recover_recognises_a_commit_that_wrote_no_file(tmp_path: Path) -> None:
    """An empty partitioned output commits a manifest with no files: the manifest names its job, so a restart
    finds the commit its own (before, it counted as not landed and the job as interrupted); another job's is not."""
    sink = SinkSpec(path=str(tmp_path / "out"), partition_on=["k"])
    writer = SinkWriter(sink, "job_empty")
    with dask.config.set(scheduler="sync"):
        frame = _frame(rows=10)
        dask.compute(writer.write_graph(frame[frame.v < 0]))
    manifest = writer.commit()
    assert manifest.files == [] and manifest.job_id == "job_empty"
    assert read_manifest(tmp_path / "out")["job_id"] == "job_empty"
    assert SinkWriter(sink, "job_empty").recover() == manifest
    assert SinkWriter(sink, "another_job").recover() is None


def test_recover_does_not_claim_a_later_jobs_append(tmp_path: Path) -> None:
    """Job A appended and its service died before recording it; job B appended after. A's commit landed (its files are
    in the sink), but its result is its own files, not B's manifest: deleting A's output is then refused as superseded."""
    from spillway.jobs.sink_delete import OutputSuperseded, delete_output

    sink = SinkSpec(path=str(tmp_path / "out"), mode="append")
    first = SinkWriter(sink, "jobA")
    _write(first, rows=5)
    first.commit()
    second = SinkWriter(sink, "jobB")
    _write(second, rows=8, offset=100)
    later = second.commit()
    recovered = SinkWriter(sink, "jobA").recover()
    assert recovered is not None and recovered.job_id == "jobA" and recovered.total_rows == 5
    assert {f.job_id for f in recovered.files} == {"jobA"}
    with pytest.raises(OutputSuperseded):
        delete_output(recovered, "jobA", [str(tmp_path)])
    assert read_manifest(tmp_path / "out")["total_rows"] == later.total_rows == 13
