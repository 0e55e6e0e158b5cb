"""The checker, the Polars engine and the Dask engine read the same files alike, and their sinks write the same.

Each case is a file the readers once disagreed on: a parquet column of Arrow type null (Polars' Null took no
string function), bools with nulls in JSON lines, CSV and parquet (pandas: float64, text or object), a CSV column
without a value (Polars: text, pandas: float64) and a JSON-lines one (Polars: Null, pandas: float64), a zoned parquet timestamp compared with a datetime literal
(refused by both engines); and what the sinks write of bools (CSV text) and of a mean of integers (parquet types).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.dask_read import read_source
from spillway.jobs.polars_io import scan_source
from spillway.jobs.sources import read_schema
from spillway.jobs.spec import JobSpec, SourceSpec
from tests.sinks_both import write_on_both_engines
from tests.test_engines import assert_same_rows, run_both

D = datetime.datetime


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readers")
    pq.write_table(pa.table({"id": [1, 2, 3], "s": pa.nulls(3), "t": ["a", "b", None]}), root / "nulls.parquet")
    (root / "flags.jsonl").write_text('{"id": 1, "b": true, "e": null}\n{"id": 2, "b": null, "e": null}\n{"id": 3, "b": false}\n')
    (root / "flags.csv").write_text("id,b,e\n1,True,\n2,,\n3,False,\n")
    zoned = pa.array([D(2023, 12, 31, 23), D(2024, 1, 1, 1), None, D(2024, 3, 1)], pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us", tz="Europe/Paris"))
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "k": zoned, "g": ["a", "a", "b", "b"], "n": pa.array([1, 2, 4, None], pa.int64()),
                             "bn": pa.array([True, None, False, True])}), root / "zoned.parquet")
    return root


def source(data: Path, name: str) -> dict[str, str]:
    return {"format": name.rsplit(".", 1)[1], "path": str(data / name)}


def job(data: Path, name: str, steps: list[dict[str, Any]], sink: dict[str, Any] | None = None) -> JobSpec:
    return JobSpec.model_validate({"source": source(data, name), "steps": steps, "sink": sink or {"path": str(data / "unused")}})


def assert_same(spec: JobSpec, *, ordered: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=ordered)
    return on_dask, on_polars


def kinds_of(data: Path, name: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The checker's kinds of a file's columns, and the kinds of the types each engine reads them as."""
    spec = SourceSpec.model_validate(source(data, name))
    polars_kinds = {column: _polars_kind(str(dtype)) for column, dtype in scan_source(spec).collect_schema().items()}
    with dask.config.set({"dataframe.backend": "pandas"}):
        frame = read_source(spec)
        dask_kinds = {column: _pandas_kind(dtype) for column, dtype in frame.dtypes.items()}
        parts = frame.compute(scheduler="sync")
    assert dict(parts.dtypes) == dict(frame.dtypes)  # the rows have the metadata's types
    return read_schema(spec), polars_kinds, dask_kinds


def _polars_kind(name: str) -> str:
    return {"String": "string", "Boolean": "bool", "Int64": "numeric", "Float64": "numeric"}.get(name, "datetime" if name.startswith("Datetime") else name)


def _pandas_kind(dtype: Any) -> str:
    if isinstance(dtype, pd.BooleanDtype) or dtype == bool:
        return "bool"
    if pd.api.types.is_string_dtype(dtype) and dtype != object:
        return "string"
    if pd.api.types.is_numeric_dtype(dtype):
        return "numeric"
    return "datetime" if pd.api.types.is_datetime64_any_dtype(dtype) else str(dtype)


# 1. A parquet column of Arrow type null: text on both engines (its kind stays "other", as join keys document).


def test_a_parquet_column_of_type_null_is_read_as_text_on_both_engines(data: Path) -> None:
    checker, polars_kinds, dask_kinds = kinds_of(data, "nulls.parquet")
    assert checker["s"] == "other"
    assert polars_kinds["s"] == dask_kinds["s"] == "string"


@pytest.mark.parametrize("expr", ["upper(s)", "s == 'a'", "s != 'a'", "coalesce(s, t)", "concat(s, 'x')", "length(s)", "isnull(s)"])
def test_an_expression_over_a_column_of_type_null_is_the_same_on_both_engines(data: Path, expr: str) -> None:
    assert_same(job(data, "nulls.parquet", [{"op": "assign", "column": "x", "expr": expr}]))


def test_a_filter_on_a_column_of_type_null_keeps_the_same_rows(data: Path) -> None:
    on_dask, _ = assert_same(job(data, "nulls.parquet", [{"op": "filter", "expr": "not (s == 'a')"}]))
    assert len(on_dask) == 3  # a comparison with a null is false, so its negation keeps every row


# 2. Bools with nulls, and a column without a value.


@pytest.mark.parametrize(("name", "column", "kind"), [("flags.jsonl", "b", "bool"), ("flags.csv", "b", "bool"), ("flags.csv", "e", "string"),
                                                     ("flags.jsonl", "e", "string"), ("zoned.parquet", "bn", "bool")])
def test_the_checker_and_both_engines_read_the_same_kind(data: Path, name: str, column: str, kind: str) -> None:
    checker, polars_kinds, dask_kinds = kinds_of(data, name)
    assert (checker[column], polars_kinds[column], dask_kinds[column]) == (kind, kind, kind)


@pytest.mark.parametrize("name", ["flags.jsonl", "flags.csv", "zoned.parquet"])
@pytest.mark.parametrize("steps", [
    [{"op": "filter", "expr": "{b}"}],
    [{"op": "filter", "expr": "not {b}"}],
    [{"op": "assign", "column": "x", "expr": "{b} == True"}],
    [{"op": "assign", "column": "x", "expr": "cast({b}, 'int64')"}],
    [{"op": "assign", "column": "x", "expr": "cast({b}, 'string')"}],
    [{"op": "assign", "column": "x", "expr": "cast({b}, 'float64')"}],
    [{"op": "assign", "column": "x", "expr": "1 if {b} else 0"}],
    [{"op": "groupby", "by": [], "aggs": {"t": {"func": "sum", "column": "{b}"}, "a": {"func": "any", "column": "{b}"},
                                          "c": {"func": "count", "column": "{b}"}}}],
])
def test_bools_with_nulls_compute_the_same_on_both_engines(data: Path, name: str, steps: list[dict[str, Any]]) -> None:
    column = "bn" if name.endswith("parquet") else "b"

    def filled(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("{b}", column)
        if isinstance(value, dict):
            return {key: filled(item) for key, item in value.items()}
        return [filled(item) for item in value] if isinstance(value, list) else value

    assert_same(job(data, name, filled(steps)))


def test_a_bool_cast_to_text_is_true_or_false_on_both_engines(data: Path) -> None:
    on_dask, _ = assert_same(job(data, "flags.jsonl", [{"op": "assign", "column": "x", "expr": "cast(b, 'string')"}]))
    assert on_dask.sort_values("id")["x"].tolist()[::2] == ["true", "false"]


@pytest.mark.parametrize("name", ["flags.csv", "flags.jsonl"])
@pytest.mark.parametrize("expr", ["upper(e)", "isnull(e)", "coalesce(e, 'none')", "cast(e, 'float64')"])
def test_a_column_without_a_value_is_text_on_both_engines(data: Path, name: str, expr: str) -> None:
    assert_same(job(data, name, [{"op": "assign", "column": "x", "expr": expr}]))


# 6. Zoned timestamps against datetime literals: the literal is a UTC instant.


@pytest.mark.parametrize(("expr", "ids"), [
    ("k > timestamp('2024-01-01')", [2, 4]),  # 2024-01-01 01:00 UTC is 02:00 in Paris; 2023-12-31 23:00 UTC is not after
    ("k >= date('2024-01-01')", [2, 4]),
    ("k < timestamp('2024-01-01 00:30:00')", [1]),
    ("timestamp('2024-01-01') < k", [2, 4]),
    ("k == timestamp('2024-03-01')", [4]),
    ("between(k, date('2024-01-01'), date('2024-02-01'))", [2]),
])
def test_a_zoned_timestamp_compares_with_a_literal_as_a_utc_instant(data: Path, expr: str, ids: list[int]) -> None:
    on_dask, _ = assert_same(job(data, "zoned.parquet", [{"op": "filter", "expr": expr}]))
    assert sorted(on_dask["id"]) == ids


def test_a_zoned_timestamp_compared_in_an_assign_is_the_same_on_both_engines(data: Path) -> None:
    assert_same(job(data, "zoned.parquet", [{"op": "assign", "column": "late", "expr": "k > timestamp('2024-01-01')"}]))


# 3. and 5. What the sinks write.


def write_both(data: Path, name: str, steps: list[dict[str, Any]], fmt: str, out: Path) -> tuple[Path, Path]:
    """The job's output as each engine's sink writes it, under ``out``."""
    return write_on_both_engines(lambda sink: job(data, name, steps, sink), fmt, out)


def csv_lines(out: Path) -> list[str]:
    texts = [path.read_text().splitlines() for path in sorted(out.glob("*.csv"))]
    return [texts[0][0], *sorted(line for text in texts for line in text[1:])]


@pytest.mark.parametrize("name", ["flags.jsonl", "flags.csv", "zoned.parquet"])
def test_a_csv_sink_writes_bools_as_true_and_false_on_both_engines(data: Path, name: str, tmp_path: Path) -> None:
    column = "bn" if name.endswith("parquet") else "b"
    steps = [{"op": "assign", "column": "c", "expr": f"{column} == True"}, {"op": "select", "columns": ["id", column, "c"]}]
    on_dask, on_polars = write_both(data, name, steps, "csv", tmp_path)
    lines = csv_lines(on_dask)
    assert lines == csv_lines(on_polars)
    assert lines[1:3] == ["1,true,true", "2,,false"]


def test_a_csv_sink_of_bools_reads_back_as_bools(data: Path, tmp_path: Path) -> None:
    on_dask, _ = write_both(data, "flags.jsonl", [{"op": "select", "columns": ["id", "b"]}], "csv", tmp_path)
    checker = read_schema(SourceSpec(format="csv", path=str(on_dask)))
    assert checker["b"] == "bool"


@pytest.mark.parametrize("step", [
    {"op": "groupby", "by": ["g"], "aggs": {"m": {"func": "mean", "column": "n"}, "s": {"func": "sum", "column": "n"}}},
    {"op": "window", "partition_by": ["g"], "columns": {"m": {"func": "mean", "column": "n"}}},
])
def test_a_mean_of_integers_is_written_as_the_same_parquet_type(data: Path, step: dict[str, Any], tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [step, {"op": "select", "columns": ["g", "m"]}]
    on_dask, on_polars = write_both(data, "zoned.parquet", steps, "parquet", tmp_path)
    tables = [pa.concat_tables([pq.read_table(path) for path in sorted(out.glob("*.parquet"))]) for out in (on_dask, on_polars)]
    assert tables[0].schema.field("m").type == tables[1].schema.field("m").type == pa.float64()
    assert sorted(tables[0].column("m").to_pylist(), key=repr) == sorted(tables[1].column("m").to_pylist(), key=repr)
    csv_dask, csv_polars = write_both(data, "zoned.parquet", steps, "csv", tmp_path)
    assert csv_lines(csv_dask) == csv_lines(csv_polars)
