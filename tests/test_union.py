"""The union step on both engines against plain pandas, and the schema checks it gets at submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from spillway.jobs.errors import SpecError, TypeMismatch
from spillway.jobs.sandbox import PathNotAllowed, check_paths
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import check_spec
from spillway.service.errors import field_path
from tests.test_engines import assert_same_rows, run_both


def orders(year: int, rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "order_id": np.arange(rows) + year * 1000,
        "shop": rng.choice(["a", "b", None], rows),
        "amount": rng.integers(1, 5, rows),  # ints here; floats with nulls in 2024
    })


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("union")
    for year, seed in ((2022, 1), (2023, 2)):
        frame = orders(year, 60, seed)
        (root / str(year)).mkdir()
        for index in range(3):
            frame.iloc[index * 20 : (index + 1) * 20].to_parquet(root / str(year) / f"part-{index}.parquet", index=False)
    late = orders(2024, 30, 3).assign(amount=lambda f: f.amount.where(f.index % 4 != 0).astype("float64"))
    late[["amount", "shop", "order_id"]].to_parquet(root / "2024.parquet", index=False)  # other column order
    pd.DataFrame({"order_id": [1], "shop": ["a"], "amount": ["lots"]}).to_parquet(root / "text.parquet", index=False)
    pd.DataFrame({"order_id": [1], "shop": ["a"]}).to_parquet(root / "narrow.parquet", index=False)
    return root


def job(data: Path, steps: list[dict[str, Any]], **extra: Any) -> JobSpec:
    sources = {
        "y2022": {"format": "parquet", "path": str(data / "2022")},
        "y2023": {"format": "parquet", "path": str(data / "2023")},
        "y2024": {"format": "parquet", "path": str(data / "2024.parquet")},
        "text": {"format": "parquet", "path": str(data / "text.parquet")},
        "narrow": {"format": "parquet", "path": str(data / "narrow.parquet")},
        **extra,
    }
    return JobSpec.model_validate({"sources": sources, "source": "y2022", "steps": steps, "sink": {"path": "/tmp/unused"}})


def _all_years(data: Path) -> pd.DataFrame:
    late = pd.read_parquet(data / "2024.parquet")[["order_id", "shop", "amount"]]
    return pd.concat([orders(2022, 60, 1), orders(2023, 60, 2), late], ignore_index=True)


def test_union_all_keeps_every_row_and_matches_columns_by_name(data: Path) -> None:
    spec = job(data, [{"op": "union", "sources": ["y2023", "y2024"]}])
    assert check_spec(spec) == {"order_id": "numeric", "shop": "string", "amount": "numeric"}
    for result in run_both(spec):
        assert list(result.columns) == ["order_id", "shop", "amount"]
        assert_same_rows(result, _all_years(data), ordered=False)


def test_union_distinct_drops_repeats_across_and_within_sources(data: Path) -> None:
    shops = {"from": "y2023", "steps": [{"op": "select", "columns": ["shop", "amount"]}]}
    steps = [{"op": "select", "columns": ["shop", "amount"]}, {"op": "union", "sources": ["shops", "shops"], "distinct": True}]
    expected = pd.concat([orders(2022, 60, 1), orders(2023, 60, 2)])[["shop", "amount"]].drop_duplicates()
    assert len(expected) <= 12  # 3 shops (null included) by 4 amounts, out of 180 rows
    for result in run_both(job(data, steps, shops=shops)):
        assert_same_rows(result, expected, ordered=False)


def test_a_union_inside_a_derived_source_then_a_groupby(data: Path) -> None:
    spec = job(data, [{"op": "groupby", "by": ["shop"], "aggs": {"n": {"func": "size"}, "total": {"func": "sum", "column": "amount"}}}],
               recent={"from": "y2023", "steps": [{"op": "union", "sources": ["y2024"]}]})
    spec = spec.model_copy(update={"source": "recent"})
    both = pd.concat([orders(2023, 60, 2), pd.read_parquet(data / "2024.parquet")])
    expected = both.groupby("shop", dropna=False).agg(n=("amount", "size"), total=("amount", "sum")).reset_index()
    for result in run_both(spec):
        assert_same_rows(result, expected, ordered=False)


@pytest.mark.parametrize(
    ("source", "error", "fragment"),
    [
        ("narrow", SpecError, "source 'narrow' lacks amount"),
        ("text", TypeMismatch, "column 'amount' is numeric here but string in source 'text'"),
    ],
)
def test_a_union_of_other_columns_is_refused_naming_the_source(data: Path, source: str, error: type[SpecError], fragment: str) -> None:
    with pytest.raises(error) as info:
        check_spec(job(data, [{"op": "union", "sources": ["y2023", source]}]))
    assert info.value.field == "steps[0].sources[1]" and fragment in info.value.message, info.value.message


def test_extra_columns_are_refused_too(data: Path) -> None:
    with pytest.raises(SpecError) as info:
        check_spec(job(data, [{"op": "select", "columns": ["order_id", "shop"]}, {"op": "union", "sources": ["y2023"]}]))
    assert info.value.field == "steps[1].sources[0]" and "has amount too" in info.value.message


def test_union_source_names_are_checked_and_cycles_found(data: Path) -> None:
    with pytest.raises(ValidationError) as info:
        job(data, [{"op": "union", "sources": ["y2023", "y2025"]}])
    error = info.value.errors()[0]
    assert field_path(error["loc"]) == "steps[0].sources[1]" and "no source named 'y2025'" in error["msg"]
    with pytest.raises(ValidationError, match="cycle"):
        job(data, [], loop={"from": "y2022", "steps": [{"op": "union", "sources": ["loop"]}]})


def test_an_inline_union_source_is_inside_the_data_roots(data: Path) -> None:
    spec = job(data, [{"op": "union", "sources": [{"format": "csv", "path": "/etc/passwd"}]}])
    with pytest.raises(PathNotAllowed) as info:
        check_paths(spec, [str(data)])
    assert info.value.field == "steps[0].sources[0].path"
