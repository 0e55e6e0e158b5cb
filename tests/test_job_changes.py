"""Event streams wake on the store's writes (service.job_changes), and still see other processes' writes."""

from __future__ import annotations

import asyncio
import threading

import httpx

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.service.job_changes import JobChanges
from spillway.service.store import JobStore

SPEC = {"name": "t", "source": {"format": "parquet", "path": "/data/in.parquet"}, "sink": {"path": "/data/out"}}


def test_a_write_from_another_thread_wakes_the_watch_of_that_job_only() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        changes = JobChanges(asyncio.get_running_loop())
        async with changes.watch("a") as watch_a, changes.watch("b") as watch_b:
            writer = threading.Thread(target=changes.notify, args=("a",))
            writer.start()
            writer.join()
            woke_a = await watch_a.wait(5.0)
            woke_b = await watch_b.wait(0.05)
            again_a = await watch_a.wait(0.05)  # the change was consumed
        return woke_a, woke_b, again_a

    assert asyncio.run(scenario()) == (True, False, False)


def test_a_change_before_the_wait_is_not_lost() -> None:
    async def scenario() -> bool:
        changes = JobChanges(asyncio.get_running_loop())
        async with changes.watch("a") as watch:
            changes.notify("a")
            await asyncio.sleep(0)  # delivered to the loop before anyone waits
            return await watch.wait(5.0)

    assert asyncio.run(scenario()) is True


def test_every_store_write_to_a_job_is_announced(tmp_path) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    seen: list[str] = []
    store.subscribe(seen.append)
    job, _ = store.create(JobSpec.model_validate(SPEC), "pandas")
    assert store.transition(job.id, JobStatus.RUNNING)
    store.save_progress(job.id, job.progress)
    assert store.finish(job.id, JobStatus.SUCCEEDED)
    store.save_logs(job.id, ["done"])
    assert not store.transition(job.id, JobStatus.RUNNING)  # refused: nothing changed, nothing announced
    assert seen == [job.id] * 5


def test_the_stream_sees_a_write_made_by_another_process_on_the_same_database(service) -> None:
    """A second store on the service's database stands for another replica: its writes reach no JobChanges there."""
    other = JobStore(service.env["SPILLWAY_DATABASE_URL"])
    try:
        job, _ = other.create(JobSpec.model_validate(SPEC), "pandas")  # PENDING, queued by no manager
        with httpx.Client(base_url=service.url, timeout=30) as http, http.stream("GET", f"/jobs/{job.id}/events") as events:
            lines = events.iter_lines()
            assert next(lines).startswith("event: progress")
            assert other.transition(job.id, JobStatus.CANCELLED)
            kinds = [line for line in lines if line.startswith("event:")]
        assert kinds == ["event: end"]
    finally:
        other.close()
