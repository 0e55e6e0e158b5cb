"""A status read's work cut down (issue 16 item 14), with what it answers unchanged.

The store's job reads leave out the log column, and build the JobView from parts validated one
by one; ``GET /jobs/{id}`` reads through :class:`StatusReads`, which reads what queued together in
one query; uvicorn's access line is formatted by :class:`AccessLine`, to the same text. The store
tests run on SQLite and, when SPILLWAY_TEST_POSTGRES_URL is set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
from collections.abc import Iterator
from datetime import datetime, timezone
import threading
from typing import Any

import pytest
from sqlalchemy import event
from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter

from spillway.jobs.errors import JobNotFound
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ErrorDetail, JobProgress, JobResources, JobStatus, ResultManifest, StageProgress
from spillway.service.cli import _uvicorn_log_config
from spillway.service.http_metrics import UVICORN_ACCESS_FORMAT, AccessLine
from spillway.service.schemas import JobView
from spillway.service.status_reads import StatusReads
from spillway.service.store import JobStore

SPEC = JobSpec.model_validate(
    {"name": "reads", "source": {"format": "parquet", "path": "in"}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": "out"}}
)


@pytest.fixture()
def store(database_url: str) -> Iterator[JobStore]:
    store = JobStore(database_url)
    yield store
    store.close()


def _statements(store: JobStore) -> list[str]:
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda _c, _cur, statement, *_: seen.append(statement))
    return seen


def test_job_reads_leave_the_log_to_its_own_read(store: JobStore) -> None:
    job, _ = store.create(SPEC, "pandas", idempotency_key="k", owner="alice#1")
    store.save_logs(job.id, ["x" * 1000] * 60)  # a long log: what a status read no longer decodes
    statements = _statements(store)
    assert store.get(job.id).id == job.id
    assert store.get(job.id, owner="alice#1").id == job.id
    assert [j.id for j in store.list()[0]] == [job.id]
    assert store.get_by_idempotency_key("k", owner="alice#1").id == job.id
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "count(" not in s.lower()]
    assert len(reads) == 4 and not [s for s in reads if "logs" in s], reads
    assert store.logs(job.id) == ["x" * 1000] * 60, "GET /jobs/{id}/logs reads it with its own query"


def test_a_stored_job_reads_back_as_validation_would_build_it(store: JobStore) -> None:
    job, _ = store.create(SPEC, "pandas", owner="alice#1")
    store.transition(job.id, JobStatus.RUNNING)
    store.save_progress(job.id, JobProgress(stages=[StageProgress(name="read", done=1, total=2)]))
    store.save_resources(job.id, JobResources(peak_device_memory_bytes=10, spilled_to_host_bytes=0, samples=1, method="test"))
    result = ResultManifest.model_validate({"location": "out", "files": [], "total_rows": 0, "total_bytes": 0, "columns": [], "job_id": job.id})
    store.finish(job.id, JobStatus.FAILED, error=ErrorDetail(code="boom", message="it broke", field="x"), result=result)
    for view in (store.get(job.id), store.list()[0][0]):
        validated = JobView(**{name: getattr(view, name) for name in view.model_fields_set})
        assert validated == view
        assert validated.model_fields_set == view.model_fields_set == set(JobView.model_fields) - {"links"}
        assert validated.model_dump_json() == view.model_dump_json()
        assert view.state is JobStatus.FAILED and view.error is not None and view.result is not None and view.resources is not None


def _record(args: Any, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.access", level, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


ACCESS_ARGS = [
    ("127.0.0.1:50000", "GET", "/jobs/476d2631abd844f8", "1.1", 200),
    ("[::1]:443", "POST", "/jobs?token=[redacted]&x=1", "1.1", 202),
    ("10.0.0.7:1", "DELETE", "/jobs/a%20b", "1.0", 404),
    ("127.0.0.1:9", "GET", "/healthz", "1.1", 599),  # no phrase for this code
]


@pytest.mark.parametrize("args", ACCESS_ARGS)
@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING, 5])
def test_access_line_is_uvicorns_line(args: Any, level: int) -> None:
    logging.addLevelName(5, "TRACE")
    ours, uvicorns = AccessLine(UVICORN_ACCESS_FORMAT, use_colors=False), AccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=False)
    assert ours.format(_record(args, level)) == uvicorns.format(_record(args, level))


def test_access_line_leaves_colours_and_other_formats_to_uvicorn() -> None:
    args = ACCESS_ARGS[0]
    assert AccessLine(UVICORN_ACCESS_FORMAT, use_colors=True).format(_record(args)) == AccessFormatter(UVICORN_ACCESS_FORMAT, use_colors=True).format(_record(args))
    other = '%(client_addr)s "%(request_line)s" %(status_code)s'
    assert AccessLine(other, use_colors=False).format(_record(args)) == AccessFormatter(other, use_colors=False).format(_record(args))
    odd = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "no arguments", None, None)
    for formatter in (AccessLine, AccessFormatter):  # uvicorn's own formatter fails on it, and so does ours
        with pytest.raises(TypeError):
            formatter(UVICORN_ACCESS_FORMAT, use_colors=False).format(odd)


def test_serve_gives_uvicorn_its_own_log_config_with_the_access_line(capsys: pytest.CaptureFixture[str]) -> None:
    config = _uvicorn_log_config()
    assert config["formatters"]["access"] == {**LOGGING_CONFIG["formatters"]["access"], "()": "spillway.service.http_metrics.AccessLine"}
    assert LOGGING_CONFIG["formatters"]["access"]["()"] == "uvicorn.logging.AccessFormatter", "uvicorn's own dict untouched"
    assert {k: v for k, v in config.items() if k != "formatters"} == {k: v for k, v in LOGGING_CONFIG.items() if k != "formatters"}
    access = logging.getLogger("uvicorn.access")
    saved = access.handlers[:], access.level, access.propagate
    try:
        logging.config.dictConfig(config)
        access.info('%s - "%s %s HTTP/%s" %d', *ACCESS_ARGS[0])
        assert capsys.readouterr().out == 'INFO:     127.0.0.1:50000 - "GET /jobs/476d2631abd844f8 HTTP/1.1" 200 OK\n'
    finally:
        access.handlers[:], access.level, access.propagate = saved


def test_timestamps_read_back_aware(store: JobStore) -> None:
    job, _ = store.create(SPEC, "pandas")
    read = store.get(job.id)
    assert read.created_at.tzinfo is not None and read.created_at <= datetime.now(timezone.utc)


async def _outcome(reads: StatusReads, job_id: str, owner: str | None) -> Any:
    try:
        return await reads.get(job_id, owner=owner)
    except JobNotFound as exc:
        return exc


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, JobNotFound):
        return type(got) is JobNotFound and (got.message, got.field) == (expected.message, expected.field)
    return type(got) is JobView and got == expected and got.model_fields_set == expected.model_fields_set


def test_status_reads_answer_each_reader_as_get_does(store: JobStore) -> None:
    mine = [store.create(SPEC, "pandas", owner="alice#1")[0].id for _ in range(3)]
    theirs = store.create(SPEC, "pandas", owner="bob#2")[0].id
    asks = [(job_id, owner) for job_id in [*mine, theirs, "missing"] for owner in (None, "alice#1")] * 5

    def expected(job_id: str, owner: str | None) -> Any:
        try:
            return store.get(job_id, owner=owner)
        except JobNotFound as exc:
            return exc

    async def main() -> list[Any]:
        return await asyncio.gather(*(_outcome(store.status_reads, job_id, owner) for job_id, owner in asks))

    got = asyncio.run(main())
    assert all(_same(g, expected(*ask)) for g, ask in zip(got, asks)), got
    views = [g for g in got if isinstance(g, JobView)]
    assert len({id(v) for v in views}) == len(views), "each reader its own JobView"


def test_reads_that_queue_together_are_one_query_and_none_waits_for_company(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [store.create(SPEC, "pandas")[0].id for _ in range(7)]
    reads = StatusReads(store, threads=1, batch=4)
    first_running, release = threading.Event(), threading.Event()
    batches: list[list[str]] = []
    get_many = store.get_many

    def held(keys: Any) -> Any:
        batches.append([job_id for job_id, _ in keys])
        if len(batches) == 1:
            first_running.set()
            release.wait(30)
        return get_many(keys)

    monkeypatch.setattr(store, "get_many", held)

    async def main() -> list[JobView]:
        first = asyncio.ensure_future(reads.get(ids[0]))
        await asyncio.to_thread(first_running.wait, 30)  # the lone read is being read already
        rest = [asyncio.ensure_future(reads.get(job_id)) for job_id in ids[1:]]
        await asyncio.sleep(0)
        release.set()
        return [await first, *await asyncio.gather(*rest)]

    try:
        got = asyncio.run(main())
    finally:
        reads.close()
    assert [v.id for v in got] == ids
    assert batches == [ids[:1], ids[1:5], ids[5:]], "what queued meanwhile: one query per batch of at most 4"


def test_status_reads_see_every_write_made_before_they_asked(store: JobStore) -> None:
    job_id = store.create(SPEC, "pandas")[0].id

    async def state() -> JobStatus:
        return (await store.status_reads.get(job_id)).state

    assert asyncio.run(state()) is JobStatus.PENDING
    store.transition(job_id, JobStatus.RUNNING)
    assert asyncio.run(state()) is JobStatus.RUNNING
    store.finish(job_id, JobStatus.SUCCEEDED)
    assert asyncio.run(state()) is JobStatus.SUCCEEDED


def test_a_failed_query_fails_each_read_on_its_own(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = store.create(SPEC, "pandas")[0].id
    monkeypatch.setattr(store, "get_many", lambda keys: 1 / 0)

    async def main() -> list[Any]:
        return await asyncio.gather(store.status_reads.get(job_id), _outcome(store.status_reads, "missing", None))

    found, missing = asyncio.run(main())
    assert found == store.get(job_id) and isinstance(missing, JobNotFound)
    monkeypatch.setattr(store, "get", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        asyncio.run(store.status_reads.get(job_id))


def test_a_reader_that_gives_up_leaves_the_others_their_answers(store: JobStore) -> None:
    job_id = store.create(SPEC, "pandas")[0].id

    async def main() -> JobView:
        gone = asyncio.ensure_future(store.status_reads.get(job_id))
        kept = asyncio.ensure_future(store.status_reads.get(job_id))
        await asyncio.sleep(0)
        gone.cancel()
        return await kept

    assert asyncio.run(main()).id == job_id


def test_reads_from_two_loops_and_after_close(database_url: str) -> None:
    store = JobStore(database_url)
    job_id = store.create(SPEC, "pandas")[0].id
    answers: list[str] = []

    def in_its_own_loop() -> None:
        answers.extend(asyncio.run(_ids(store, [job_id] * 20)))

    threads = [threading.Thread(target=in_its_own_loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == [job_id] * 40
    reads = store.status_reads
    store.close()
    assert asyncio.run(_ids(store, [job_id])) == [job_id], "a closed store still reads, a thread each"
    for thread in reads._threads:
        thread.join(30)
        assert not thread.is_alive()


async def _ids(store: JobStore, ids: list[str]) -> list[str]:
    return [v.id for v in await asyncio.gather(*(store.status_reads.get(job_id) for job_id in ids))]
