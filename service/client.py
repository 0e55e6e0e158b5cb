"""The Python SDK: talks to the service over HTTP (httpx) with the server's own models."""

from __future__ import annotations

import functools
import json
import logging
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobProgress, JobStatus, ResultManifest
from spillway.service.defaults import DEFAULT_URL
from spillway.service.schemas import ErrorDetail, Health, JobAccepted, JobDeleted, JobLogs, JobPage, JobView
from spillway.service.spec_errors import error_detail
from spillway.service.token_models import IssuedToken, Scope, TokenInfo
from spillway.service.validation import ValidationReport

if TYPE_CHECKING:
    import pyarrow as pa

    from spillway.cluster.info import ClusterInfo



class SpecFileError(ValueError):
    """A spec file that cannot be read, or whose spec is invalid.

    ``details`` holds one :class:`ErrorDetail` per problem, worded as ``POST /jobs`` words
    them (``unknown_step``, ``invalid_spec``); it is empty when the file itself is unreadable.
    """

    def __init__(self, message: str, details: list[ErrorDetail] | None = None) -> None:
        super().__init__(message)
        self.details = details or []


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML or JSON spec file holds, read as YAML 1.2 (a join's ``on:`` stays a key).

    Raises
    ------
    SpecFileError
        If the file cannot be read or is not a YAML/JSON mapping.
    """
    from spillway.service.documents import DocumentError, read_mapping  # PyYAML: only for the commands that read files

    try:
        return read_mapping(Path(path), "name, source, steps, sink")
    except DocumentError as exc:
        raise SpecFileError(str(exc)) from exc


def load_spec(path: str | Path) -> JobSpec:
    """Read and check a :class:`JobSpec` from a YAML or JSON file, as ``spillway submit`` does.

    Only the spec's shape is checked here; the service checks it against its sources on submit.

    Raises
    ------
    SpecFileError
        Naming the file, and each invalid field in the words the service uses.
    """
    data = read_spec_file(path)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        details = [error_detail(dict(e)) for e in exc.errors()]
        lines = "\n".join(f"  {d.message}" for d in details)
        raise SpecFileError(f"{path} is not a valid job spec:\n{lines}", details) from exc


class ApiError(Exception):
    """The service answered with an error body ``{"error": {...}}``."""

    def __init__(self, status: int, detail: ErrorDetail) -> None:
        where = f" [{detail.field}]" if detail.field else ""
        super().__init__(f"{status} {detail.code}{where}: {detail.message}")
        self.status = status
        self.detail = detail


class JobEvent:
    """One server-sent event of ``GET /jobs/{id}/events``."""

    def __init__(self, kind: str, data: dict[str, Any]) -> None:
        self.kind = kind
        self.state = JobStatus(data["state"])
        self.progress = JobProgress.model_validate(data["progress"])
        self.error = ErrorDetail.model_validate(data["error"]) if data.get("error") else None
        #: On the ``end`` event: the whole job, as ``get`` returns it (None from a service that does not send it).
        self.job = JobView.model_validate(data["job"]) if data.get("job") else None


log = logging.getLogger(__name__)

#: Seconds a submit may take at least: its checks read every source file's footer (thousands of files: seconds).
SUBMIT_TIMEOUT_S = 300.0
#: How many times a submit whose connection dropped before its answer is sent again, with the same Idempotency-Key.
SUBMIT_RETRIES = 2
#: Seconds before the first retry (the second waits twice as long).
SUBMIT_RETRY_PAUSE_S = 1.0


class BadArgument(ValueError):
    """An argument the client cannot send as given (an empty id, a key no header can carry); nothing was sent."""


def path_segment(value: str | int, what: str) -> str:
    """``value`` as one segment of a URL's path: never empty, and a ``/`` or ``..`` in it cannot reach another resource.

    Raises
    ------
    BadArgument
        For an empty ``value``, naming ``what`` it is.
    """
    value = str(value)
    if not value:
        raise BadArgument(f"{what} is empty")
    if value in (".", ".."):  # a URL's path would drop them (RFC 3986 dot segments): sent escaped, they name nothing
        return value.replace(".", "%2E")
    return quote(value, safe="")


def check_idempotency_key(key: str) -> str:
    """``key`` if an HTTP header can carry it as the service takes it: 1-200 printable ASCII characters, no space at either end.

    Raises
    ------
    BadArgument
        Naming what is wrong (an empty key, say from an unset variable, would make no submit safe).
    """
    if not key or key != key.strip():
        raise BadArgument("Idempotency-Key: empty, or with spaces at an end; give the key itself (1-200 printable ASCII characters)")
    if len(key) > 200 or not all(" " <= char <= "~" for char in key):
        raise BadArgument(f"Idempotency-Key: {key[:40]!r}{'…' if len(key) > 40 else ''} is not 1-200 printable ASCII characters")
    return key


class SpillwayClient:
    """A synchronous client for one Spillway service.

    Parameters
    ----------
    base_url
        The service, e.g. ``http://127.0.0.1:8000``.
    timeout
        Seconds for each request (streams are not limited), and to connect for a submit.
    submit_timeout
        Seconds a submit may wait for its answer (default: the larger of ``timeout`` and
        :data:`SUBMIT_TIMEOUT_S`).
    token
        A bearer token (``spillway token create``), when the service requires one.
    transport
        An httpx transport, e.g. ``httpx.ASGITransport(app)`` in tests.
    """

    def __init__(
        self, base_url: str = DEFAULT_URL, *, timeout: float = 30.0, token: str | None = None, transport: httpx.BaseTransport | None = None,
        submit_timeout: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers, transport=transport, verify=_tls(self.base_url))
        # A submit's answer may take minutes (its checks); its connection is made as quickly as any request's.
        wait = submit_timeout if submit_timeout is not None else max(timeout, SUBMIT_TIMEOUT_S)
        self._submit_timeout = httpx.Timeout(wait, connect=min(timeout, wait))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SpillwayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(response.status_code, _error_detail(response))
        return response.json() if response.content else None

    def submit(self, spec: JobSpec | dict[str, Any], *, idempotency_key: str | None = None) -> JobAccepted:
        """Submit a job; it is validated against its sources before it is accepted.

        The same ``idempotency_key`` sent again returns the same job, never a second run. Without
        one the client makes one (a random UUID), so that a submit whose connection dropped before
        its answer came is sent again, up to :data:`SUBMIT_RETRIES` times, and gets the job the
        first attempt created instead of a second. A submit may take ``submit_timeout`` seconds
        (:data:`SUBMIT_TIMEOUT_S` unless the client was given more): its checks read every source
        file's footer. A timeout is not sent again: the service may still be checking.

        Raises
        ------
        BadArgument
            For an ``idempotency_key`` that cannot be sent: empty, over 200 characters, or not printable ASCII.
        """
        body = spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec
        headers = {"Idempotency-Key": check_idempotency_key(idempotency_key) if idempotency_key is not None else uuid.uuid4().hex}
        for attempt in range(SUBMIT_RETRIES + 1):
            try:
                return JobAccepted.model_validate(self._request("POST", "/jobs", json=body, headers=headers, timeout=self._submit_timeout))
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:  # the connection dropped mid-way
                if attempt == SUBMIT_RETRIES:
                    raise
                log.warning("submit: %s: %s; sending it again with the same Idempotency-Key", type(exc).__name__, exc)
                time.sleep(SUBMIT_RETRY_PAUSE_S * (attempt + 1))
        raise AssertionError("unreachable")  # the loop returns or raises

    def validate(self, spec: JobSpec | dict[str, Any]) -> ValidationReport:
        """Every check ``submit`` makes, and the engine the job would run on; no job is created.

        Raises
        ------
        ApiError
            As ``submit`` would (422 with the field, 403 for a path outside the data roots, 409 ...).
        """
        body = spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec
        return ValidationReport.model_validate(self._request("POST", "/jobs:validate", json=body))

    def submit_file(self, path: str | Path, *, idempotency_key: str | None = None) -> JobAccepted:
        """Submit the spec in a YAML or JSON file (read by :func:`load_spec`)."""
        return self.submit(load_spec(path), idempotency_key=idempotency_key)

    def get(self, job_id: str) -> JobView:
        return JobView.model_validate(self._request("GET", f"/jobs/{path_segment(job_id, 'the job id')}"))

    def list(self, *, state: JobStatus | None = None, limit: int = 50, offset: int = 0) -> JobPage:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if state is not None:
            params["state"] = state.value
        return JobPage.model_validate(self._request("GET", "/jobs", params=params))

    def logs(self, job_id: str) -> list[str]:
        """The job's log lines: service events, the worker traceback, workers' warnings."""
        return JobLogs.model_validate(self._request("GET", f"/jobs/{path_segment(job_id, 'the job id')}/logs")).lines

    def cancel(self, job_id: str) -> JobView:
        return JobView.model_validate(self._request("POST", f"/jobs/{path_segment(job_id, 'the job id')}/cancel"))

    def delete(self, job_id: str, *, output: bool = False) -> JobDeleted:
        """Delete a finished job's record and logs; with ``output``, also its committed files.

        Raises
        ------
        ApiError
            409 ``job_active`` for a PENDING or RUNNING job (cancel it first), 409
            ``output_superseded`` when a later job appended to or overwrote its sink
            (nothing is deleted then), 404 for no such job.
        """
        params = {"output": "true"} if output else {}
        return JobDeleted.model_validate(self._request("DELETE", f"/jobs/{path_segment(job_id, 'the job id')}", params=params))

    def result(self, job_id: str) -> ResultManifest:
        """The manifest of a SUCCEEDED job.

        Raises
        ------
        RuntimeError
            If the job has not succeeded (its state and error are in the message).
        """
        job = self.get(job_id)
        if job.result is None:
            reason = f": {job.error.message}" if job.error else ""
            raise RuntimeError(f"job {job_id} is {job.state.value}, no result{reason}")
        return job.result

    def head(self, job_id: str, n: int = 10) -> pa.Table:
        """The first ``n`` rows of a SUCCEEDED job's output, read through its manifest's files.

        The files are read from where the manifest says they are, so the caller needs access to
        the sink (the same machine, or the object store's credentials). Partition columns of a
        ``partition_on`` sink are added from the file paths, decoded as sources decode them (an integer key as an integer).

        Raises
        ------
        RuntimeError
            If the job has not succeeded.
        """
        from spillway.service.result_preview import read_head

        return read_head(self.result(job_id), n)

    def cluster(self) -> ClusterInfo:
        from spillway.cluster.info import ClusterInfo

        return ClusterInfo.model_validate(self._request("GET", "/cluster"))

    def health(self) -> Health:
        response = self._http.get("/healthz")
        return Health.model_validate(response.json())

    def tokens(self) -> list[TokenInfo]:
        """Every API token (never a secret); needs an admin token."""
        return [TokenInfo.model_validate(t) for t in self._request("GET", "/tokens")]

    def create_token(self, name: str, scope: Scope | str = Scope.SUBMIT, *, expires_in: str | None = None) -> IssuedToken:
        """A new API token (``expires_in`` such as ``30d``); its secret is in the answer only."""
        body = {"name": name, "scope": Scope(scope).value, "expires_in": expires_in}
        return IssuedToken.model_validate(self._request("POST", "/tokens", json=body))

    def revoke_token(self, token_id: int) -> TokenInfo:
        """Revoke an API token: its next request is a 401."""
        return TokenInfo.model_validate(self._request("POST", f"/tokens/{path_segment(token_id, 'the token id')}/revoke"))

    def rotate_token(self, token_id: int, *, expires_in: str | None = None) -> IssuedToken:
        """A new secret for an API token, which keeps its id (and so its jobs); the old secret is refused."""
        return IssuedToken.model_validate(self._request("POST", f"/tokens/{path_segment(token_id, 'the token id')}/rotate", json={"expires_in": expires_in}))

    def events(self, job_id: str) -> Iterator[JobEvent]:
        """Follow a job's server-sent events until it is terminal."""
        with self._http.stream("GET", f"/jobs/{path_segment(job_id, 'the job id')}/events", timeout=httpx.Timeout(None, connect=10.0)) as response:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response.status_code, _error_detail(response))
            kind, data = "message", ""
            for line in response.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data += line[5:].strip()
                elif line == "" and data:
                    event = JobEvent(kind, json.loads(data))
                    yield event
                    if kind == "end":
                        return
                    kind, data = "message", ""

    def wait(self, job_id: str, *, on_event: Callable[[JobEvent], None] | None = None, timeout: float | None = None) -> JobView:
        """Block until the job is terminal, calling ``on_event`` on each progress change."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for event in self.events(job_id):
            if on_event is not None:
                on_event(event)
            if event.job is not None:
                return event.job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {event.state.value} after {timeout} s")
        return self.get(job_id)


def _tls(base_url: str) -> ssl.SSLContext | bool:
    """What the client verifies TLS with: httpx's default (certifi's CAs) for ``https``, nothing for plain ``http``.

    Building a verifying context loads the whole CA bundle (20-30 ms, measured), and httpx
    builds it for every client, even one that never speaks TLS. A plain-``http`` client only
    ever requests paths under its base URL and follows no redirects, so it never needs one;
    the ``https`` context is built once per process.
    """
    return _verifying_context() if base_url.startswith("https://") else False


@functools.cache
def _verifying_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()  # what httpx builds by default: certifi's CAs, SSL_CERT_FILE honoured


def _error_detail(response: httpx.Response) -> ErrorDetail:
    try:
        return ErrorDetail.model_validate(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return ErrorDetail(code=f"http_{response.status_code}", message=response.text[:500] or response.reason_phrase)
