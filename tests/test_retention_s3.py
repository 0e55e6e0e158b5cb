"""Deleting a job's output on an object store (issue 18 item 5), against moto's S3 server on loopback.

The same rules as on local disk: exactly the manifest's keys, then the markers; a sink a later
job appended to is refused and left whole.
"""

from __future__ import annotations

import pytest

pytest.importorskip("moto.server", reason="the S3 tests need moto's server mode: pip install 'moto[server]' (the test extra)")

from spillway.service.client import ApiError, SpillwayClient  # noqa: E402
from tests.test_s3 import BUCKET, api, endpoint, prefix, s3, s3_service, succeed  # noqa: E402, F401 - fixtures


def test_delete_output_on_s3_removes_exactly_the_listed_keys(api: SpillwayClient, s3: object, prefix: str) -> None:
    spec = {"source": {"format": "parquet", "path": f"s3://{BUCKET}/etl/in/sales"}, "steps": [{"op": "limit", "n": 4}], "sink": {"path": prefix}}
    first = succeed(api, spec)
    later = succeed(api, {**spec, "sink": {"path": prefix, "mode": "append"}})
    root = prefix.removeprefix("s3://")
    s3.pipe(f"{root}/notes.txt", b"not listed")  # type: ignore[attr-defined]
    jobs = {j.result.version: j.id for j in api.list(limit=50).items if j.result is not None and j.result.location == prefix}

    with pytest.raises(ApiError) as refused:
        api.delete(jobs[first.version], output=True)
    assert refused.value.status == 409 and refused.value.detail.code == "output_superseded"
    s3.invalidate_cache()  # type: ignore[attr-defined]
    assert s3.exists(f"{root}/_manifest.json")  # type: ignore[attr-defined]

    deleted = api.delete(jobs[later.version], output=True)
    assert deleted.output is not None and deleted.output.files_deleted == len(later.files)
    s3.invalidate_cache()  # type: ignore[attr-defined]
    assert sorted(key.rsplit("/", 1)[-1] for key in s3.find(root)) == ["notes.txt"]  # type: ignore[attr-defined]
