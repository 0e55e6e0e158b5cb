"""Join keys of one kind but different types (an integer with a float, decimals, datetime units) on both engines.

The language lets an integer key meet a float key (both are numbers); Polars refused such a join at run
time (SchemaError: datatypes of join keys don't match), while pandas' merge compares them as floats. The
Polars engine now joins such a pair cast to one type and keeps each side's own key column as the Dask
engine does: the left's under ``on`` for inner, left, semi and anti joins, the compared type for right
and outer ones, and both sides' under ``left_on``/``right_on``.
"""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import TypeMismatch
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.join_key_types import join_key_type
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.test_engines import assert_same_rows, run_both

D = decimal.Decimal


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("join_key_types")
    # 1.0 and 3.0 equal integers (they match), 2.5 has a fraction (it matches neither 2 nor 3), a null matches nothing.
    pq.write_table(pa.table({"k": pa.array([1, 2, 3, None], pa.int64()), "j": ["u", "u", "v", "u"], "a": ["x", "y", "z", "n"]}), root / "ints.parquet")
    pq.write_table(pa.table({"k": pa.array([1.0, 2.5, 3.0, None]), "kf": pa.array([1.0, 2.5, 3.0, None]), "j": ["u"] * 4,
                             "b": ["p", "q", "r", "s"]}), root / "floats.parquet")
    # The floats as a parquet decimal: read as float64 (a read cast, so a filtered join runs before the casts).
    pq.write_table(pa.table({"k": pa.array([D("1.00"), D("2.50"), D("3.00"), None], pa.decimal128(10, 2)), "b": ["p", "q", "r", "s"]}),
                   root / "decimals.parquet")
    pq.write_table(pa.table({"k": pa.array([D("1.000"), D("2.501"), D("0.100"), None], pa.decimal128(12, 3)), "c": ["e1", "e2.501", "e0.1", "en"]}),
                   root / "decimals3.parquet")
    pq.write_table(pa.table({"k": pa.array([1.0, 2.5, 0.1, None]), "f": ["f1", "f2.5", "f0.1", "fn"]}), root / "tenths.parquet")
    moments = [datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2, 0, 0, 0, 1), None]
    pq.write_table(pa.table({"k": pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 1, 3), None]), "a": ["d1", "d3", "dn"]}), root / "dates.parquet")
    pq.write_table(pa.table({"k": pa.array(moments, pa.timestamp("ns")), "b": ["t1", "t2", "tn"]}), root / "nanos.parquet")
    # A JSON-lines key with no value: Polars reads the column as Null, pandas as floats.
    (root / "nulls.jsonl").write_text("".join(f'{{"k": null, "c": "c{i}"}}\n' for i in range(3)))
    # Keys one engine read in types Polars did not join: text with a parquet dictionary (Polars' Categorical), two time
    # zones (one instant: 01:00 in Paris is 00:00 UTC), durations of two units.
    words = pa.array(["1", "2", None])
    pq.write_table(pa.table({"k": words, "a": ["w1", "w2", "wn"]}), root / "words.parquet")
    pq.write_table(pa.table({"k": pa.array(["2", "3", None]).dictionary_encode(), "b": ["d2", "d3", "dn"]}), root / "coded.parquet")
    utc = [datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 1, 1), None]
    pq.write_table(pa.table({"k": pa.array(utc, pa.timestamp("us", tz="UTC")), "a": ["u0", "u1", "un"]}), root / "utc.parquet")
    paris = pa.array([datetime.datetime(2024, 1, 1), None, datetime.datetime(2024, 1, 1, 2)], pa.timestamp("ns", tz="UTC")).cast(
        pa.timestamp("ns", tz="Europe/Paris"))
    pq.write_table(pa.table({"k": paris, "b": ["p1", "pn", "p3"]}), root / "paris.parquet")
    seconds = [datetime.timedelta(seconds=1), datetime.timedelta(seconds=2), None]
    pq.write_table(pa.table({"k": pa.array(seconds, pa.duration("us")), "a": ["s1", "s2", "sn"]}), root / "micros.parquet")
    pq.write_table(pa.table({"k": pa.array(seconds[1:] + [datetime.timedelta(seconds=3)], pa.duration("ns")), "b": ["n2", "nn", "n3"]}),
                   root / "nanoseconds.parquet")
    return root


def source(data: Path, name: str) -> dict[str, str]:
    """The file ``name`` under ``data`` as a source: JSON lines where the name ends so, parquet otherwise (its stem)."""
    return {"format": "jsonl", "path": str(data / name)} if name.endswith(".jsonl") else {"format": "parquet", "path": str(data / f"{name}.parquet")}


def join_job(data: Path, left: str, right: str, *, before: list[dict[str, Any]] | None = None, **step: Any) -> JobSpec:
    """``left`` joined with ``right`` (files under ``data``) as ``step`` says, after the steps ``before``."""
    return JobSpec.model_validate({"source": source(data, left), "steps": [*(before or []), {"op": "join", "right": source(data, right), **step}],
                                   "sink": {"path": "/tmp/unused"}})


def polars_rows(spec: JobSpec) -> pl.DataFrame:
    return build_lazyframe(plan_spec(spec), filters_before_casts=True).collect()


def dask_rows(spec: JobSpec) -> pd.DataFrame:
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(spec, plan_spec(spec)).compute().reset_index(drop=True)


def labels(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(None if pd.isna(v) else v for v in row) for row in frame[list(columns)].itertuples(index=False)), key=repr)


# The (a, b) pairs of ints.parquet's and floats.parquet's rows that meet on k, and the rows each side keeps alone.
_MATCHED = [("x", "p"), ("z", "r")]
_INTS_ALONE = [("y", None), ("n", None)]
_FLOATS_ALONE = [(None, "q"), (None, "s")]
_KEPT = {"inner": (False, False), "left": (True, False), "right": (False, True), "outer": (True, True)}
_LAYOUTS = {  # left, right, keys
    "int on float": ("ints", "floats", {"on": ["k"]}),
    "float on int": ("floats", "ints", {"on": ["k"]}),
    "int left_on, float right_on": ("ints", "floats", {"left_on": ["k"], "right_on": ["kf"]}),
}


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer", "semi", "anti"])
@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_an_integer_key_joins_a_float_key_as_on_the_dask_engine(data: Path, layout: str, how: str) -> None:
    left, right, keys = _LAYOUTS[layout]
    spec = join_job(data, left, right, how=how, **keys)
    on_dask, on_polars = dask_rows(spec), polars_rows(spec)
    assert_same_rows(on_dask, on_polars.to_pandas(), ordered=False)
    ints_left = left == "ints"
    if how in ("semi", "anti"):
        kept = {("semi", True): ["x", "z"], ("anti", True): ["n", "y"], ("semi", False): ["p", "r"], ("anti", False): ["q", "s"]}
        assert sorted(on_polars["a" if ints_left else "b"].to_list()) == kept[how, ints_left]
    else:
        keep_left, keep_right = _KEPT[how]
        keep_ints, keep_floats = (keep_left, keep_right) if ints_left else (keep_right, keep_left)
        want = _MATCHED + (_INTS_ALONE if keep_ints else []) + (_FLOATS_ALONE if keep_floats else [])
        assert labels(on_polars.to_pandas(), "a", "b") == sorted(want, key=repr)
    # Each key column of one type on both engines: under on=, the left's own for inner, left, semi and anti joins and
    # floats (pandas' common type) for right and outer ones; with left_on/right_on each side's own.
    for column in ("k", "kf"):
        if column in on_dask.columns:
            assert pd.api.types.is_integer_dtype(on_dask[column]) == on_polars.schema[column].is_integer(), column
    assert on_polars.schema["k"].is_integer() == (ints_left and ("on" not in keys or how not in ("right", "outer")))


@pytest.mark.parametrize("how", ["inner", "left", "outer", "anti"])
def test_two_keys_of_which_one_is_cast(data: Path, how: str) -> None:
    """k (int with float) and j (strings on both sides): only 1/u meets 1.0/u; 3/v meets no 3.0/u."""
    spec = join_job(data, "ints", "floats", how=how, on=["k", "j"])
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    if how == "inner":
        assert labels(on_polars, "k", "j", "a", "b") == [(1, "u", "x", "p")]


@pytest.mark.parametrize("how", ["inner", "left", "semi", "anti"])
@pytest.mark.parametrize("filtered", ["left", "right"])
def test_a_filtered_join_before_the_read_casts_with_a_decimal_read_as_float(data: Path, how: str, filtered: str) -> None:
    """A filtered side's join with a side whose other columns are cast after the join (PolarsFrames._join_before_casts)."""
    drop = {"op": "filter", "expr": "a != 'z'"}
    if filtered == "left":
        spec = join_job(data, "ints", "decimals", before=[drop], how=how, on=["k"])
    else:
        spec = JobSpec.model_validate({"sources": {"ints": {"format": "parquet", "path": str(data / "ints.parquet")}, "few": {"from": "ints", "steps": [drop]}},
                                       "source": {"format": "parquet", "path": str(data / "decimals.parquet")},
                                       "steps": [{"op": "join", "right": "few", "how": how, "on": ["k"]}], "sink": {"path": "/tmp/unused"}})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert len(on_polars) > 0


def test_a_null_key_and_a_fraction_match_nothing(data: Path) -> None:
    on_dask, on_polars = run_both(join_job(data, "ints", "floats", how="outer", on=["k"]))
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert labels(on_polars, "k", "a", "b") == sorted([(1.0, "x", "p"), (2.0, "y", None), (2.5, None, "q"), (3.0, "z", "r"),
                                                       (None, "n", None), (None, None, "s")], key=repr)


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer", "semi"])
def test_datetimes_of_different_units_join_on_both_engines(data: Path, how: str) -> None:
    """A parquet date (read as microseconds) with a nanosecond timestamp: compared in nanoseconds, so
    2024-01-02 00:00:00.000000001 meets no date."""
    spec = join_job(data, "dates", "nanos", how=how, on=["k"])
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert "d1" in on_polars["a"].tolist()
    assert ("d3" in on_polars["a"].tolist()) == (how in ("left", "outer"))


@pytest.mark.parametrize(("right", "exact", "how", "key_type", "rows"), [
    ("ints", False, "inner", pl.Decimal(10, 2), [(D("1.00"), "p", "x"), (D("3.00"), "r", "z")]),
    ("ints", False, "right", pl.Decimal(38, 2), [(D("1.00"), "p", "x"), (D("2.00"), None, "y"), (D("3.00"), "r", "z"), (None, None, "n")]),
    ("tenths", False, "inner", pl.Decimal(10, 2), [(D("1.00"), "p", "f1"), (D("2.50"), "q", "f2.5")]),  # as floats: 2.50 is 2.5
    ("tenths", False, "outer", pl.Float64, [(0.1, None, "f0.1"), (1.0, "p", "f1"), (2.5, "q", "f2.5"), (3.0, "r", None), (None, "s", None),
                                            (None, None, "fn")]),
    ("decimals3", True, "inner", pl.Decimal(10, 2), [(D("1.00"), "p", "e1")]),  # exactly: 2.50 is not 2.501
    ("decimals3", True, "outer", pl.Decimal(12, 3), [(D("0.100"), None, "e0.1"), (D("1.000"), "p", "e1"), (D("2.500"), "q", None),
                                                     (D("2.501"), None, "e2.501"), (D("3.000"), "r", None), (None, "s", None), (None, None, "en")]),
])
def test_an_exact_decimal_key_joins_an_integer_a_float_or_another_decimal(data: Path, right: str, exact: bool, how: str, key_type: pl.DataType,
                                                                        rows: list[tuple[Any, ...]]) -> None:
    """Only the Polars engine computes decimals: with an integer or a decimal key exactly, with a float one as floats."""
    other = {"format": "parquet", "path": str(data / f"{right}.parquet"), **({"decimals": "exact"} if exact else {})}
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(data / "decimals.parquet"), "decimals": "exact"},
                                   "steps": [{"op": "join", "right": other, "how": how, "on": ["k"]}], "sink": {"path": "/tmp/unused"}})
    out = polars_rows(spec)
    assert out.schema["k"] == key_type
    label = {"ints": "a", "tenths": "f", "decimals3": "c"}[right]
    assert sorted(out.select("k", "b", label).rows(), key=repr) == sorted(rows, key=repr)


def test_keys_whose_types_agree_are_joined_as_they_are(data: Path) -> None:
    """No cast where Polars joins the types as they are (equal, integers of any widths, floats): plans stay unchanged."""
    assert join_key_type(pl.Int64(), pl.Int64()) is None and join_key_type(pl.Int32(), pl.UInt8()) is None
    assert join_key_type(pl.Float32(), pl.Float64()) is None and join_key_type(pl.String(), pl.String()) is None
    assert join_key_type(pl.Int32(), pl.Float32()) == pl.Float64 and join_key_type(pl.Decimal(10, 2), pl.Decimal(12, 4)) == pl.Decimal(12, 4)
    assert join_key_type(pl.Datetime("us"), pl.Datetime("ms")) == pl.Datetime("us")
    same = build_lazyframe(plan_spec(join_job(data, "ints", "ints", on=["k"])), filters_before_casts=True).explain()
    assert "__spillway_key" not in same and "strict_cast" not in same and ".cast(" not in same
    assert "__spillway_key0" in build_lazyframe(plan_spec(join_job(data, "ints", "floats", on=["k"])), filters_before_casts=True).explain()


@pytest.mark.parametrize("how", ["left", "right", "outer", "semi", "anti"])
def test_a_join_with_a_where_and_an_integer_and_a_float_key(data: Path, how: str) -> None:
    """The keys and the condition decide the pairs together (jobs.join_condition_polars), the keys compared as floats."""
    on_dask, on_polars = run_both(join_job(data, "ints", "floats", how=how, on=["k"], where="b != 'r'"))
    assert_same_rows(on_dask, on_polars, ordered=False)
    if how == "semi":
        assert on_polars["a"].tolist() == ["x"]


_ALONE = {"inner": (False, False), "left": (True, False), "right": (False, True), "outer": (True, True), "semi": (False, False), "anti": (True, False)}


@pytest.mark.parametrize("how", list(_ALONE))
@pytest.mark.parametrize(("left", "right", "keys"), [("nulls.jsonl", "ints", {"on": ["k"]}), ("ints", "nulls.jsonl", {"on": ["k"]}),
                                                    ("nulls.jsonl", "floats", {"left_on": ["k"], "right_on": ["kf"]})])
def test_a_json_key_of_nulls_only_matches_nothing_on_both_engines(data: Path, left: str, right: str, keys: dict[str, list[str]], how: str) -> None:
    """A JSON-lines column without a value is text (docs/spec.md, "CSV and JSON lines"): joined with a number key it is
    refused at submit, naming the step. Declared an integer (``types``), it joins and matches nothing on both engines."""
    with pytest.raises(TypeMismatch, match="join keys must have matching kinds"):
        plan_spec(join_job(data, left, right, how=how, **keys))
    spec = join_job(data, left, right, how=how, **keys).model_dump(by_alias=True, exclude_none=True)
    json_side = spec["source"] if left == "nulls.jsonl" else spec["steps"][-1]["right"]
    json_side["types"] = {"k": "int64"}
    on_dask, on_polars = run_both(JobSpec.model_validate(spec))
    assert_same_rows(on_dask, on_polars, ordered=False)
    keep_left, keep_right = _ALONE[how]
    assert len(on_polars) == (3 if left == "nulls.jsonl" else 4) * keep_left + (3 if right == "nulls.jsonl" else 4) * keep_right


@pytest.mark.parametrize("how", list(_ALONE))
@pytest.mark.parametrize(("left", "right", "matched"), [
    ("words", "coded", [("w2", "d2")]),  # text with a parquet dictionary: Polars' String with Categorical
    ("coded", "words", [("w2", "d2")]),
    ("utc", "paris", [("u0", "p1")]),  # 2024-01-01 00:00 UTC is 01:00 in Paris; 01:00 UTC (02:00 in Paris) is not 03:00 in Paris
    ("paris", "utc", [("u0", "p1")]),
    ("micros", "nanoseconds", [("s2", "n2")]),  # 2 s in microseconds and in nanoseconds
])
def test_keys_of_one_kind_that_polars_joins_only_cast(data: Path, left: str, right: str, matched: list[tuple[str, str]], how: str) -> None:
    """Polars refused each pair (SchemaError) where pandas' merge joins it: text with a dictionary column as text, datetimes of two time
    zones as instants, durations of two units in the finer."""
    on_dask, on_polars = run_both(join_job(data, left, right, how=how, on=["k"]))
    assert_same_rows(on_dask, on_polars, ordered=False)
    if how == "inner":
        assert sorted(zip(on_polars["a"], on_polars["b"], strict=True)) == matched


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer", "semi", "anti"])
def test_a_uint64_key_with_a_signed_one_joins_as_floats_on_both_engines_and_is_written(tmp_path: Path, how: str) -> None:
    """No 64-bit type holds uint64 and int64: Polars compared them as Int128, and an outer join's Int128 key failed
    the parquet sink ("to_arrow() conversion failed"); the Dask engine compares them as floats, as pandas' merge
    does. Both engines now compare as floats (exact to 2**53: docs/spec.md, "Joins")."""
    from spillway.cluster.polars_job import output_columns
    from spillway.jobs.polars_io import write_output
    from spillway.jobs.sink import SinkWriter

    pq.write_table(pa.table({"k": pa.array([1, 2, 2**63 + 5, None], pa.uint64()), "a": ["one", "two", "big", "null"]}), tmp_path / "unsigned.parquet")
    pq.write_table(pa.table({"k": pa.array([2, -1, 3, None], pa.int64()), "b": ["two", "minus", "three", "null"]}), tmp_path / "signed.parquet")
    spec = join_job(tmp_path, "unsigned", "signed", how=how, on=["k"])
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    if how in ("inner", "semi"):
        assert on_polars["a"].tolist() == ["two"]
    sink = SinkWriter(spec.sink.model_copy(update={"path": str(tmp_path / "out")}), "polars")
    frame = build_lazyframe(plan_spec(spec), filters_before_casts=True)
    write_output(frame, sink.polars_target(output_columns(frame)))
    sink.commit()
    assert pq.read_table(tmp_path / "out").num_rows == len(on_polars)
