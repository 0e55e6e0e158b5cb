"""Ids and names the SDK puts in a URL's path stay one segment: a ``/`` or ``..`` in them cannot reach another job.

Found by a hostile run: ``spillway delete 'nonexist/../<id>'`` deleted job <id>, and an empty id
asked for the job list and failed on its answer with a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spillway.service.client import ApiError, BadArgument, path_segment
from spillway.service.launcher import ServiceProcess
from tests.conftest import wait_terminal


def test_a_path_in_a_job_id_reaches_no_other_job(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    with service.client() as api:
        job = wait_terminal(api, api.submit({"name": "kept", "source": {"format": "parquet", "path": str(sample_data["sales"])},
                                             "steps": [{"op": "limit", "n": 2}], "sink": {"path": str(tmp_path / "out")}}).id)
        for twisted in (f"nonexist/../{job.id}", f"./{job.id}", f"{job.id}/.", f"..%2F{job.id}", "..", "."):
            with pytest.raises(ApiError) as refused:
                api.delete(twisted)
            assert refused.value.status == 404, twisted
            with pytest.raises(ApiError):
                api.get(twisted)
        assert api.get(job.id).id == job.id  # still there
        with pytest.raises(BadArgument, match="job id is empty"):
            api.get("")


@pytest.mark.parametrize(("value", "expected"), [("abc", "abc"), ("a/b", "a%2Fb"), ("..", "%2E%2E"), ("a..b", "a..b"), ("a b", "a%20b")])
def test_a_segment_is_quoted_whole(value: str, expected: str) -> None:
    assert path_segment(value, "x") == expected
