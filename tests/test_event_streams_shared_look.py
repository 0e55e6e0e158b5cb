"""Event streams under many watchers (issue 16 item 14): one look at the database a second serves
every open stream, and a stream says nothing more until its job changes (service.job_changes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.service.store import JobStore
from tests.conftest import ServiceProcess, start_service

SPEC = {"name": "watched", "source": {"format": "parquet", "path": "/data/in.parquet"}, "sink": {"path": "/data/out"}}


@pytest.fixture()
def quiet_service(tmp_path: Path) -> Iterator[ServiceProcess]:
    """A service that looks for other replicas' queued jobs only once a minute: jobs another store
    makes stay PENDING, unclaimed, while a test watches them."""
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_QUEUE_POLL_S": "60"})
    yield service
    service.stop()


async def _follow(http: httpx.AsyncClient, job_id: str, opened: asyncio.Queue[str]) -> list[tuple[str, dict[str, object]]]:
    """The (event, data) pairs of one stream to its end; puts the job id on ``opened`` at the first event."""
    events: list[tuple[str, dict[str, object]]] = []
    async with http.stream("GET", f"/jobs/{job_id}/events") as response:
        assert response.status_code == 200
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event is not None:
                events.append((event, json.loads(line[5:])))
                if len(events) == 1:
                    await opened.put(job_id)
    return events


def test_thirty_streams_each_see_another_process_end_their_job_and_say_nothing_while_it_waits(quiet_service: ServiceProcess) -> None:
    other = JobStore(quiet_service.env["SPILLWAY_DATABASE_URL"])  # another replica: its writes reach no JobChanges there
    try:
        ids = [other.create(JobSpec.model_validate({**SPEC, "name": f"watched{i}"}), "pandas")[0].id for i in range(30)]

        async def scenario() -> dict[str, list[tuple[str, dict[str, object]]]]:
            opened: asyncio.Queue[str] = asyncio.Queue()
            limits = httpx.Limits(max_connections=40)
            async with httpx.AsyncClient(base_url=quiet_service.url, timeout=httpx.Timeout(60), limits=limits) as http:
                streams = {job_id: asyncio.create_task(_follow(http, job_id, opened)) for job_id in ids}
                for _ in ids:
                    await asyncio.wait_for(opened.get(), 60)
                await asyncio.sleep(3.0)  # three looks at the database find nothing changed
                for job_id in ids:
                    assert await asyncio.to_thread(other.finish, job_id, JobStatus.CANCELLED)
                return {job_id: await asyncio.wait_for(task, 60) for job_id, task in streams.items()}

        seen = asyncio.run(scenario())
    finally:
        other.close()
    for job_id, events in seen.items():
        assert [event for event, _ in events] == ["progress", "end"], (job_id, events)
        assert events[0][1]["state"] == "PENDING"
        assert events[1][1]["state"] == "CANCELLED"
        assert events[1][1]["job"]["id"] == job_id  # type: ignore[index]


def test_a_stream_on_a_job_that_does_not_change_sends_keep_alives(quiet_service: ServiceProcess) -> None:
    other = JobStore(quiet_service.env["SPILLWAY_DATABASE_URL"])
    try:
        job, _ = other.create(JobSpec.model_validate(SPEC), "pandas")
        with httpx.Client(base_url=quiet_service.url, timeout=httpx.Timeout(60)) as http, http.stream("GET", f"/jobs/{job.id}/events") as events:
            lines = events.iter_lines()
            assert next(lines).startswith("event: progress")
            following = [next(lines) for _ in range(3)]  # the data line, the blank line, then the comment
            assert following[0].startswith("data:") and following[1] == ""
            assert following[2] == ": keep-alive"
            assert other.finish(job.id, JobStatus.CANCELLED)
            assert [line for line in lines if line.startswith("event:")] == ["event: end"]
    finally:
        other.close()
