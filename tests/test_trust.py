"""Data roots, idempotency, body size and queue limits, against a live service."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from spillway.jobs.status import JobStatus
from tests.conftest import ServiceProcess, start_service, wait_terminal


@pytest.fixture(scope="module")
def rooted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service whose only data root is one directory, holding a small dataset."""
    from spillway.jobs.samples import write_sample_data

    root = tmp_path_factory.mktemp("root")
    data = write_sample_data(root / "data", rows=2000, files=2)
    service = start_service(root / "svc", extra_env={"SPILLWAY_ALLOWED_ROOTS": f'["{root}"]', "SPILLWAY_MAX_BODY_BYTES": "20000"})
    yield service, root, data
    service.stop()


def spec(source: str, sink: str) -> dict[str, Any]:
    return {"source": {"format": "parquet", "path": source}, "steps": [{"op": "limit", "n": 5}], "sink": {"path": sink}}


def post(service: ServiceProcess, body: Any, **headers: str) -> httpx.Response:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        return http.post("/jobs", json=body, headers=headers)


@pytest.mark.parametrize(
    ("source", "sink", "field", "fragment"),
    [
        ("/etc/passwd", "{root}/o1", "source.path", "outside the allowed roots"),
        ("{root}/data/../../etc/*.conf", "{root}/o2", "source.path", "contains '..'"),
        ("file:///etc/passwd", "{root}/o3", "source.path", "not under an allowed URL root"),
        ("{root}/data/sales", "/tmp/elsewhere-out", "sink.path", "outside the allowed roots"),
        ("{root}/data/sales", "{root}/../escape", "sink.path", "contains '..'"),
    ],
)
def test_paths_outside_roots_are_refused(rooted: Any, source: str, sink: str, field: str, fragment: str) -> None:
    service, root, _ = rooted
    response = post(service, spec(source.format(root=root), sink.format(root=root)))
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "path_not_allowed" and error["field"] == field and fragment in error["message"]


def test_symlink_escaping_a_root_is_refused(rooted: Any, tmp_path: Path) -> None:
    service, root, data = rooted
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "x.parquet").write_bytes((data["sales"] / "part-000.parquet").read_bytes())
    link_dir = root / "linked"
    link_dir.mkdir(exist_ok=True)
    link = link_dir / "x.parquet"
    if not link.exists():
        os.symlink(outside / "x.parquet", link)
    response = post(service, spec(str(link_dir), str(root / "o_link")))
    assert response.status_code == 403 and "links to" in response.json()["error"]["message"]
    sink_link = root / "sink_link"
    if not sink_link.exists():
        os.symlink(outside, sink_link)
    response = post(service, spec(str(data["sales"]), str(sink_link / "out")))
    assert response.status_code == 403 and response.json()["error"]["field"] == "sink.path"


def test_idempotency_key_gives_the_same_job_even_when_racing(rooted: Any) -> None:
    service, root, data = rooted
    body = spec(str(data["sales"]), str(root / "idem_out"))
    answers: list[httpx.Response] = []
    barrier = threading.Barrier(6)

    def send() -> None:
        barrier.wait()
        answers.append(post(service, body, **{"Idempotency-Key": "nightly-2026-11-29"}))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = {a.json()["id"] for a in answers}
    assert len(ids) == 1, answers
    assert sorted(a.status_code for a in answers) == [200] * 5 + [202]
    with service.client() as client:
        job = wait_terminal(client, ids.pop())
        assert job.state == JobStatus.SUCCEEDED
        assert sum(1 for j in client.list(limit=500).items if j.spec.sink.path == str(root / "idem_out")) == 1
    again = post(service, {**body, "name": "other"}, **{"Idempotency-Key": "nightly-2026-11-29"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "idempotency_conflict"


def test_body_over_the_limit_is_413(rooted: Any) -> None:
    service, root, data = rooted
    body = spec(str(data["sales"]), str(root / "big"))
    body["steps"] = [{"op": "filter", "expr": " or ".join(["amount > 0"] * 15)}] * 200  # about 40 kB
    response = post(service, body)
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"
    with httpx.Client(base_url=service.url) as http:  # chunked: no Content-Length to trust
        chunked = http.post("/jobs", content=iter([b"{" + b" " * 15000, b" " * 15000 + b"}"]), headers={"content-type": "application/json"})
    assert chunked.status_code == 413


def test_queue_limit_answers_429_with_retry_after(tmp_path: Path, big_data: dict[str, Path]) -> None:
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_ALLOWED_ROOTS": '["/tmp"]', "SPILLWAY_MAX_CONCURRENT_JOBS": "1", "SPILLWAY_MAX_QUEUED_JOBS": "1"})
    try:
        heavy = {"source": {"format": "parquet", "path": str(big_data["sales"])}, "steps": [{"op": "sort", "by": ["amount"]}]}
        first = post(service, {**heavy, "sink": {"path": str(tmp_path / "a")}})
        second = post(service, {**heavy, "sink": {"path": str(tmp_path / "b")}})
        third = post(service, {**heavy, "sink": {"path": str(tmp_path / "c")}})
        assert first.status_code == 202 and second.status_code == 202
        assert third.status_code == 429 and third.headers["Retry-After"] == "5"
        assert third.json()["error"]["code"] == "queue_full"
    finally:
        service.stop()


def test_partition_limit_refuses_the_spec_or_fails_the_job_before_it_runs(tmp_path: Path, sample_data: dict[str, Path]) -> None:
    # The partition limit bounds a Dask engine graph; a Polars job is one task. The sample's 4 files
    # are estimated as 4 partitions: over a limit of 3 that is a 422 at submit; at 4 the spec passes,
    # and the built graph (reads, then writes: more than 4 tasks) fails the job before anything runs.
    for limit in (3, 4):
        service = start_service(tmp_path / f"svc{limit}", extra_env={"SPILLWAY_MAX_PARTITIONS": str(limit), "SPILLWAY_DEFAULT_ENGINE": "dask"})
        try:
            body = spec(str(sample_data["sales"]), str(tmp_path / "out"))
            if limit == 3:
                response = httpx.post(f"{service.url}/jobs", json=body, timeout=60)
                assert response.status_code == 422, response.text
                assert response.json()["error"]["code"] == "too_many_partitions" and response.json()["error"]["field"] == "source.blocksize"
                continue
            with service.client() as client:
                job = wait_terminal(client, client.submit(body).id)
        finally:
            service.stop()
        assert job.state == JobStatus.FAILED and job.error is not None
        assert job.error.code == "too_many_partitions" and "over the limit of 4" in job.error.message
        assert not (tmp_path / "out").exists()
