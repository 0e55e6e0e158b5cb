"""SQL shapes the rewrites keep as hash joins and plain group-bys, which cudf-polars runs.

Found on an H100 (2026-12-06, bench/gpu_session.sh verify): Polars planned four shapes with operators cudf-polars
26.10 refuses or fails on — TPC-H Q15's NaN-aware equality with a scalar subquery and Q16's ``NOT IN`` counts as
nested loop joins, Q16's ``COUNT(DISTINCT)`` with ``has_nulls`` in a group-by, and a ``LEFT JOIN`` condition on the
left table as a nested loop join that failed with "Hash join right table is empty". Each shape here is checked
against DuckDB on the CPU, its plan for cudf-polars is checked for those operators, and a GPU-marked copy runs it
on cudf-polars against the CPU.
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
from spillway.jobs.validate import plan_spec
from tests.test_sql_source import assert_gpu_gives_the_cpus_answer, assert_same, duckdb_tables, run_polars, spec_over_tables

duckdb = pytest.importorskip("duckdb")

TABLES = ("t", "u", "empty", "nullish")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql_hash_join_forms")
    nan = math.nan
    pq.write_table(pa.table({"g": ["a", "a", "a", "b", "b", None, "c"], "x": pa.array([1, 1, 2, None, 3, 4, None], pa.int64()),
                             "v": [1.5, nan, 2.0, nan, None, 0.0, -0.0], "s": ["p", "q", "r", "s", "t", "u", "w"]}), root / "t.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 3, 5], pa.int64()), "w": [nan, 2.0, 0.0], "n": ["u1", "u3", "u5"]}), root / "u.parquet")
    pq.write_table(pa.table({"k": pa.array([], pa.int64())}), root / "empty.parquet")
    pq.write_table(pa.table({"k": pa.array([1, None], pa.int64())}), root / "nullish.parquet")
    return root


@pytest.fixture(scope="module")
def referee(data: Path) -> Any:
    yield from duckdb_tables(data, TABLES)


def spec(data: Path, sql: str) -> dict[str, Any]:
    return spec_over_tables(data, TABLES, sql)


QUERIES = {
    # COUNT(DISTINCT x): nulls skipped, a group of null x alone counts 0, HAVING and ORDER BY on the count, no GROUP BY.
    "distinct_count_by_group": "SELECT g, count(DISTINCT x) AS n FROM t GROUP BY g",
    "distinct_count_having_and_order": "SELECT g, count(DISTINCT x) AS n FROM t GROUP BY g HAVING count(DISTINCT x) > 0 ORDER BY n DESC, g",
    "distinct_count_of_everything": "SELECT count(DISTINCT x) AS n FROM t",
    "distinct_count_of_an_expression_by_an_expression": "SELECT upper(g) AS gg, count(DISTINCT x % 2) AS n FROM t GROUP BY upper(g)",
    "distinct_count_after_a_join_and_where": "SELECT t.g, count(DISTINCT u.n) AS n FROM t JOIN u ON t.x = u.k WHERE t.s <> 'z' GROUP BY t.g",
    # Beside SUM, MIN, MAX, COUNT(y) and COUNT(*), summed up from the groups of (g, x); a SUM of nulls alone stays null.
    "distinct_count_beside_other_aggregates": "SELECT g, count(DISTINCT x) AS n, sum(x) AS total, min(v) AS lo, max(s) AS hi, "
                                              "count(v) AS nv, count(*) AS rows FROM t GROUP BY g",
    "distinct_count_in_arithmetic_with_others": "SELECT g, sum(x) / count(DISTINCT x) AS per, count(*) - count(DISTINCT x) AS repeats "
                                                "FROM t GROUP BY g HAVING count(*) > 1 ORDER BY g",
    "distinct_count_and_counts_of_nothing": "SELECT count(DISTINCT x) AS n, count(*) AS rows, sum(x) AS total FROM t WHERE s = 'none'",
    "distinct_count_and_a_repeated_aggregate": "SELECT g, count(DISTINCT x) AS n, sum(x) AS a, sum(x) + 1 AS b FROM t GROUP BY g",
    "distinct_count_beside_avg": "SELECT g, count(DISTINCT x) AS n, avg(x) AS mean FROM t GROUP BY g",
    "two_distinct_counts": "SELECT g, count(DISTINCT x) AS n, count(DISTINCT s) AS m FROM t GROUP BY g",
    "distinct_count_of_a_float_with_nan": "SELECT g, count(DISTINCT v) AS n FROM t GROUP BY g",
    # NOT IN: values, a subquery with a null (nothing kept), an empty one (everything kept, nulls too).
    "not_in": "SELECT s FROM t WHERE x NOT IN (SELECT k FROM u)",
    "not_in_with_a_null": "SELECT s FROM t WHERE x NOT IN (SELECT k FROM nullish)",
    "not_in_an_empty_subquery": "SELECT s FROM t WHERE x NOT IN (SELECT k FROM empty)",
    "not_in_beside_a_condition": "SELECT s FROM t WHERE g = 'a' AND x NOT IN (SELECT k FROM u WHERE n <> 'u3')",
    # A float equality that NaN may meet, against a scalar subquery and between two tables.
    "equal_to_a_scalar_subquery": "SELECT s FROM t WHERE v = (SELECT max(w) FROM u)",
    "equal_floats_of_two_tables": "SELECT t.s, u.n FROM t, u WHERE t.v = u.w",
    # What a helper's hostile run found (2026-12-06): a distinct count or NOT IN of a correlated subquery read the outer
    # column as the inner one (wrong rows), a NOT IN's subquery with an IN of its own was judged uncorrelated, and shapes
    # the first rewrites refused or failed on: a key of the counted value, a literal or NULL in NOT IN, a float value.
    "a_correlated_distinct_count": "SELECT s, (SELECT count(DISTINCT t2.s) FROM t t2 WHERE t2.x = t.x) AS c FROM t",
    "a_correlated_distinct_count_in_where": "SELECT s FROM t WHERE (SELECT count(DISTINCT t2.s) FROM t t2 WHERE t2.x = t.x) = 1",
    "a_correlated_not_in_with_an_in_inside": "SELECT s, x FROM t WHERE x NOT IN (SELECT t2.x + 1 FROM t t2 WHERE t2.g = t.g "
                                             "AND t2.x IN (SELECT x FROM t))",
    "a_distinct_count_by_an_expression_of_its_value": "SELECT abs(x) AS ax, count(DISTINCT x) AS n, count(*) AS c FROM t GROUP BY abs(x)",
    "a_literal_not_in": "SELECT s FROM t WHERE 4 NOT IN (SELECT x FROM t WHERE x < 3)",
    "not_in_a_select_of_null": "SELECT s FROM t WHERE x NOT IN (SELECT NULL FROM u)",
    "not_in_computed_floats": "SELECT s, x FROM t WHERE x NOT IN (SELECT k / 2 FROM u WHERE k < 5)",
    # A correlated scalar COUNT over no rows is 0 (Polars' own plan of a correlated one gave null).
    "a_correlated_distinct_count_over_no_rows": "SELECT s, (SELECT count(DISTINCT k) FROM u WHERE u.k > t.x) AS c FROM t",
    "a_correlated_count_over_no_rows_plus_one": "SELECT s, 1 + (SELECT count(*) FROM u WHERE u.k > t.x) AS c FROM t",
    # A float comparison inside or against a correlated subquery Polars plans itself: kept as written (no NaN terms).
    "a_float_comparison_in_a_correlated_not_in": "SELECT s FROM t WHERE x NOT IN (SELECT k FROM u WHERE u.w > t.v)",
    "a_float_against_a_correlated_scalar": "SELECT s FROM t WHERE v > (SELECT min(w) FROM u WHERE u.w <> t.v)",
    # A LEFT JOIN's condition on the left table.
    "left_join_condition_on_the_left": "SELECT t.s, u.n FROM t LEFT JOIN u ON u.k = t.x AND t.g = 'a'",
    # In a chain the key of a table joined before takes no expression in Polars: the condition stays in ON, as written.
    "left_join_condition_on_the_first_table_in_a_chain": "SELECT t.s, u.n, u2.n AS n2 FROM t LEFT JOIN u ON u.k = t.x "
                                                         "LEFT JOIN u AS u2 ON u2.k = u.k AND t.g = 'a'",
    "left_join_conditions_of_each_kind_in_a_chain": "SELECT t.s, u.n, u2.n AS n2 FROM t LEFT JOIN u ON u.k = t.x "
                                                    "LEFT JOIN u AS u2 ON u2.k = u.k AND u2.n <> 'u5' AND t.g = 'a'",
    "left_join_conditions_on_both_sides": "SELECT t.s, u.n FROM t LEFT JOIN u ON u.k = t.x AND t.g <> 'b' AND u.n <> 'u5'",
    # RIGHT and FULL JOINs with conditions on one side each: that side's key is null where they fail (Polars refused
    # them: "'RIGHT' join is not supported with non-equi join conditions"). A null or NaN in a condition fails it.
    "right_join_condition_on_the_right": "SELECT t.s, u.n FROM t RIGHT JOIN u ON u.k = t.x AND u.n <> 'u3'",
    "right_join_condition_on_the_left": "SELECT t.s, u.n FROM t RIGHT JOIN u ON u.k = t.x AND t.v > 1",
    "right_join_conditions_on_both_sides": "SELECT t.s, t.x, u.k, u.n FROM t RIGHT JOIN u ON t.x = u.k AND t.g IS NOT NULL AND u.w >= 0",
    "full_join_condition_on_the_right": "SELECT t.s, u.n FROM t FULL JOIN u ON u.k = t.x AND u.w > 1",
    "full_join_conditions_on_both_sides": "SELECT t.s, t.x, u.k, u.n FROM t FULL OUTER JOIN u ON u.k = t.x AND t.s <> 'p' AND u.n <> 'u5'",
    "full_join_of_two_keys_and_a_condition": "SELECT t.s, u.n FROM t FULL JOIN u ON u.k = t.x AND u.n = t.s || '1' AND t.g = 'a'",
    # An inner join ON an OR with no key beside it: a cross join filtered by WHERE (Polars refused the OR in ON). It
    # stays a nested loop join, which no key can make a hash join.
    "inner_join_on_an_or": "SELECT t.s, u.n FROM t JOIN u ON t.x = u.k OR t.v = u.w",
    "inner_join_on_an_or_and_a_condition": "SELECT t.s, u.n FROM t JOIN u ON (t.x = u.k OR t.s = 'w') AND u.n <> 'u5'",
    "inner_join_on_an_or_before_a_left_join": "SELECT t.s, u.n, u2.n AS n2 FROM t JOIN u ON t.x = u.k OR t.x IS NULL "
                                              "LEFT JOIN u AS u2 ON u2.k = u.k AND u2.n <> 'u1'",
    "right_join_condition_after_a_join": "SELECT t.s, u.n, u2.n AS n2 FROM t JOIN u ON u.k = t.x RIGHT JOIN u AS u2 ON u2.k = u.k AND u2.n <> 'u1'",
}

#: What cudf-polars 26.10 refuses or failed on, as Polars' plan names it.
GPU_UNFRIENDLY = ("NESTED LOOP JOIN", "has_nulls")
#: The shapes whose plans keep them: an AVG beside the distinct count, two distinct counts, and correlated subqueries,
#: which Polars plans itself (cudf-polars refuses those plans: a 422 at submit on a GPU cluster).
KEPT_AS_POLARS_PLANS_THEM = {"distinct_count_beside_avg", "two_distinct_counts", "a_correlated_distinct_count",
                             "a_correlated_distinct_count_in_where", "a_float_against_a_correlated_scalar",
                             "a_correlated_distinct_count_over_no_rows", "a_correlated_count_over_no_rows_plus_one",
                             "inner_join_on_an_or", "inner_join_on_an_or_and_a_condition", "inner_join_on_an_or_before_a_left_join"}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_each_shape_gives_duckdbs_answer(data: Path, referee: Any, name: str) -> None:
    assert_same(run_polars(spec(data, QUERIES[name])), referee.execute(QUERIES[name]).df(), ordered="ORDER BY" in QUERIES[name])


@pytest.mark.parametrize("name", sorted(set(QUERIES) - KEPT_AS_POLARS_PLANS_THEM))
def test_the_plan_for_cudf_polars_has_no_nested_loop_join_and_no_has_nulls(data: Path, name: str) -> None:
    plan = build_lazyframe(plan_spec(JobSpec.model_validate(spec(data, QUERIES[name])))).explain()
    assert not [word for word in GPU_UNFRIENDLY if word in plan], plan


@pytest.mark.parametrize(("name", "column"), [("right_join_condition_on_the_left", "v"), ("full_join_condition_on_the_right", "w"),
                                            ("right_join_conditions_on_both_sides", "w")])
def test_a_float_condition_folded_into_a_key_orders_nan_on_the_gpu(data: Path, name: str, column: str) -> None:
    """``CASE WHEN u.w > 1 THEN u.k END``: the condition is not a key, so a plan for cudf-polars (IEEE comparisons) gets
    its NaN terms; kept as a key was, a NaN ``w`` matched on the CPU and nothing on an H100 (2026-12-06)."""
    plan = build_lazyframe(plan_spec(JobSpec.model_validate(spec(data, QUERIES[name]))), ieee_comparisons=True).explain()
    assert f'(col("{column}") != col("{column}"))' in plan, plan


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_each_shape_on_the_gpu_matches_the_cpu(data: Path, name: str) -> None:
    assert_gpu_gives_the_cpus_answer(spec(data, QUERIES[name]), name, ordered="ORDER BY" in QUERIES[name])


def test_a_sided_join_on_a_condition_of_both_tables_is_refused_for_the_gpu_before_it_runs(data: Path) -> None:
    """``LEFT JOIN … ON u.k = t.x AND u.n < t.s`` stays a nested loop join (no key can carry the condition), which
    cudf-polars 26.10 translates and then fails on as it runs; the refusal says so before any work (a 422 at submit
    on a GPU cluster), and the shapes above, hash joins, are not refused."""
    from spillway.jobs.gpu_support import fails_on_cudf_polars

    sql = "SELECT t.s, u.n FROM t LEFT JOIN u ON u.k = t.x AND u.n < t.s"
    frame = build_lazyframe(plan_spec(JobSpec.model_validate(spec(data, sql))))
    assert "nested loop join" in (fails_on_cudf_polars(frame) or "")
    for name in ("left_join_condition_on_the_left", "not_in", "equal_to_a_scalar_subquery"):
        assert fails_on_cudf_polars(build_lazyframe(plan_spec(JobSpec.model_validate(spec(data, QUERIES[name]))))) is None, name
