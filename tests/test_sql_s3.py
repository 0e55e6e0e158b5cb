"""A SQL source beside sources on an object store (moto's S3 server): the Polars engine, the only one
that runs SQL, does not read object stores yet, so the submit is refused naming the path."""

from __future__ import annotations

import pytest

from service.client import ApiError, SpillwayClient
from tests.test_s3 import ROOT, api, endpoint, prefix, s3, s3_service  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


def test_sql_beside_an_s3_source_is_a_422_naming_the_path(api: SpillwayClient, prefix: str) -> None:  # noqa: F811
    spec = {
        "sources": {
            "products": {"format": "csv", "path": f"{ROOT}/in/products.csv"},
            "q": {"sql": "SELECT category, count(*) AS n FROM products GROUP BY category"},
        },
        "source": "q",
        "sink": {"path": prefix},
    }
    with pytest.raises(ApiError) as info:
        api.submit(spec)
    assert info.value.status == 422 and info.value.detail.field == "sources.products.path"
    assert "on an object store, which the Polars engine does not read yet" in info.value.detail.message
