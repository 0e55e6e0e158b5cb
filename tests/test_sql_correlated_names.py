"""A correlated subquery's condition on a column whose name two joined tables share (jobs/sql_correlated_names.py).

Polars' SQL joined such a condition by the column's bare name and read the other table's column, silently (a helper's
hostile run, 2026-12-06): ``r.k = i.k`` inside ``FROM u JOIN r`` compared ``u.k``, and an outer ``u.k`` of ``i LEFT
JOIN u`` was ``i.k``. Each query here is checked against DuckDB over the same parquet files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_sql_source import assert_gpu_gives_the_cpus_answer, assert_same, duckdb_tables, run_polars, spec_over_tables

duckdb = pytest.importorskip("duckdb")

TABLES = ("i", "u", "r")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql_correlated_names")
    pq.write_table(pa.table({"k": pa.array([1, 2, 3, None], pa.int64()), "a": pa.array([0, 0, 5, 1], pa.int64())}), root / "i.parquet")
    pq.write_table(pa.table({"k": pa.array([2, 2, 7], pa.int64()), "w": [1.5, 2.5, 0.5]}), root / "u.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 5, 2], pa.int64()), "m": pa.array([2, 1, 7], pa.int64())}), root / "r.parquet")
    return root


@pytest.fixture(scope="module")
def referee(data: Path) -> Any:
    yield from duckdb_tables(data, TABLES)


def spec(data: Path, sql: str) -> dict[str, Any]:
    return spec_over_tables(data, TABLES, sql)


QUERIES = {
    # The inner query joins two tables with a column k; its condition reads the second one's.
    "an_inner_joins_shared_name": "SELECT i.k, (SELECT count(*) FROM u JOIN r ON r.m = u.k WHERE r.k = i.k) AS c FROM i",
    "an_inner_joins_shared_name_in_an_ordering": "SELECT i.k, (SELECT count(*) FROM u JOIN r ON r.m = u.k WHERE r.k < i.k) AS c FROM i",
    "both_tables_of_the_inner_join": "SELECT i.k, (SELECT max(r.m) FROM u JOIN r ON r.m = u.k WHERE r.k <= i.k AND u.k >= i.k) AS c FROM i",
    # The outer query joins two tables with a column k; the subquery reads the second one's (null where unmatched).
    "an_outer_left_joins_shared_name": "SELECT i.k, u.k AS uk, (SELECT count(*) FROM r WHERE r.k < u.k) AS c FROM i LEFT JOIN u ON i.k = u.k",
    "an_outer_inner_joins_shared_name": "SELECT i.a, u.w, (SELECT max(r.m) FROM r WHERE r.k >= u.k) AS c FROM i JOIN u ON i.a = u.k - 2",
    "in_where": "SELECT i.k, u.w FROM i LEFT JOIN u ON i.k = u.k WHERE i.a <= (SELECT count(*) FROM r WHERE r.k <= u.k)",
    # No join beside the table: left as written.
    "no_shared_name": "SELECT i.k, (SELECT count(*) FROM r WHERE r.k < i.k) AS c FROM i",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_correlated_condition_reads_its_own_tables_column(data: Path, referee: Any, name: str) -> None:
    assert_same(run_polars(spec(data, QUERIES[name])), referee.execute(QUERIES[name]).df(), ordered=False)


def test_the_added_column_does_not_show_under_a_star(data: Path, referee: Any) -> None:
    sql = "SELECT u.*, i.a, (SELECT count(*) FROM r WHERE r.k < u.k) AS c FROM i LEFT JOIN u ON i.a = u.k"
    got = run_polars(spec(data, sql))
    assert not [column for column in got.columns if column.startswith("_spillway")]
    assert_same(got, referee.execute(sql).df(), ordered=False)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_correlated_condition_on_the_gpu_matches_the_cpu(data: Path, name: str) -> None:
    assert_gpu_gives_the_cpus_answer(spec(data, QUERIES[name]), name, ordered=False)
