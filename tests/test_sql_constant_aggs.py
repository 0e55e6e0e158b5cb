"""Aggregates over a value that reads no column (jobs/sql_constant_aggs.py).

Polars' SQL took ``SUM(CAST(1 AS BIGINT))`` once per group: 1 for a group of 2 rows, a silent wrong
answer. Those forms are refused at submit naming the part and where it is; the forms it answers
right (a bare number, ``COUNT(*)``, ``DISTINCT``, ``MIN``/``MAX``/``AVG`` of a constant) run and
give DuckDB's answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pytest

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.sql_source import SqlRefused
from spillway.jobs.validate import plan_spec

REFUSED = [
    "SUM(CAST(1 AS BIGINT))", "SUM(1 + 1)", "SUM(ABS(-1))", "COUNT(CAST(1 AS INT))", "SUM(CASE WHEN TRUE THEN 1 END)",
    "SUM(CAST('1' AS INT))", "STRING_AGG('a', ',')", "STDDEV(1)", "VARIANCE(2)", "COVAR_SAMP(x, 2)",
    "SUM(CAST(1 AS BIGINT)) OVER (PARTITION BY k)", "SUM(1) OVER (PARTITION BY k)", "SUM(1) OVER ()",
    "SUM(1) OVER (PARTITION BY k ORDER BY x)", "COUNT(-3)", "COUNT(-0.5)", "COUNT(DISTINCT CAST(1 AS INT))", "SUM(DISTINCT 1)",
    "AVG(CAST(2 AS INT))", "MAX(CAST(2 AS BIGINT))", "MIN(1 + 1)", "MEDIAN(3)", "MAX('x')", "MAX(1) OVER (PARTITION BY k)",
]
RUN = [
    "SUM(1)", "SUM(-1)", "SUM((2))", "COUNT(1)", "COUNT('a')", "COUNT(*)", "COUNT(NULL)", "SUM(NULL)", "COUNT(*) * 2",
    "SUM(x + 1)", "STRING_AGG(k, ',' ORDER BY k)", "STDDEV(x)",
    "SUM(CASE WHEN x > 1 THEN 1 ELSE 0 END)", "COUNT(*) OVER (PARTITION BY k)", "COUNT(1) OVER ()",
    "COUNT(*) OVER (PARTITION BY k) * 2", "SUM(x) OVER (PARTITION BY k)", "COVAR_SAMP(x, x)", "COVAR_SAMP(x, CAST(x AS DOUBLE))",
    "COVAR_POP(x, x)",
]
ROWS = pl.DataFrame({"k": ["a", "a", "b"], "x": [1, None, 3]})


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("constant-aggs") / "t.parquet"
    ROWS.write_parquet(path)
    return path


def _spec(table: Path, sql: str) -> JobSpec:
    spec: dict[str, Any] = {"name": "c", "sources": {"t": {"format": "parquet", "path": str(table)}, "q": {"sql": sql}},
                            "source": "q", "sink": {"path": "/tmp/unused-constant-aggs"}}
    return JobSpec.model_validate(spec)


def _query(aggregate: str) -> str:
    if " OVER " in aggregate:
        return f"SELECT k, x, {aggregate} AS v FROM t ORDER BY k, x"
    return f"SELECT k, {aggregate} AS v FROM t GROUP BY k ORDER BY k"


@pytest.mark.parametrize("aggregate", REFUSED)
def test_an_aggregate_polars_takes_once_per_group_is_refused_naming_it(table: Path, aggregate: str) -> None:
    with pytest.raises(SqlRefused) as refused:
        plan_spec(_spec(table, _query(aggregate)))
    assert refused.value.field == "sources.q.sql"
    assert "line 1, col" in refused.value.message and ("reads no column" in refused.value.message or "over no rows" in refused.value.message)


@pytest.mark.parametrize("aggregate", RUN)
def test_the_forms_polars_takes_per_row_run_and_give_duckdbs_answer(table: Path, aggregate: str) -> None:
    sql = _query(aggregate)
    ours = build_lazyframe(plan_spec(_spec(table, sql))).collect().to_pandas()
    con = duckdb.connect()
    con.register("t", ROWS.to_arrow())
    theirs = con.execute(sql).df()
    assert [_plain(value) for value in ours["v"]] == [_plain(value) for value in theirs["v"]], (ours, theirs)


def _plain(value: Any) -> Any:
    """None for a missing value, numbers as floats rounded far below 1e-9 relative, text as it is."""
    if value is None or isinstance(value, float) and value != value or value is pd.NA:
        return None
    return value if isinstance(value, str) else float(f"{float(value):.12g}")
