"""A SQL source's ``MAX`` and ``GREATEST`` of floats: NaN is the greatest float, as in PostgreSQL and DuckDB.

Polars' own skip a NaN (``MAX`` over 1.0 and NaN was 1.0, ``GREATEST(NaN, 1.5)`` 1.5: a silent difference listed in
docs/spec.md). jobs/sql_nan_greatest.py writes each with a NaN test where an argument is a float; every query here is
checked against DuckDB over the same parquet file, and on cudf-polars against the CPU (GPU-marked).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.test_sql_source import assert_gpu_gives_the_cpus_answer, assert_same, duckdb_tables, run_polars

duckdb = pytest.importorskip("duckdb")

NAN = math.nan


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql_nan_greatest")
    # Group 1: a NaN among numbers; 2: numbers only; 3: NaN and a null; 4: nulls only; 5: NaN only.
    pq.write_table(pa.table({
        "g": pa.array([1, 1, 1, 2, 2, 3, 3, 4, 5], pa.int64()),
        "x": pa.array([1.0, NAN, 3.0, 2.0, 5.0, NAN, None, None, NAN]),
        "y": pa.array([0.5, 0.5, NAN, 9.0, None, 1.0, 2.0, None, 0.0]),
        "s": ["a", "b", "c", "d", "e", "f", "g", "h", "i"],
    }), root / "t.parquet")
    pq.write_table(pa.table({"v": ["1.5", "NaN", "2", None], "h": pa.array([1, 1, 2, 2], pa.int64())}), root / "texts.parquet")
    return root


@pytest.fixture(scope="module")
def referee(data: Path) -> Any:
    yield from duckdb_tables(data, ("t", "texts"))  # tables: over the files, DuckDB's MAX leaves NaN out (5.0, not NaN)


def spec(data: Path, sql: str) -> dict[str, Any]:
    sources = {name: {"format": "parquet", "path": str(data / f"{name}.parquet")} for name in ("t", "texts")}
    return {"sources": {**sources, "q": {"sql": sql}}, "source": "q",
            "sink": {"path": "/tmp/unused-sql-nan-greatest"}}


QUERIES = {
    "group_max": "SELECT g, max(x) AS m, max(s) AS ms, max(g) AS mg FROM t GROUP BY g",
    "global_max": "SELECT max(x) AS m, max(y) AS n, min(x) AS lo FROM t",
    "global_max_of_no_rows": "SELECT max(x) AS m FROM t WHERE g > 10",
    "max_of_an_expression": "SELECT g, max(x * 2 + y) AS m FROM t GROUP BY g",
    "max_distinct": "SELECT g, max(DISTINCT x) AS m FROM t GROUP BY g",
    "partition_window_max": "SELECT s, max(x) OVER (PARTITION BY g) AS m FROM t",
    "greatest": "SELECT s, greatest(x, y) AS z, greatest(x, 2) AS w, greatest(g, 3) AS v FROM t",
    "max_of_greatest": "SELECT g, max(greatest(x, y)) AS m FROM t GROUP BY g",
    "having_max": "SELECT g FROM t GROUP BY g HAVING max(x) > 4",
    "max_in_a_cte_compared": "WITH m AS (SELECT g, max(x) AS top FROM t GROUP BY g) SELECT g FROM m WHERE top > 100",
    "whole_partition_ordered_window": "SELECT s, max(x) OVER (PARTITION BY g ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING "
                                      "AND UNBOUNDED FOLLOWING) AS m FROM t",
    "running_max_is_the_window_steps": "SELECT s, max(x) OVER (PARTITION BY g ORDER BY s) AS m FROM t",
    "max_of_a_computed_float_where_no_column_is_one": "SELECT h, max(CAST(v AS DOUBLE PRECISION)) AS m FROM texts GROUP BY h",
    "min_is_unchanged": "SELECT g, min(x) AS lo FROM t GROUP BY g",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_max_and_greatest_give_duckdbs_answer(data: Path, referee: Any, name: str) -> None:
    assert_same(run_polars(spec(data, QUERIES[name])), referee.execute(QUERIES[name]).df(), ordered=False)


def test_a_max_of_no_float_is_left_as_written(data: Path) -> None:
    from spillway.jobs.polars_frame import build_lazyframe

    plan = plan_spec(JobSpec.model_validate(spec(data, "SELECT g, max(s) AS ms, max(g) AS mg, greatest(g, 2) AS v FROM t GROUP BY g")))
    assert "NaN" not in build_lazyframe(plan).explain()


def test_a_plan_for_the_gpu_tests_a_computed_float_for_nan_where_no_column_is_a_float(data: Path) -> None:
    """``MAX(CAST(v AS DOUBLE))`` over a table of no float column: its ``= NaN`` test is false for a NaN under IEEE, so
    the plan for cudf-polars needs the ``x <> x`` term too. It was left out where no column was a float, and the
    H100 gave 1.5 where the CPU gives NaN (2026-12-06)."""
    from spillway.jobs.polars_frame import build_lazyframe

    plan = plan_spec(JobSpec.model_validate(spec(data, QUERIES["max_of_a_computed_float_where_no_column_is_one"])))
    assert 'col("v").strict_cast(Float64) != col("v").strict_cast(Float64)' in build_lazyframe(plan).explain()
    assert "!=" not in build_lazyframe(plan, ieee_comparisons=False).explain()


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_max_and_greatest_on_the_gpu_match_the_cpu(data: Path, name: str) -> None:
    """MAX and GREATEST with their NaN tests on cudf-polars, whose comparisons follow IEEE (jobs.sql_nan writes them out)."""
    assert_gpu_gives_the_cpus_answer(spec(data, QUERIES[name]), name, ordered=False)
