"""The aggregations quantile, count_distinct and last on both engines against pandas, and their checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from spillway.jobs.errors import TypeMismatch, UnknownColumn
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import check_spec
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


# any, all, mode, corr, covar and string_agg, against a Python reference of SQL's rules


def more_rows() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 360
    x = rng.normal(size=n)
    y = 2 * x + rng.normal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    y[rng.random(n) < 0.1] = np.nan
    flag = pd.array(rng.choice([True, False, None], n, p=[0.2, 0.5, 0.3]), dtype="boolean")
    shop = rng.choice(["a", "b", "c", "d", None], n).astype(object)
    flag[shop == "d"] = pd.NA  # a group whose flags are all null: any and all give null
    word = rng.choice(["red", "green", "blue", None], n, p=[0.3, 0.3, 0.2, 0.2]).astype(object)
    word[shop == "c"] = None  # a group without words: mode and string_agg give null
    x[shop == "b"] = np.where(np.arange(n)[shop == "b"] % 2 == 0, 1.5, np.nan)  # constant where present: corr is null
    return pd.DataFrame({"shop": shop, "flag": flag, "word": word, "x": x, "y": y, "rank": rng.permutation(n)})


@pytest.fixture(scope="module")
def more_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("more_aggs")
    frame = more_rows()
    for index in range(4):
        frame.iloc[index * 90 : (index + 1) * 90].to_parquet(root / f"part-{index}.parquet", index=False)
    return root


def sql_reference(group: pd.DataFrame) -> dict[str, Any]:
    """One group's aggregates, value by value as PostgreSQL defines them."""
    flags = [bool(f) for f in group.flag if f is not pd.NA]
    words = [w for w in group.word if isinstance(w, str)]
    counts = pd.Series(words).value_counts() if words else pd.Series(dtype=int)
    pairs = group.dropna(subset=["x", "y"])
    n = len(pairs)
    dx, dy = pairs.x - pairs.x.mean(), pairs.y - pairs.y.mean()
    sxx, syy, sxy = float((dx * dx).sum()), float((dy * dy).sum()), float((dx * dy).sum())
    ordered = group.sort_values("rank")
    return {
        "any_flag": any(flags) if flags else None,
        "all_flag": all(flags) if flags else None,
        "any_big": bool((group.x > 1).any()) if group.x.notna().any() else None,
        "common": min(w for w in counts.index if counts[w] == counts.max()) if words else None,
        "corr": sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else None,
        "covar": sxy / (n - 1) if n >= 2 else None,
        "covar_doubled": 2 * sxy / (n - 1) if n >= 2 else None,
        "words": "; ".join(w for w in ordered.word if isinstance(w, str)) if words else None,
        "words_desc": ",".join(w for w in group.sort_values("rank", ascending=False).word if isinstance(w, str)) if words else None,
    }


MORE_AGGS = {
    "any_flag": {"func": "any", "column": "flag"},
    "all_flag": {"func": "all", "column": "flag"},
    "any_big": {"func": "any", "expr": "x > 1"},
    "common": {"func": "mode", "column": "word"},
    "corr": {"func": "corr", "column": "x", "other": "y"},
    "covar": {"func": "covar", "column": "y", "other": "x"},
    "covar_doubled": {"func": "covar", "expr": "x * 2", "other_expr": "y"},
    "words": {"func": "string_agg", "column": "word", "separator": "; ", "order_by": [{"column": "rank"}]},
    "words_desc": {"func": "string_agg", "column": "word", "order_by": [{"column": "rank", "descending": True}]},
}


@pytest.mark.parametrize("by", [["shop"], []], ids=["by shop", "all rows"])
def test_any_all_mode_corr_covar_string_agg_match_sql_on_both_engines(more_data: Path, by: list[str]) -> None:
    frame = more_rows()
    if by:
        rows = [{"shop": None if pd.isna(key) else key, **sql_reference(group)} for key, group in frame.groupby("shop", dropna=False)]
    else:
        rows = [sql_reference(frame)]
    expected = pd.DataFrame(rows, columns=[*by, *MORE_AGGS])
    assert expected["all_flag"].isna().any() and expected["common"].isna().any() and expected["corr"].isna().any() if by else True
    for result in run_both(job(more_data, by, MORE_AGGS)):
        assert_same_rows(result, expected, ordered=False)


def test_string_agg_without_an_order_joins_every_value(more_data: Path) -> None:
    for result in run_both(job(more_data, ["shop"], {"words": {"func": "string_agg", "column": "word", "separator": "|"}})):
        got = {None if pd.isna(k) else k: None if pd.isna(v) else sorted(v.split("|")) for k, v in zip(result.shop, result.words, strict=True)}
        want = {None if pd.isna(k) else k: sorted(w for w in g.word if isinstance(w, str)) or None for k, g in more_rows().groupby("shop", dropna=False)}
        assert got == want


def test_new_aggregations_kinds(more_data: Path) -> None:
    assert check_spec(job(more_data, ["shop"], MORE_AGGS)) == {
        "shop": "string", "any_flag": "bool", "all_flag": "bool", "any_big": "bool", "common": "string", "corr": "numeric",
        "covar": "numeric", "covar_doubled": "numeric", "words": "string", "words_desc": "string",
    }


@pytest.mark.parametrize(
    ("agg", "field", "message"),
    [
        ({"func": "any", "column": "x"}, "steps[0].aggs.out.func", "any takes bool values, not 'x' of kind numeric: give a condition"),
        ({"func": "string_agg", "column": "x"}, "steps[0].aggs.out.func", "string_agg takes string values, not 'x' of kind numeric"),
        ({"func": "corr", "column": "x", "other": "word"}, "steps[0].aggs.out.other", "cannot corr with 'word' of kind string"),
        ({"func": "covar", "column": "word", "other": "x"}, "steps[0].aggs.out.func", "cannot covar column 'word' of kind string"),
        ({"func": "corr", "column": "x", "other": "z"}, "steps[0].aggs.out.other", "unknown column 'z'"),
        ({"func": "string_agg", "column": "word", "order_by": [{"column": "rnk"}]}, "steps[0].aggs.out.order_by[0].column", "unknown column 'rnk'"),
    ],
)
def test_new_aggregations_checks_name_the_field(more_data: Path, agg: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises((TypeMismatch, UnknownColumn)) as info:
        check_spec(job(more_data, ["shop"], {"out": agg}))
    assert info.value.field == field and message in info.value.message


@pytest.mark.parametrize(
    ("agg", "message"),
    [
        ({"func": "corr", "column": "x"}, "'corr' needs a second input"),
        ({"func": "covar", "column": "x", "other": "y", "other_expr": "y"}, "'covar' needs a second input"),
        ({"func": "sum", "column": "x", "other": "y"}, "belong to corr and covar"),
        ({"func": "mode", "column": "x", "separator": ","}, "belong to string_agg"),
    ],
)
def test_new_aggregations_shape_errors(more_data: Path, agg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        job(more_data, ["shop"], {"x": agg})


def test_mode_takes_the_smallest_of_tied_values(tmp_path: Path) -> None:
    frame = pd.DataFrame({"k": ["p", "p", "p", "p", "p", "q", "q", "q"], "s": ["b", "a", "b", "a", None, None, None, "z"],
                          "n": [3.0, 1.0, 3.0, 1.0, 2.0, 7.0, None, None]})
    frame.to_parquet(tmp_path / "rows.parquet", index=False)
    expected = pd.DataFrame({"k": ["p", "q"], "s": ["a", "z"], "n": [1.0, 7.0]})
    for result in run_both(job(tmp_path, ["k"], {"s": {"func": "mode", "column": "s"}, "n": {"func": "mode", "column": "n"}})):
        assert_same_rows(result, expected, ordered=False)
