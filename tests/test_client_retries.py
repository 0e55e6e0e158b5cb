"""A submit whose connection drops before its answer is sent again with the same Idempotency-Key: one job, never two.

The service is real (the session's, over HTTP); only the answer to the first POSTs is dropped on
its way back, after the service has created the job, as a dropped connection would. A timeout is
not sent again (the service may still be checking the spec), nor is a service that is not there.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from spillway.service import client as client_module
from spillway.service.cli_common import unreachable
from spillway.service.client import SpillwayClient
from spillway.service.launcher import ServiceProcess


class LosesAnswers(httpx.BaseTransport):
    """Forwards each request to the service; loses the answers to the first ``lose`` POSTs to /jobs as ``how`` (or never connects)."""

    def __init__(self, lose: int, *, connect: bool = True, how: type[httpx.TransportError] = httpx.RemoteProtocolError) -> None:
        self.inner = httpx.HTTPTransport()
        self.lose, self.connect, self.how = lose, connect, how
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        posted = request.method == "POST" and request.url.path == "/jobs"
        if posted:
            self.keys.append(request.headers.get("Idempotency-Key"))
            if not self.connect:
                raise httpx.ConnectError("connection refused", request=request)
        response = self.inner.handle_request(request)
        if posted and len(self.keys) <= self.lose:
            response.read()
            response.close()
            raise self.how("the answer was lost", request=request)
        return response


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "SUBMIT_RETRY_PAUSE_S", 0.0)


def _spec(name: str, sample_data: dict[str, Path], tmp_path: Path) -> dict[str, object]:
    return {"name": name, "source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}],
            "sink": {"path": str(tmp_path / name)}}


def _jobs_named(service: ServiceProcess, name: str) -> list[str]:
    with service.client() as api:
        return [job.id for job in api.list(limit=500).items if job.name == name]


def test_a_lost_answer_is_asked_again_with_the_same_key_and_gives_the_one_job(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path,
) -> None:
    transport = LosesAnswers(lose=2)
    with SpillwayClient(service.url, transport=transport) as api:
        accepted = api.submit(_spec("lost_answers", sample_data, tmp_path))
    assert len(transport.keys) == 3 and len(set(transport.keys)) == 1 and transport.keys[0]  # one key, made by the client
    assert _jobs_named(service, "lost_answers") == [accepted.id]


def test_a_key_given_is_the_one_sent_and_each_call_without_one_is_a_job_of_its_own(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path,
) -> None:
    transport = LosesAnswers(lose=0)
    with SpillwayClient(service.url, transport=transport) as api:
        first = api.submit(_spec("given_key", sample_data, tmp_path), idempotency_key="nightly-2026-12-05")
        again = api.submit(_spec("given_key", sample_data, tmp_path), idempotency_key="nightly-2026-12-05")
        assert again.id == first.id
        one = api.submit(_spec("no_key_a", sample_data, tmp_path))
        other = api.submit(_spec("no_key_b", sample_data, tmp_path))
    assert transport.keys[:2] == ["nightly-2026-12-05"] * 2 and transport.keys[2] != transport.keys[3]
    assert one.id != other.id


def test_a_connection_dropped_every_time_is_tried_three_times_then_raised(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path,
) -> None:
    transport = LosesAnswers(lose=99)
    with SpillwayClient(service.url, transport=transport) as api, pytest.raises(httpx.RemoteProtocolError):
        api.submit(_spec("dropped_always", sample_data, tmp_path))
    assert len(transport.keys) == 3 and len(set(transport.keys)) == 1
    assert len(_jobs_named(service, "dropped_always")) == 1  # the service made it once, whatever the client saw


@pytest.mark.parametrize(("connect", "how", "raised"), [
    (False, httpx.ConnectError, httpx.ConnectError),   # nobody there: said at once
    (True, httpx.ReadTimeout, httpx.ReadTimeout),      # the service still checking: sending it again would wait as long
])
def test_a_service_not_there_or_slow_is_not_asked_again(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, connect: bool, how: type[httpx.TransportError], raised: type[Exception],
) -> None:
    transport = LosesAnswers(lose=99, connect=connect, how=how)
    with SpillwayClient(service.url, transport=transport) as api, pytest.raises(raised):
        api.submit(_spec(f"not_again_{how.__name__}", sample_data, tmp_path))
    assert len(transport.keys) == 1


@pytest.mark.parametrize("key", ["", " padded", "clé", "x" * 201, "line\nbreak"])
def test_a_key_that_cannot_be_sent_is_refused_before_anything_is_sent(tmp_path: Path, key: str) -> None:
    transport = LosesAnswers(lose=0, connect=False)
    with SpillwayClient("http://127.0.0.1:9", transport=transport) as api, pytest.raises(ValueError, match="Idempotency-Key"):
        api.submit({"source": {"format": "parquet", "path": str(tmp_path)}, "sink": {"path": str(tmp_path / "o")}}, idempotency_key=key)
    assert transport.keys == []


def test_an_empty_key_sent_by_hand_is_a_422_naming_the_header(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    answer = httpx.post(f"{service.url}/jobs", json=_spec("empty_key", sample_data, tmp_path), headers={"Idempotency-Key": ""}, timeout=30)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "header.idempotency-key", answer.text
    assert answer.json()["error"]["code"] == "invalid_parameter"  # the request's header, not the spec
    assert _jobs_named(service, "empty_key") == []


def test_the_cli_tells_a_slow_service_from_one_that_is_not_there_and_from_a_bad_url() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:8000/jobs")
    slow = unreachable(httpx.ReadTimeout("timed out", request=request), "http://127.0.0.1:8000", submitting=True)
    assert "did not answer the submit in time" in slow and "--idempotency-key" in slow and "spillway list" in slow
    listing = unreachable(httpx.ReadTimeout("timed out", request=request), "http://127.0.0.1:8000")
    assert "did not answer in time" in listing and "submit" not in listing and "idempotency" not in listing
    gone = unreachable(httpx.ConnectError("connection refused", request=request), "http://127.0.0.1:8000")
    assert gone.startswith("cannot reach http://127.0.0.1:8000") and "spillway serve" in gone
    assert "cannot reach" in unreachable(httpx.ConnectTimeout("timed out", request=request), "http://x")
    dropped = unreachable(httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request), "u", submitting=True)
    assert "dropped the connection" in dropped and ".." not in dropped
    assert "is not a service's URL" in unreachable(httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."), "ftp://x")
