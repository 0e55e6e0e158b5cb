"""The store: lifecycle rules enforced in SQL, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spillway.jobs.errors import JobNotFound
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobProgress, JobStatus, StageProgress
from spillway.service.store import JobStore

SPEC = JobSpec.model_validate({"source": {"format": "parquet", "path": "x"}, "sink": {"path": "y"}})


@pytest.fixture()
def store(database_url: str) -> Iterator[JobStore]:
    store = JobStore(database_url)
    yield store
    store.close()


def test_lifecycle_and_terminal_states_are_final(store: JobStore) -> None:
    job = store.create(SPEC, "pandas")[0]
    assert job.state == JobStatus.PENDING
    assert store.transition(job.id, JobStatus.RUNNING)
    assert store.get(job.id).started_at is not None
    assert store.finish(job.id, JobStatus.SUCCEEDED)
    for target in JobStatus:
        assert not store.transition(job.id, target), f"left SUCCEEDED for {target}"
    final = store.get(job.id)
    assert final.state == JobStatus.SUCCEEDED and final.finished_at is not None


def test_pending_cannot_skip_to_succeeded(store: JobStore) -> None:
    job = store.create(SPEC, "pandas")[0]
    assert not store.transition(job.id, JobStatus.SUCCEEDED)
    assert store.transition(job.id, JobStatus.CANCELLED)
    assert not store.transition(job.id, JobStatus.RUNNING)


def test_progress_saved_only_while_running(store: JobStore) -> None:
    job = store.create(SPEC, "pandas")[0]
    progress = JobProgress(stages=[StageProgress(name="read", done=3, total=4)])
    store.save_progress(job.id, progress)
    assert store.get(job.id).progress.total == 0
    store.transition(job.id, JobStatus.RUNNING)
    store.save_progress(job.id, progress)
    assert store.get(job.id).progress == progress
    store.finish(job.id, JobStatus.FAILED)
    store.save_progress(job.id, JobProgress())
    assert store.get(job.id).progress == progress


def test_list_filter_pagination_and_order(store: JobStore) -> None:
    ids = [store.create(SPEC, "pandas")[0].id for _ in range(5)]
    store.transition(ids[1], JobStatus.RUNNING)
    page, total = store.list(limit=2)
    assert total == 5 and [j.id for j in page] == [ids[4], ids[3]]
    page, total = store.list(limit=2, offset=4)
    assert [j.id for j in page] == [ids[0]]
    running, total = store.list(state=JobStatus.RUNNING)
    assert total == 1 and running[0].id == ids[1]
    assert store.ids_in_state(JobStatus.PENDING) == [ids[0], ids[2], ids[3], ids[4]]
    assert store.count_by_state()[JobStatus.PENDING] == 4


def test_unknown_job(store: JobStore) -> None:
    with pytest.raises(JobNotFound):
        store.get("nope")
