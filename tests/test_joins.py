"""Cross joins and join conditions (``where``) on both engines against a pandas reference, and their checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from spillway.jobs.errors import TypeMismatch, UnknownColumn
from spillway.jobs.spec import JobSpec
from spillway.jobs.pipeline import build_frame
from spillway.jobs.validate import check_spec, plan_spec
from tests.test_engines import assert_same_rows, run_both


def events() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    x = rng.integers(0, 100, 90).astype(float)
    x[rng.random(90) < 0.15] = np.nan
    return pd.DataFrame({"id": np.arange(90), "k": rng.choice(["a", "b", None], 90).astype(object), "x": x, "note": "e"})


def bands() -> pd.DataFrame:
    return pd.DataFrame({
        "k": ["a", "a", "b", "b", None, "a"],
        "lo": [0.0, 40.0, 0.0, 50.0, 0.0, np.nan],
        "hi": [39.0, 99.0, 49.0, 99.0, 99.0, 10.0],
        "label": ["a-low", "a-high", "b-low", "b-high", "none", "a-null"],
        "note": ["b1", "b2", "b3", "b4", "b5", "b6"],
    })


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("joins")
    (root / "events").mkdir()
    frame = events()
    for index in range(3):
        frame.iloc[index * 30 : (index + 1) * 30].to_parquet(root / "events" / f"part-{index}.parquet", index=False)
    bands().to_parquet(root / "bands.parquet", index=False)
    return root


def job(data: Path, step: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate({
        "sources": {"bands": {"format": "parquet", "path": str(data / "bands.parquet")}},
        "source": {"format": "parquet", "path": str(data / "events")},
        "steps": [{"op": "join", "right": "bands", **step}],
        "sink": {"path": "/tmp/unused"},
    })


def crossed() -> pd.DataFrame:
    """Every event with every band, clashing right names suffixed as the join does."""
    return events().merge(bands(), how="cross", suffixes=("", "_right"))


def within(frame: pd.DataFrame) -> pd.Series:
    """``lo <= x <= hi`` with SQL's nulls: a null on either side keeps no row."""
    return (frame.x >= frame.lo) & (frame.x <= frame.hi) & frame.x.notna() & frame.lo.notna()


def test_cross_join_pairs_every_row(data: Path) -> None:
    expected = crossed()
    assert check_spec(job(data, {"how": "cross"})) == {"id": "numeric", "k": "string", "x": "numeric", "note": "string", "k_right": "string",
                                                       "lo": "numeric", "hi": "numeric", "label": "string", "note_right": "string"}
    for result in run_both(job(data, {"how": "cross"})):
        assert_same_rows(result, expected, ordered=False)


def test_range_join_without_keys_is_a_filtered_cross_join(data: Path) -> None:
    frame = crossed()
    expected = frame[within(frame)]
    for step in ({"where": "lo <= x and x <= hi"}, {"how": "cross", "where": "between(x, lo, hi)"}):
        for result in run_both(job(data, step)):
            assert_same_rows(result, expected, ordered=False)


def test_range_join_with_keys_matches_keys_then_the_condition(data: Path) -> None:
    merged = events().dropna(subset=["k"]).merge(bands().dropna(subset=["k"]), on="k", suffixes=("", "_right"))
    expected = merged[within(merged) & (merged.note_right != "b2")]
    for result in run_both(job(data, {"on": ["k"], "where": "x >= lo and x <= hi and note_right != 'b2'"})):
        assert_same_rows(result, expected, ordered=False)


def test_cross_join_then_a_filter_on_left_and_right_names(data: Path) -> None:
    frame = crossed()
    expected = frame[(frame.k == frame.k_right) & frame.k.notna()]
    for result in run_both(job(data, {"how": "cross", "where": "k == k_right"})):
        assert_same_rows(result, expected, ordered=False)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"how": "cross", "on": ["k"]}, "a cross join pairs every row with every right row and takes no keys"),
        ({}, "give 'on', or both 'left_on' and 'right_on' (or a 'where' condition)"),
        ({"how": "left"}, "give 'on', or both 'left_on' and 'right_on' (or a 'where' condition)"),
    ],
)
def test_join_shape_errors(data: Path, step: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        job(data, step)


_RIGHT = "b.lo, b.hi, b.label, b.note AS note_right"
_CONDITION = "b.lo <= e.x AND e.x <= b.hi"


def duckdb_answer(how: str, keyed: bool) -> pd.DataFrame:
    """The SQL answer, from DuckDB: the condition in ON (and the keys, as USING would match them)."""
    duckdb = pytest.importorskip("duckdb")
    connection = duckdb.connect()
    connection.register("e", events())
    connection.register("b", bands())
    on = f"e.k = b.k AND {_CONDITION}" if keyed else _CONDITION
    if how in ("semi", "anti"):
        exists = "EXISTS" if how == "semi" else "NOT EXISTS"
        query = f"SELECT e.* FROM e WHERE {exists} (SELECT 1 FROM b WHERE {on})"
    else:
        # on: [k] gives one key column, the matched side's key (SQL's USING); without keys both sides' k.
        keys = "COALESCE(e.k, b.k) AS k" if keyed else "e.k"
        right = _RIGHT if keyed else f"b.k AS k_right, {_RIGHT}"
        query = f"SELECT e.id, {keys}, e.x, e.note, {right} FROM e {how.upper()} JOIN b ON {on}"
    return connection.sql(query).df()


@pytest.mark.parametrize("how", ["left", "right", "outer", "semi", "anti"])
@pytest.mark.parametrize("keyed", [True, False], ids=["keys", "no_keys"])
def test_a_where_on_an_outer_semi_or_anti_join_is_part_of_on_as_in_sql(data: Path, how: str, keyed: bool) -> None:
    """Unmatched rows are kept (or tested for) after the keys and the condition, not filtered after the join."""
    expected = duckdb_answer("full" if how == "outer" else how, keyed)
    step = {"how": how, "where": "lo <= x and x <= hi", **({"on": ["k"]} if keyed else {})}
    assert list(check_spec(job(data, step))) == list(expected.columns)
    for result in run_both(job(data, step)):
        assert_same_rows(result, expected, ordered=False)
    inner = duckdb_answer("inner", keyed)
    assert len(expected) != len(inner) if how not in ("semi", "anti") else 0 < len(expected) < len(events())


def test_join_where_is_checked_against_the_joined_columns(data: Path) -> None:
    with pytest.raises(UnknownColumn) as unknown:
        check_spec(job(data, {"how": "cross", "where": "x > low"}))
    assert unknown.value.field == "steps[0].where" and "unknown column 'low'" in unknown.value.message
    with pytest.raises(TypeMismatch) as mismatch:
        check_spec(job(data, {"where": "x + lo"}))
    assert mismatch.value.field == "steps[0].where" and "a join's where needs a condition (bool)" in mismatch.value.message
    with pytest.raises(TypeMismatch) as compared:
        check_spec(job(data, {"where": "label > x"}))
    assert compared.value.field == "steps[0].where"


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["right", "outer"])
def test_an_outer_join_on_dask_cudf_keeps_an_integer_count_an_integer(tmp_path: Path, how: str) -> None:
    """A count per key, outer-joined to a table with keys it lacks, stays int64 with nulls on cuDF partitions.

    Prints the dtypes dask and cuDF give at each stage, so a device run shows where a float came from."""
    pytest.importorskip("dask_cudf")
    import cudf
    import dask
    import dask.dataframe as dd

    from spillway.jobs.pipeline import backend_config

    counts = cudf.DataFrame({"k": [1, 2, 3], "n": [3, 2, 1]})
    names = cudf.DataFrame({"k": [1, 2, 4], "name": ["a", "b", "d"]})
    left, right = dd.from_pandas(counts, npartitions=1), dd.from_pandas(names, npartitions=1)
    merged = left.merge(right, on="k", how="outer")
    print("merge meta:", dict(merged._meta.dtypes), "computed:", dict(merged.compute().dtypes))
    lone = right[right["k"].isnull()]
    print("concat meta:", dict(dd.concat([merged, lone])._meta.dtypes))
    pq_path = tmp_path / "c.parquet"
    counts.to_parquet(pq_path)
    names.to_parquet(tmp_path / "n.parquet")
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(pq_path)},
                                   "steps": [{"op": "join", "right": {"format": "parquet", "path": str(tmp_path / "n.parquet")}, "on": ["k"],
                                              "how": how},
                                             {"op": "assign", "column": "label", "expr": "cast(n, 'string')"}],
                                   "sink": {"path": str(tmp_path / "out")}})
    with backend_config("cudf"), dask.config.set(scheduler="sync"):
        frame = build_frame(spec, plan_spec(spec)).compute()
    print("job:", dict(frame.dtypes))
    assert str(frame["n"].dtype) == "int64"
    expected = ["3", "2", "1", None] if how == "outer" else ["3", "2", None]
    assert sorted(frame["label"].to_arrow().to_pylist(), key=str) == sorted(expected, key=str)
