"""A SQL source over sources on an object store (moto's S3 server): the Polars engine reads them with
the service's endpoint, and the job commits its answer to the bucket."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from spillway.service.client import SpillwayClient
from tests.test_s3 import ROOT, api, committed, endpoint, prefix, s3, s3_service, succeed  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


def test_sql_over_an_s3_source_runs_on_polars_and_commits_to_s3(api: SpillwayClient, prefix: str, s3: Any) -> None:  # noqa: F811
    spec = {
        "sources": {
            "products": {"format": "csv", "path": f"{ROOT}/in/products.csv"},
            "q": {"sql": "SELECT category, count(*) AS n FROM products GROUP BY category ORDER BY category"},
        },
        "source": "q",
        "sink": {"path": prefix},
    }
    succeed(api, spec)
    with s3.open(f"{ROOT.removeprefix('s3://')}/in/products.csv") as handle:
        products = pd.read_csv(handle)
    want = products.groupby("category").size().rename("n").reset_index()
    got = committed(s3, prefix).sort_values("category").reset_index(drop=True)
    assert got["category"].tolist() == want["category"].tolist() and got["n"].tolist() == want["n"].tolist()
