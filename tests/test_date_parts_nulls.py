"""Integer date parts, lengths and positions over partitions with and without nulls: the same values and types on both engines.

Polars gives ``year(ts)``, ``month(ts)``, ``length(s)``, ``strpos``, ``date_diff``, … as int64 with nulls. pandas gives a
date's parts as float64 in a partition where a date is null, so the Dask engine rounded results past 2**53, a CSV sink
wrote ``12.0``, and the output column's type differed between engines and between partitions. The source here is
three files (three partitions on the Dask engine): one without nulls, one with some, one whose dates are all null.
Each case checks every Dask partition's type against its metadata, the type of the output column against Polars'
(integers: int64 or pandas' Int64; floats stay floats) and the values, integers exactly.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.sinks_both import write_on_both_engines

D = datetime.datetime


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parts")
    source = root / "src"
    source.mkdir()
    files = {  # no nulls; some; every date null
        "a": {"id": [1, 2, 3, 4], "g": ["a", "b", "a", "b"], "s": ["ab", "abc", "b", "xyz"], "x": [0.5, 1.5, 2.5, 12.0], "n": [1, 2, 3, 4],
              "ts": [D(2024, 12, 31), D(2021, 1, 3), D(2020, 2, 29), D(2023, 6, 15)]},
        "b": {"id": [5, 6, 7, 8], "g": ["a", "b", "a", "b"], "s": [None, "bob", "", "abba"], "x": [None, 1.0, 4.0, 3.0], "n": [None, 6, 0, -8],
              "ts": [None, D(2022, 3, 1), None, D(1999, 12, 31)]},
        "c": {"id": [9, 10], "g": ["c", "c"], "s": ["b", None], "x": [2.0, None], "n": [None, None], "ts": [None, None]},
    }
    for name, columns in files.items():
        table = pa.table({**columns, "ts": pa.array(columns["ts"], pa.timestamp("us")), "s": pa.array(columns["s"], pa.string()),
                          "n": pa.array(columns["n"], pa.int64())})
        pq.write_table(table, source / f"{name}.parquet")
    pq.write_table(pa.table({"m": [1, 2, 3, 6, 12], "name": ["jan", "feb", "mar", "jun", "dec"]}), root / "months.parquet")
    return root


def job(folder: Path, steps: list[dict[str, Any]], sink: dict[str, Any] | None = None) -> JobSpec:
    return JobSpec.model_validate({"source": {"format": "parquet", "path": str(folder / "src")}, "steps": steps,
                                   "sink": sink or {"path": str(folder / "unused")}})


def kind_of_pandas(dtype: Any) -> str:
    for kind, test in (("bool", pd.api.types.is_bool_dtype), ("int", pd.api.types.is_integer_dtype), ("float", pd.api.types.is_float_dtype),
                       ("datetime", pd.api.types.is_datetime64_any_dtype), ("duration", pd.api.types.is_timedelta64_dtype),
                       ("string", pd.api.types.is_string_dtype)):
        if test(dtype):
            return kind
    return str(dtype)


def kind_of_polars(dtype: pl.DataType) -> str:
    if dtype == pl.Boolean:
        return "bool"
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if isinstance(dtype, pl.Datetime):
        return "datetime"
    return "duration" if isinstance(dtype, pl.Duration) else "string" if dtype == pl.String else str(dtype)


def plain(value: Any, kind: str) -> Any:
    """One value as Python's: None for a null (NaN included, as the Dask engine holds a float's null), ints exact,
    times in nanoseconds (Polars gives Python's datetimes, which stop at microseconds)."""
    if value is None or (not isinstance(value, (str, list)) and pd.isna(value)):
        return None
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind in ("datetime", "duration") and not isinstance(value, int):
        return (pd.Timestamp if kind == "datetime" else pd.Timedelta)(value).value
    return value


def run_engines(spec: JobSpec) -> tuple[pd.DataFrame, pl.DataFrame]:
    """The output of each engine; every Dask partition must have the types its metadata says."""
    plan = plan_spec(spec)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        frame = build_frame(spec, plan)
        parts = dask.compute(*frame.to_delayed())
    for index, part in enumerate(parts):
        assert part.dtypes.to_dict() == frame._meta.dtypes.to_dict(), f"partition {index}: {part.dtypes.to_dict()} != meta {frame._meta.dtypes.to_dict()}"
    return pd.concat(parts, ignore_index=True), build_lazyframe(plan, filters_before_casts=True).collect()


def assert_same(spec: JobSpec, *, ordered: bool = False) -> tuple[pd.DataFrame, pl.DataFrame]:
    on_dask, on_polars = run_engines(spec)
    assert list(on_dask.columns) == on_polars.columns
    kinds = {name: kind_of_polars(dtype) for name, dtype in on_polars.schema.items()}
    assert {name: kind_of_pandas(dtype) for name, dtype in on_dask.dtypes.items()} == kinds
    dask_rows = [tuple(plain(v, kinds[c]) for c, v in zip(on_dask.columns, row, strict=True)) for row in on_dask.itertuples(index=False)]
    in_ns = on_polars.with_columns(pl.col(pl.Datetime).dt.epoch("ns"), pl.col(pl.Duration).dt.total_nanoseconds())
    polars_rows = [tuple(plain(v, kinds[c]) for c, v in zip(in_ns.columns, row, strict=True)) for row in in_ns.iter_rows()]
    if not ordered:
        def key(row: tuple[Any, ...]) -> str:
            return repr(tuple(round(v, 6) if isinstance(v, float) else v for v in row))

        dask_rows, polars_rows = sorted(dask_rows, key=key), sorted(polars_rows, key=key)
    assert len(dask_rows) == len(polars_rows)
    for got, want in zip(dask_rows, polars_rows, strict=True):
        for a, b in zip(got, want, strict=True):
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-12) or (math.isnan(a) and math.isnan(b)), (got, want)
            else:
                assert a == b, (got, want)  # integers exactly
    return on_dask, on_polars


EXPRESSIONS = [
    # the parts themselves, as int64 with nulls
    "year(ts)", "month(ts)", "day(ts)", "quarter(ts)", "day_of_week(ts)", "day_of_year(ts)", "week(ts)", "length(s)", "strpos(s, 'b')",
    "date_diff('day', ts, date('2025-01-01'))", "date_diff('month', date('2000-01-01'), ts)",
    # integer arithmetic, exact past 2**53
    "year(ts) * 1000000000000000 + day(ts)", "month(ts) - id", "-month(ts)", "month(ts) ** 2", "length(s) * 1000000000000000001",
    "month(ts) // 5", "month(ts) % 5", "month(ts) // (id - 5)", "(0 - month(ts)) % (id - 5)", "month(ts) // 0",
    # with floats: float64, a null as NaN
    "month(ts) * 1.5", "month(ts) + x", "month(ts) / 2", "month(ts) / id", "month(ts) // 2.5", "month(ts) % x", "month(ts) ** 0.5",
    "divide(month(ts), 2)", "safe_divide(month(ts), id - 5)", "sqrt(month(ts))", "round(month(ts) / 7, 2)", "floor(month(ts) / 5)",
    "abs(month(ts) - 7)", "sign(month(ts) - 6)", "greatest(month(ts), x)", "least(month(ts), 3)",
    # comparisons
    "month(ts) > 6", "month(ts) >= 2.5", "month(ts) == x", "month(ts) != 12", "between(month(ts), 2, 6.5)",
    "month(ts) in (1, 2, 12)", "month(ts) not in (1, 2, 12)",
    # null handling and branches mixing ints and floats
    "coalesce(month(ts), 1.5)", "coalesce(month(ts), 0)", "coalesce(month(ts), length(s), id)", "coalesce(x, month(ts))",
    "fillna(month(ts), 0.5)", "month(ts) if id > 3 else 1.5", "month(ts) if id > 3 else None", "x if id > 3 else month(ts)",
    "case(id < 3, month(ts), id < 7, x, 0)", "case(id < 3, month(ts), 0)", "case(month(ts) > 6, 'late', 'early')",
    # casts and text
    "cast(month(ts), 'string')", "cast(length(s), 'string')", "cast(month(ts), 'int32')", "cast(month(ts), 'int64')",
    "cast(month(ts), 'float64')", "cast(month(ts), 'float32')", "cast(month(ts), 'bool')", "cast(month(ts) / 2, 'int64')",
    "try_cast(month(ts), 'int32')", "concat(cast(month(ts), 'string'), '/', cast(day(ts), 'string'))",
    "lpad(cast(month(ts), 'string'), 2, '0')", "cast(month(ts), 'datetime64[ns]')", "substr(s, month(ts) % 3)",
    "substr(s, 1, length(s) - 1)", "interval(1, 'day') * month(ts)",
    # an integer column read with nulls (pandas' Int64 on the Dask engine) mixes with floats the same way
    "coalesce(n, 1.5)", "fillna(n, 0.5)", "n / 2", "n / n", "1.5 if id > 2 else n", "x if id > 2 else n", "cast(n / 2, 'int64')",
    "greatest(n, 1.5)", "least(n, x)", "n // id", "n % (id - 5)", "n // 0", "n * x", "cast(n, 'bool')", "cast(x, 'bool')",
]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_an_expression_over_the_parts_is_the_same_on_both_engines(folder: Path, expr: str) -> None:
    assert_same(job(folder, [{"op": "assign", "column": "v", "expr": expr}, {"op": "select", "columns": ["id", "v"]}]))


def test_the_parts_are_integers_in_every_partition_and_exact_past_2_to_53(folder: Path) -> None:
    on_dask, on_polars = assert_same(job(folder, [{"op": "assign", "column": "big", "expr": "year(ts) * 1000000000000000 + day(ts)"},
                                                  {"op": "select", "columns": ["id", "big"]}]))
    assert str(on_dask["big"].dtype) == "Int64"
    assert dict(zip(on_dask["id"], on_dask["big"], strict=True))[1] == 2024000000000000031 == on_polars.row(0)[1]


STEPS = {
    "groupby aggregates": [{"op": "assign", "column": "m", "expr": "month(ts)"},
                           {"op": "groupby", "by": ["g"], "aggs": {f: {"func": f, "column": "m"} for f in ("sum", "min", "max", "mean", "count", "nunique")}}],
    "groupby of expressions": [{"op": "groupby", "by": ["g"], "aggs": {"total": {"func": "sum", "expr": "month(ts) * 2"},
                                                                     "half": {"func": "sum", "expr": "month(ts) / 2"},
                                                                     "longest": {"func": "max", "expr": "length(s)"}}}],
    "casts of a mean of the parts": [{"op": "assign", "column": "m", "expr": "month(ts)"},  # group c has no date: a null mean
                                     {"op": "groupby", "by": ["g"], "aggs": {"avg": {"func": "mean", "column": "m"}, "tot": {"func": "sum", "column": "m"}}},
                                     {"op": "assign", "column": "whole", "expr": "cast(avg, 'int64')"},
                                     {"op": "assign", "column": "flag", "expr": "cast(avg, 'bool')"},
                                     {"op": "assign", "column": "text", "expr": "cast(avg, 'string')"},
                                     {"op": "assign", "column": "mixed", "expr": "coalesce(avg, tot)"}],
    "groupby on a part": [{"op": "assign", "column": "m", "expr": "month(ts)"},
                          {"op": "groupby", "by": ["m"], "aggs": {"rows": {"func": "size"}, "ids": {"func": "sum", "column": "id"}}}],
    "window": [{"op": "assign", "column": "m", "expr": "month(ts)"},
               {"op": "window", "partition_by": ["g"], "order_by": [{"column": "id"}],
                "columns": {"prev": {"func": "lag", "column": "m"}, "prev0": {"func": "lag", "column": "m", "default": 0},
                            "prev_half": {"func": "lag", "column": "m", "default": 1.5}, "run": {"func": "sum", "column": "m", "frame": "running"},
                            "total": {"func": "sum", "column": "m"}, "low": {"func": "min", "column": "m"}, "avg": {"func": "mean", "column": "m"},
                            "cnt": {"func": "count", "column": "m"}, "first": {"func": "first_value", "column": "m"}}}],
    "window ordered by a part": [{"op": "assign", "column": "m", "expr": "month(ts)"},
                                 {"op": "window", "partition_by": ["g"], "order_by": [{"column": "m"}, {"column": "id"}],
                                  "columns": {"r": {"func": "row_number"}, "rk": {"func": "rank"}}}],
    "filter": [{"op": "filter", "expr": "month(ts) > 2 and length(s) < 3"}, {"op": "assign", "column": "m", "expr": "month(ts)"}],
    "inner join on a part": [{"op": "assign", "column": "m", "expr": "month(ts)"},
                             {"op": "join", "right": {"format": "parquet", "path": "{months}"}, "on": ["m"]}],
    "left join on a part": [{"op": "assign", "column": "m", "expr": "month(ts)"},
                            {"op": "join", "right": {"format": "parquet", "path": "{months}"}, "on": ["m"], "how": "left"}],
    "drop_duplicates on a part": [{"op": "assign", "column": "m", "expr": "month(ts)"}, {"op": "select", "columns": ["m"]},
                                  {"op": "drop_duplicates"}],
    "top_k by a part": [{"op": "assign", "column": "m", "expr": "month(ts)"}, {"op": "top_k", "by": ["g"], "order": [{"column": "m"}], "k": 2}],
}


@pytest.mark.parametrize("steps", list(STEPS.values()), ids=list(STEPS))
def test_a_step_over_the_parts_is_the_same_on_both_engines(folder: Path, steps: list[dict[str, Any]]) -> None:
    filled = [{**step, "right": {**step["right"], "path": str(folder / "months.parquet")}} if "right" in step else step for step in steps]
    assert_same(job(folder, filled))


def test_a_sort_by_a_part_puts_the_rows_in_the_same_order(folder: Path) -> None:
    assert_same(job(folder, [{"op": "assign", "column": "m", "expr": "month(ts)"}, {"op": "sort", "by": ["m", "id"], "descending": [True, False]},
                             {"op": "select", "columns": ["id", "m"]}]), ordered=True)


SINK_COLUMNS = {"m": "month(ts)", "big": "year(ts) * 1000000000000000 + day(ts)", "l": "length(s)", "p": "strpos(s, 'b')",
                "days": "date_diff('day', ts, date('2025-01-01'))", "text": "cast(month(ts), 'string')", "half": "month(ts) / 2",
                "whole": "coalesce(month(ts), 0)", "mixed": "coalesce(month(ts), 1.5)"}


def write_both(folder: Path, fmt: str) -> tuple[Path, Path]:
    """The job's output as each engine's sink writes it: the Dask engine one file per partition, Polars one file."""
    steps = [*({"op": "assign", "column": k, "expr": v} for k, v in SINK_COLUMNS.items()), {"op": "select", "columns": ["id", *SINK_COLUMNS]}]
    return write_on_both_engines(lambda sink: job(folder, steps, sink), fmt, folder / "out")


def test_a_csv_sink_writes_the_same_text_on_both_engines(folder: Path) -> None:
    on_dask, on_polars = write_both(folder, "csv")

    def lines(out: Path) -> tuple[str, list[str]]:
        texts = [path.read_text().splitlines() for path in sorted(out.glob("*.csv"))]
        assert len({text[0] for text in texts}) == 1
        return texts[0][0], sorted(line for text in texts for line in text[1:])

    header, rows = lines(on_dask)
    assert (header, rows) == lines(on_polars)
    assert "12,2024000000000000031,2,2,1,12,6.0,12,12.0" in [row.split(",", 1)[1] for row in rows]  # id 1: integers as integers
    assert len(list(on_dask.glob("*.csv"))) > 1  # partitions with and without nulls


def test_a_parquet_sink_writes_int64_on_both_engines(folder: Path) -> None:
    on_dask, on_polars = write_both(folder, "parquet")
    tables = [pa.concat_tables([pq.read_table(path) for path in sorted(out.glob("*.parquet"))]) for out in (on_dask, on_polars)]
    for table in tables:
        types = {field.name: field.type for field in table.schema}
        assert all(types[name] == pa.int64() for name in ("id", "m", "big", "l", "p", "days", "whole")), types
        assert types["half"] == types["mixed"] == pa.float64() and types["text"] in (pa.string(), pa.large_string())
    rows = [sorted(table.to_pylist(), key=lambda row: row["id"]) for table in tables]
    assert rows[0] == rows[1]
    assert np.isclose(rows[0][0]["half"], 6.0) and rows[0][0]["big"] == 2024000000000000031
