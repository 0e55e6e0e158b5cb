"""The aggregations quantile, count_distinct and last on both engines against pandas, and their checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from jobs.errors import TypeMismatch
from jobs.spec import JobSpec
from jobs.validate import check_spec
from tests.test_engines import assert_same_rows, run_both

ROWS = 300


def rows_frame() -> pd.DataFrame:
    rng = np.random.default_rng(2)
    value = rng.normal(size=ROWS)
    value[rng.random(ROWS) < 0.2] = np.nan
    shop = rng.choice(["a", "b", "c"], ROWS)
    return pd.DataFrame({"shop": shop, "region": pd.Series(shop).map({"a": "north", "b": "south", "c": "north"}),
                         "maybe": rng.choice(["x", "y", None], ROWS), "v": value})


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("aggs")
    frame = rows_frame()
    for index in range(3):
        frame.iloc[index * 100 : (index + 1) * 100].to_parquet(root / f"part-{index}.parquet", index=False)
    return root


def job(data: Path, by: list[str], aggs: dict[str, Any]) -> JobSpec:
    step = {"op": "groupby", "by": by, "aggs": aggs}
    return JobSpec.model_validate({"source": {"format": "parquet", "path": str(data)}, "steps": [step], "sink": {"path": "/tmp/unused"}})


AGGS = {
    "p95": {"func": "quantile", "column": "v", "q": 0.95},
    "p10_doubled": {"func": "quantile", "expr": "v * 2", "q": 0.1},
    "lowest": {"func": "quantile", "column": "v", "q": 0},
    "kinds": {"func": "count_distinct", "column": "maybe"},
    "region": {"func": "last", "column": "region"},
}


@pytest.mark.parametrize("by", [["shop"], []], ids=["by shop", "all rows"])
def test_quantile_count_distinct_and_last_match_pandas_on_both_engines(data: Path, by: list[str]) -> None:
    frame = rows_frame().assign(v2=lambda f: f.v * 2, one=0)
    grouped = frame.groupby(by or ["one"])
    expected = pd.DataFrame({
        "p95": grouped.v.quantile(0.95), "p10_doubled": grouped.v2.quantile(0.1), "lowest": grouped.v.min(),
        "kinds": grouped.maybe.nunique(), "region": grouped.region.last(),
    }).reset_index()
    expected = expected[[*by, *AGGS]]
    if not by:
        expected = expected.assign(region="north")  # the last region depends on the order rows are met: one value here
    for result in run_both(job(data, by, AGGS)):
        if not by:
            result = result.assign(region="north")
        assert_same_rows(result, expected, ordered=False)


def test_quantile_is_numeric_and_needs_q(data: Path) -> None:
    assert check_spec(job(data, ["shop"], AGGS)) == {"shop": "string", "p95": "numeric", "p10_doubled": "numeric", "lowest": "numeric",
                                                     "kinds": "numeric", "region": "string"}
    with pytest.raises(TypeMismatch) as info:
        check_spec(job(data, ["shop"], {"p": {"func": "quantile", "column": "maybe", "q": 0.5}}))
    assert info.value.field == "steps[0].aggs.p.func" and "cannot quantile column 'maybe' of kind string" in info.value.message


@pytest.mark.parametrize(
    ("agg", "message"),
    [
        ({"func": "quantile", "column": "v"}, "needs 'q'"),
        ({"func": "sum", "column": "v", "q": 0.5}, "only it takes one"),
        ({"func": "quantile", "column": "v", "q": 1.5}, "less than or equal to 1"),
    ],
)
def test_quantile_shape_errors(data: Path, agg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        job(data, ["shop"], {"x": agg})


def test_count_distinct_counts_the_null_key_group_on_both_engines(tmp_path: Path) -> None:
    # dask's groupby nunique drops the group of a null key (the merge then gave it a null count).
    frame = pd.DataFrame({"k": ["a", None, "a", None, "b", None], "v": [1.0, 2.0, 2.0, 3.0, None, 2.0]})
    frame.iloc[:3].to_parquet(tmp_path / "part-0.parquet", index=False)
    frame.iloc[3:].to_parquet(tmp_path / "part-1.parquet", index=False)
    aggs = {"kinds": {"func": "count_distinct", "column": "v"}, "distinct": {"func": "nunique", "column": "v"}, "n": {"func": "size"}}
    expected = pd.DataFrame({"k": ["a", None, "b"], "kinds": [2, 2, 0], "distinct": [2, 2, 0], "n": [2, 3, 1]})
    for result in run_both(job(tmp_path, ["k"], aggs)):
        assert_same_rows(result, expected, ordered=False)
