"""pivot and unpivot on both engines against a pandas reference, and their submit-time checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from spillway.jobs.errors import SpecError, TypeMismatch
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import check_spec
from tests.test_engines import assert_same_rows, run_both

ROWS = 240
LISTED = ["x", "y", "never"]


def rows_frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    v = rng.integers(0, 100, ROWS).astype(float)
    v[rng.random(ROWS) < 0.25] = np.nan
    w = rng.normal(size=ROWS)
    w[rng.random(ROWS) < 0.1] = np.nan
    shop = rng.choice(["a", "b", "c", None], ROWS).astype(object)
    kind = rng.choice(["x", "y", "z", None], ROWS).astype(object)
    return pd.DataFrame({"shop": shop, "kind": kind, "v": v, "w": w, "n": rng.integers(0, 5, ROWS)})


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pivot")
    frame = rows_frame()
    for index in range(3):
        frame.iloc[index * 80 : (index + 1) * 80].to_parquet(root / f"part-{index}.parquet", index=False)
    return root


def job(data: Path, *steps: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate({"source": {"format": "parquet", "path": str(data)}, "steps": list(steps), "sink": {"path": "/tmp/unused"}})


def reference_pivot(frame: pd.DataFrame, index: list[str], agg: str, values: list[Any], prefix: str = "") -> pd.DataFrame:
    """SQL's ``agg(v) FILTER (WHERE kind = value)`` per group, row by row in Python."""
    keys = index or ["__all"]
    frame = frame.assign(__all=0)
    rows = []
    for key, group in frame.groupby(keys, dropna=False, sort=False):
        row = dict(zip(index, key if isinstance(key, tuple) else (key,), strict=False)) if index else {}
        for value in values:
            cell = group.loc[group["kind"] == value, "v"].dropna()
            if agg == "count":
                row[prefix + str(value)] = len(cell)
            elif agg == "nunique":
                row[prefix + str(value)] = cell.nunique()
            else:
                row[prefix + str(value)] = getattr(cell, agg)() if len(cell) else None
        rows.append(row)
    return pd.DataFrame(rows, columns=[*index, *(prefix + str(v) for v in values)])


@pytest.mark.parametrize("agg", ["sum", "count", "mean", "max", "nunique", "std"])
@pytest.mark.parametrize("index", [["shop"], []], ids=["by shop", "all rows"])
def test_pivot_matches_the_filtered_aggregates_on_both_engines(data: Path, agg: str, index: list[str]) -> None:
    step = {"op": "pivot", "index": index, "columns": "kind", "values": "v", "agg": agg, "on_values": LISTED, "prefix": "v_"}
    expected = reference_pivot(rows_frame(), index, agg, LISTED, "v_")
    for result in run_both(job(data, step)):
        assert_same_rows(result, expected, ordered=False)


def test_pivot_on_numbers_names_columns_by_the_value(data: Path) -> None:
    step = {"op": "pivot", "index": ["shop"], "columns": "n", "values": "w", "agg": "min", "on_values": [0, 3]}
    frame = rows_frame()
    expected = frame.groupby("shop", dropna=False).apply(
        lambda g: pd.Series({str(n): g.loc[g.n == n, "w"].min() for n in (0, 3)}), include_groups=False
    ).reset_index()
    assert check_spec(job(data, step)) == {"shop": "string", "0": "numeric", "3": "numeric"}
    for result in run_both(job(data, step)):
        assert_same_rows(result, expected, ordered=False)


def test_pivot_needs_listed_values() -> None:
    with pytest.raises(ValidationError, match="a pivot needs the values of .kind. that become columns.*known at submit"):
        JobSpec.model_validate({"source": {"format": "parquet", "path": "x"}, "sink": {"path": "y"},
                                "steps": [{"op": "pivot", "index": ["shop"], "columns": "kind", "values": "v", "agg": "sum"}]})
    with pytest.raises(ValidationError, match="'x' is listed twice"):
        JobSpec.model_validate({"source": {"format": "parquet", "path": "x"}, "sink": {"path": "y"},
                                "steps": [{"op": "pivot", "columns": "kind", "values": "v", "agg": "sum", "on_values": ["x", "x"]}]})


@pytest.mark.parametrize(
    ("step", "error", "field", "message"),
    [
        ({"columns": "kind", "values": "v", "agg": "sum", "on_values": [1]}, TypeMismatch, "steps[0].on_values[0]",
         "on_values lists 1 (numeric) but 'kind' is string"),
        ({"columns": "kind", "values": "shop", "agg": "mean", "on_values": ["x"]}, TypeMismatch, "steps[0].agg",
         "cannot mean column 'shop' of kind string"),
        ({"index": ["shop"], "columns": "kind", "values": "v", "agg": "sum", "on_values": ["shop"]}, SpecError, "steps[0].on_values",
         "output column 'shop' is also an index column"),
        ({"columns": "kynd", "values": "v", "agg": "sum", "on_values": ["x"]}, SpecError, "steps[0].columns", "unknown column 'kynd'"),
    ],
)
def test_pivot_checks_name_the_field(data: Path, step: dict[str, Any], error: type[Exception], field: str, message: str) -> None:
    with pytest.raises(error) as info:
        check_spec(job(data, {"op": "pivot", **step}))
    assert info.value.field == field and message in info.value.message  # type: ignore[attr-defined]


@pytest.mark.parametrize("include_nulls", [False, True])
def test_unpivot_matches_pandas_melt_on_both_engines(data: Path, include_nulls: bool) -> None:
    step = {"op": "unpivot", "index": ["shop", "kind"], "columns": ["v", "w", "n"], "name": "measure", "value": "amount",
            "include_nulls": include_nulls}
    expected = rows_frame().melt(id_vars=["shop", "kind"], value_vars=["v", "w", "n"], var_name="measure", value_name="amount")
    if not include_nulls:
        expected = expected.dropna(subset=["amount"])
    assert check_spec(job(data, step)) == {"shop": "string", "kind": "string", "measure": "string", "amount": "numeric"}
    for result in run_both(job(data, step)):
        assert_same_rows(result, expected, ordered=False)


def test_unpivot_keeps_every_other_column_by_default(data: Path) -> None:
    step = {"op": "unpivot", "columns": ["v", "w"]}
    expected = rows_frame().melt(id_vars=["shop", "kind", "n"], value_vars=["v", "w"], var_name="name").dropna(subset=["value"])
    for result in run_both(job(data, step)):
        assert_same_rows(result, expected, ordered=False)


def test_pivot_then_unpivot_round_trips(data: Path) -> None:
    pivot = {"op": "pivot", "index": ["shop"], "columns": "kind", "values": "v", "agg": "sum", "on_values": ["x", "y"]}
    unpivot = {"op": "unpivot", "columns": ["x", "y"], "name": "kind", "value": "v"}
    frame = rows_frame()
    expected = frame[frame.kind.isin(["x", "y"])].dropna(subset=["v"]).groupby(["shop", "kind"], dropna=False).v.sum().reset_index()
    for result in run_both(job(data, pivot, unpivot)):
        assert_same_rows(result, expected, ordered=False)


@pytest.mark.parametrize(
    ("step", "field", "message"),
    [
        ({"columns": ["v", "shop"]}, "steps[0].columns", "unpivoted columns need one kind: 'v' is numeric but 'shop' is string"),
        ({"columns": ["v"], "index": ["shop", "v"]}, "steps[0].index", "'v' is both an index column and unpivoted"),
        ({"columns": ["v"], "index": ["shop"], "name": "shop"}, "steps[0].name", "output column 'shop' (name) is also an index column"),
    ],
)
def test_unpivot_checks_name_the_field(data: Path, step: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises((SpecError, TypeMismatch)) as info:
        check_spec(job(data, {"op": "unpivot", **step}))
    assert info.value.field == field and message in info.value.message  # type: ignore[attr-defined]
