"""An aggregate's ``FILTER (WHERE …)`` in a SQL source (jobs/sql_filters.py), against DuckDB over the same parquet.

It was refused at submit ("FILTER … is not allowed in a SQL source"), where PostgreSQL and DuckDB run it. Each query
here is run through the Polars engine's plan and compared with DuckDB's answer: nulls and NaN in the values and in
the conditions, every aggregate kind, DISTINCT, windows, HAVING, subqueries in and around the condition.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.sql_source import SqlRefused
from spillway.jobs.validate import plan_spec
from spillway.service.client import ApiError, SpillwayClient
from tests.test_sql_source import assert_gpu_gives_the_cpus_answer, assert_same, duckdb_tables, run_polars, spec_over_tables

duckdb = pytest.importorskip("duckdb")

TABLES = ("t", "u")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql_filters")
    pq.write_table(pa.table({
        "g": ["a", "a", "a", "b", "b", "b", None, "c"],
        "x": pa.array([1, 2, 2, None, 5, 6, 7, None], pa.int64()),
        "v": [1.5, math.nan, 2.0, 4.0, None, -1.0, 0.5, 3.0],
        "s": ["late", "ok", "late", None, "late", "ok", "ok", "late"],
    }), root / "t.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 2, 5], pa.int64()), "n": ["u1", "u2", "u5"]}), root / "u.parquet")
    return root


@pytest.fixture(scope="module")
def referee(data: Path) -> Any:
    yield from duckdb_tables(data, TABLES)


def spec(data: Path, sql: str, sink: str = "/tmp/unused-sql-filter-sink") -> dict[str, Any]:
    return spec_over_tables(data, TABLES, sql, sink)


QUERIES = {
    # COUNT(*) counts the rows where the condition holds: a null condition (s is null) is not one.
    "count_star": "SELECT g, count(*) FILTER (WHERE s = 'late') AS late, count(*) AS n FROM t GROUP BY g",
    "no_group_by": "SELECT count(*) FILTER (WHERE x > 1) AS n, sum(x) FILTER (WHERE s <> 'ok') AS total FROM t",
    # A SUM, AVG, MIN or MAX of no row that passes is null; of a NaN, NaN.
    "each_aggregate": "SELECT g, sum(x) FILTER (WHERE v > 0) AS s, avg(v) FILTER (WHERE x >= 2) AS a, "
                      "min(v) FILTER (WHERE s = 'late') AS lo, max(x) FILTER (WHERE s = 'ok') AS hi FROM t GROUP BY g",
    "spread": "SELECT g, stddev_samp(v) FILTER (WHERE x IS NOT NULL) AS sd, variance(x) FILTER (WHERE s IS NOT NULL) AS var, "
              "median(x) FILTER (WHERE x > 1) AS med FROM t GROUP BY g",
    "covariance": "SELECT covar_samp(x, v) FILTER (WHERE s = 'late') AS c, covar_pop(x, v) FILTER (WHERE x < 7) AS p FROM t",
    "distinct_count": "SELECT g, count(DISTINCT x) FILTER (WHERE s = 'late') AS n FROM t GROUP BY g",
    "distinct_count_beside_a_sum": "SELECT g, count(DISTINCT x) FILTER (WHERE v > 0) AS n, sum(x) AS total FROM t GROUP BY g",
    "two_filtered_distinct_counts": "SELECT count(DISTINCT x) FILTER (WHERE s = 'late') AS a, count(DISTINCT x) FILTER (WHERE s = 'ok') AS b FROM t",
    "string_agg_distinct_in_order": "SELECT g, string_agg(DISTINCT s, '|' ORDER BY s) FILTER (WHERE x > 0) AS ss FROM t GROUP BY g",
    # A float rounds its binary value: a NaN average rounds to NaN (it failed as a cast to a 38-digit decimal).
    "round_of_an_average_with_nan": "SELECT g, round(avg(v) FILTER (WHERE x IS NOT NULL), 2) AS a, round(avg(v), 1) AS b FROM t GROUP BY g",
    "string_agg_in_order": "SELECT g, string_agg(s, ',' ORDER BY x DESC) FILTER (WHERE x IS NOT NULL) AS ss FROM t GROUP BY g",
    "having_and_order_by": "SELECT g, count(*) FILTER (WHERE s = 'late') AS late FROM t GROUP BY g "
                           "HAVING count(*) FILTER (WHERE s = 'ok') > 0 ORDER BY late DESC, g",
    "a_condition_with_or_and_a_case": "SELECT g, sum(x) FILTER (WHERE s = 'ok' OR CASE WHEN v > 1 THEN true ELSE false END) AS t FROM t GROUP BY g",
    "a_subquery_in_the_condition": "SELECT count(*) FILTER (WHERE x > (SELECT avg(k) FROM u)) AS m FROM t",
    "a_filter_inside_the_conditions_subquery": "SELECT count(*) FILTER (WHERE x > (SELECT max(k) FILTER (WHERE n <> 'u5') FROM u)) AS n FROM t",
    "in_a_correlated_subquery": "SELECT u.n, (SELECT count(*) FILTER (WHERE t.s = 'late') FROM t WHERE t.x = u.k) AS late FROM u",
    "in_a_window": "SELECT g, x, sum(x) FILTER (WHERE s = 'late') OVER (PARTITION BY g) AS late_total FROM t",
    "after_a_join": "SELECT u.n, count(*) FILTER (WHERE t.v > 1) AS hits FROM t JOIN u ON t.x = u.k GROUP BY u.n",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_filtered_aggregate_gives_duckdbs_answer(data: Path, referee: Any, name: str) -> None:
    ordered = "ORDER BY" in QUERIES[name] and "OVER" not in QUERIES[name] and "string_agg" not in QUERIES[name]
    assert_same(run_polars(spec(data, QUERIES[name])), referee.execute(QUERIES[name]).df(), ordered=ordered)


def test_a_filtered_distinct_count_beside_a_sum_is_planned_without_has_nulls(data: Path) -> None:
    """The FILTER is a CASE before the two-groupings rewrite, so cudf-polars gets a plan it runs (no has_nulls)."""
    plan = build_lazyframe(plan_spec(JobSpec.model_validate(spec(data, QUERIES["distinct_count_beside_a_sum"]))), ieee_comparisons=True)
    assert "has_nulls" not in plan.explain()


REFUSED = {
    "after_a_function": ("SELECT upper(s) FILTER (WHERE x > 1) AS u FROM t", "FILTER after UPPER(s) at line 1, col 8: FILTER (WHERE …) follows an aggregate only"),
    "an_aggregate_in_the_condition": ("SELECT max(x) FILTER (WHERE count(*) > 1) AS m FROM t", "COUNT(*) in FILTER at line 1, col 29"),
    # A subquery made a join below the aggregate repeats or drops its rows: COUNT(*) FILTER (WHERE EXISTS …) counted
    # each row once per row of u (a helper's hostile run). A scalar aggregate of no outer column runs (above).
    "exists_in_the_condition": ("SELECT count(*) FILTER (WHERE EXISTS (SELECT 1 FROM u WHERE u.k = 2)) AS n FROM t",
                                "a subquery inside an aggregate's argument or FILTER is not run"),
    "a_correlated_exists_in_the_condition": ("SELECT g, count(*) FILTER (WHERE EXISTS (SELECT 1 FROM u WHERE u.k < t.x)) AS n FROM t GROUP BY g",
                                             "a subquery inside an aggregate's argument or FILTER is not run"),
    "a_condition_of_no_column": ("SELECT g, count(*) FILTER (WHERE true) AS n FROM t GROUP BY g",
                                 "FILTER (WHERE TRUE) reads no column at line 1, col 11: it keeps every row or none"),
    "in_a_subquery_in_the_condition": ("SELECT count(*) FILTER (WHERE x IN (SELECT k FROM u)) AS n FROM t",
                                       "a subquery inside an aggregate's argument or FILTER is not run"),
    "a_window_in_the_condition": ("SELECT max(x) FILTER (WHERE row_number() OVER (ORDER BY x) > 1) AS m FROM t", "in FILTER at line 1, col 29"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_filter_sql_does_not_allow_is_refused_naming_the_part(data: Path, name: str) -> None:
    sql, message = REFUSED[name]
    with pytest.raises(SqlRefused) as info:
        plan_spec(JobSpec.model_validate(spec(data, sql)))
    assert info.value.field == "sources.q.sql" and message in info.value.message, info.value.message


@pytest.mark.engines("polars")
def test_a_filtered_aggregate_runs_and_a_wrong_one_is_422_through_rest(api: SpillwayClient, data: Path, referee: Any, tmp_path: Path) -> None:
    import pandas as pd

    from tests.conftest import wait_terminal

    out = tmp_path / "out"
    job = wait_terminal(api, api.submit({**spec(data, QUERIES["count_star"], str(out)), "engine": "polars"}).id, timeout=120)
    assert job.state.value == "SUCCEEDED", job.error
    got = pd.concat(pd.read_parquet(path) for path in sorted(out.glob("*.parquet")))
    assert_same(got.reset_index(drop=True), referee.execute(QUERIES["count_star"]).df(), ordered=False)
    with pytest.raises(ApiError) as info:
        api.submit(spec(data, REFUSED["an_aggregate_in_the_condition"][0], str(tmp_path / "never")))
    assert info.value.status == 422 and info.value.detail.code == "invalid_sql" and info.value.detail.field == "sources.q.sql"
    assert not (tmp_path / "never").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_filtered_aggregate_on_the_gpu_matches_the_cpu(data: Path, name: str) -> None:
    """cudf-polars raises (never falls back) on what it cannot run: an xfail naming why."""
    assert_gpu_gives_the_cpus_answer(spec(data, QUERIES[name]), name, ordered=False)
