"""Ordered windows in SQL sources: refused with a 422 that says why, and the window step that computes them.

Polars' SQL (1.44) answers ordered windows differently from DuckDB and PostgreSQL
(jobs/sql_windows.py). The first test keeps that claim honest: it fails once Polars answers as
DuckDB does, and the refusal can then be lifted. The others check each refusal's message, and
that the window step it suggests gives DuckDB's answer on both engines.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest
import yaml

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.sql_source import SqlRefused
from spillway.jobs.validate import plan_spec
from tests.test_engines import assert_same_rows, run_both

duckdb = pytest.importorskip("duckdb")

# Nulls and ties in the order key x, a unique id to break ties, nulls among the values v.
ROWS = pd.DataFrame({
    "g": ["a", "a", "a", "a", "b", "b", "b", "a"],
    "x": pd.array([3, None, 1, 3, 2, 2, None, None], dtype="Int64"),
    "v": pd.array([10, 20, 30, 40, 50, None, 70, 5], dtype="Int64"),
    "id": [1, 2, 3, 4, 5, 6, 7, 8],
})

# Windows Polars' SQL answers differently, each with what a SQL source refuses and the window step the message suggests.
WINDOWS = {
    "row_number": ("ROW_NUMBER() OVER (PARTITION BY g ORDER BY x, id)", "sorts a window's nulls first"),
    "rank": ("RANK() OVER (PARTITION BY g ORDER BY x)", "gives a null key a null rank"),
    "dense_rank": ("DENSE_RANK() OVER (PARTITION BY g ORDER BY x DESC)", "gives a null key a null rank"),
    "lag": ("LAG(v) OVER (PARTITION BY g ORDER BY x, id)", "sorts a window's nulls first"),
    "lead_with_default": ("LEAD(v, 2, 0) OVER (PARTITION BY g ORDER BY x, id)", "sorts a window's nulls first"),
    "running_sum": ("SUM(v) OVER (PARTITION BY g ORDER BY x, id)", "sums tied rows one by one"),
    "running_avg": ("AVG(v) OVER (ORDER BY id)", "gives a running AVG the whole partition's average"),
    "rolling_max": ("MAX(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)",
                    "takes only ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"),
}


def duckdb_window(window: str) -> pd.DataFrame:
    connection = duckdb.connect()
    connection.register("t", ROWS)
    return connection.sql(f"SELECT g, x, v, id, {window} AS w FROM t").df()


def polars_sql_window(window: str) -> pd.DataFrame | None:
    """Polars' own SQL answer (None where it refuses the query)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pl.SQLContext({"t": pl.from_pandas(ROWS)}).execute(f"SELECT g, x, v, id, {window} AS w FROM t", eager=True).to_pandas()
        except pl.exceptions.PolarsError:
            return None


def by_id(frame: pd.DataFrame) -> list[Any]:
    values = frame.sort_values("id")["w"]
    return [None if pd.isna(value) else float(value) for value in values]


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_polars_sql_still_answers_these_windows_differently_from_duckdb(name: str) -> None:
    """If this fails, Polars' SQL now gives SQL's answer: jobs/sql_windows.py may let that window run."""
    window, _ = WINDOWS[name]
    polars_answer = polars_sql_window(window)
    assert polars_answer is None or by_id(polars_answer) != by_id(duckdb_window(window))


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sql-windows") / "t.parquet"
    ROWS.to_parquet(path, index=False)
    return path


def spec_with(table: Path, sql: str) -> JobSpec:
    return JobSpec.model_validate({"sources": {"t": {"format": "parquet", "path": str(table)}, "q": {"sql": sql}},
                                   "source": "q", "sink": {"path": "/tmp/unused-sql-windows"}})


def refusal(table: Path, window: str) -> str:
    with pytest.raises(SqlRefused) as info:
        plan_spec(spec_with(table, f"SELECT g, x, v, id, {window} AS w FROM t"))
    assert info.value.field == "sources.q.sql" and info.value.code == "invalid_sql"
    return info.value.message


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_a_refused_window_says_why_and_its_window_step_gives_sqls_answer(table: Path, name: str) -> None:
    window, why = WINDOWS[name]
    message = refusal(table, window)
    assert f"window '{window}' is not run at line 1, col" in message and why in message, message
    step_text = re.search(r"the spec's window step after the SQL source: (\{op: window.*\}\}\}) \(nulls last", message)
    assert step_text is not None, message
    step = yaml.safe_load(step_text.group(1).replace("<name>", "w"))
    expected = duckdb_window(window)
    on_the_table = JobSpec.model_validate({"source": {"format": "parquet", "path": str(table)}, "steps": [step],
                                           "sink": {"path": "/tmp/unused-sql-windows"}})
    for result in run_both(on_the_table):
        assert_same_rows(result, expected, ordered=False)


@pytest.mark.parametrize(("window", "message"), [
    ("NTILE(4) OVER (ORDER BY id)", "window function NTILE(4) OVER (…) is not run"),
    ("ROW_NUMBER() OVER (PARTITION BY g)", "row_number needs ORDER BY inside OVER"),
    ("SUM(v) OVER (PARTITION BY g ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)", "a frame without ORDER BY inside OVER"),
])
def test_windows_without_a_counterpart_or_an_order_are_refused_naming_them(table: Path, window: str, message: str) -> None:
    assert message in refusal(table, window)


def test_a_total_over_the_partition_still_runs(table: Path) -> None:
    window = "SUM(v) OVER (PARTITION BY g)"
    got = build_lazyframe(plan_spec(spec_with(table, f"SELECT g, x, v, id, {window} AS w FROM t"))).collect().to_pandas()
    assert_same_rows(got, duckdb_window(window), ordered=False)
