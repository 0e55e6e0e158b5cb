"""SQL equalities of unlike types: an integer key with a float one, a decimal, ``uint64``, timestamps of two units.

Polars joins keys of one type only, so ``ON s.amount = p.product_id`` failed as the job ran ("datatypes of join
keys don't match"), and ``k = c.f`` with ``f`` a CTE's float was refused at submit, where DuckDB and PostgreSQL
compare them. Each query here is checked against DuckDB over the same parquet files (jobs/sql_key_types.py compares
them in the type the ``join`` step compares such keys in); one runs through the live service.
"""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import plan_spec
from spillway.service.client import SpillwayClient
from tests.conftest import wait_terminal
from tests.test_sql_source import assert_gpu_gives_the_cpus_answer, assert_same, duckdb_tables, run_polars, spec_over_tables

duckdb = pytest.importorskip("duckdb")

D = decimal.Decimal
TABLES = ("ints", "floats", "decimals", "unsigned", "millis", "nanos", "bigints", "bigfloats", "bigunsigned", "utc", "utcns", "berlin")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql_key_types")
    # 1.0 and 3.0 equal integers (they match), 2.5 has a fraction (it matches neither 2 nor 3), a null matches nothing.
    pq.write_table(pa.table({"k": pa.array([1, 2, 3, None, 3], pa.int64()), "a": ["x", "y", "z", "n", "z2"]}), root / "ints.parquet")
    pq.write_table(pa.table({"k": pa.array([1.0, 2.5, 3.0, None]), "b": ["p", "q", "r", "s"]}), root / "floats.parquet")
    pq.write_table(pa.table({"k": pa.array([D("1.00"), D("2.50"), D("3.00"), None], pa.decimal128(12, 2)), "c": ["d1", "d2.5", "d3", "dn"]}),
                   root / "decimals.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 3, 2**63 + 5, None], pa.uint64()), "u": ["u1", "u3", "ubig", "un"]}), root / "unsigned.parquet")
    moments = [datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2, 0, 0, 0, 1000), None]
    pq.write_table(pa.table({"t": pa.array(moments, pa.timestamp("ms")), "m": ["m1", "m2", "mn"]}), root / "millis.parquet")
    nanos = [datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2, 0, 0, 0, 1000), datetime.datetime(2024, 1, 3)]
    pq.write_table(pa.table({"t": pa.array(nanos, pa.timestamp("ns")), "n": ["n1", "n2", "n3"]}), root / "nanos.parquet")
    # Integers one float apart (2**53 and 2**53 + 1 are one double), and both ends of uint64 against int64.
    big = [2**53, 2**53 + 1, 2**63 - 1, 2**63 - 2, 1, -1, None]
    pq.write_table(pa.table({"k": pa.array(big, pa.int64()), "bi": [f"i{n}" for n in range(len(big))]}), root / "bigints.parquet")
    pq.write_table(pa.table({"k": pa.array([float(2**53), 5.0]), "bf": ["f53", "f5"]}), root / "bigfloats.parquet")
    unsigned = [1, 3, 2**63 + 5, None, 2**63, 2**64 - 1]
    pq.write_table(pa.table({"k": pa.array(unsigned, pa.uint64()), "bu": [f"u{n}" for n in range(len(unsigned))]}), root / "bigunsigned.parquet")
    # One instant in two zones and units: 01:00 in Berlin is 00:00 UTC.
    instants = pa.array([datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2, 0, 0, 0, 1000), None], pa.timestamp("ms", tz="UTC"))
    pq.write_table(pa.table({"t": instants, "z": ["z1", "z2", "zn"]}), root / "utc.parquet")
    pq.write_table(pa.table({"t": instants.cast(pa.timestamp("ns", tz="UTC")), "z": ["z1", "z2", "zn"]}), root / "utcns.parquet")
    berlin = pa.array([datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2), datetime.datetime(2024, 1, 3)], pa.timestamp("ns", tz="UTC"))
    pq.write_table(pa.table({"t": berlin.cast(pa.timestamp("ns", tz="Europe/Berlin")), "zb": ["b1", "b2", "b3"]}), root / "berlin.parquet")
    return root


@pytest.fixture(scope="module")
def referee(data: Path) -> Any:
    yield from duckdb_tables(data, TABLES)


def spec(data: Path, sql: str, sink: str = "/tmp/unused-sql-key-sink") -> dict[str, Any]:
    return spec_over_tables(data, TABLES, sql, sink)


QUERIES = {
    "int_joins_float": "SELECT i.a, f.b FROM ints i JOIN floats f ON i.k = f.k",
    "float_joins_int": "SELECT i.a, f.b FROM floats f JOIN ints i ON f.k = i.k",
    "left_join_with_a_right_condition": "SELECT i.a, f.b FROM ints i LEFT JOIN floats f ON i.k = f.k AND f.b <> 's'",
    "full_join": "SELECT i.a, f.b FROM ints i FULL JOIN floats f ON i.k = f.k",
    "from_list_equality": "SELECT i.a, f.b FROM ints i, floats f WHERE f.k = i.k",
    "int_in_floats": "SELECT a FROM ints WHERE k IN (SELECT k FROM floats)",
    "float_in_ints": "SELECT b FROM floats WHERE k IN (SELECT k FROM ints)",
    "float_not_in_ints": "SELECT b FROM floats WHERE k NOT IN (SELECT k FROM ints WHERE k IS NOT NULL)",
    "exists": "SELECT a FROM ints i WHERE EXISTS (SELECT 1 FROM floats f WHERE f.k = i.k)",
    "a_ctes_float_key": "WITH c AS (SELECT k * 1.0 AS f, b FROM floats) SELECT i.a, c.b FROM ints i JOIN c ON i.k = c.f",
    "decimal_joins_int": "SELECT i.a, d.c FROM ints i JOIN decimals d ON d.k = i.k",
    "decimal_joins_float": "SELECT f.b, d.c FROM floats f JOIN decimals d ON d.k = f.k",
    "unsigned_joins_signed": "SELECT i.a, u.u FROM ints i JOIN unsigned u ON i.k = u.k",
    "millis_join_nanos": "SELECT m.m, n.n FROM millis m JOIN nanos n ON m.t = n.t",
    "a_computed_key": "SELECT i.a, f.b FROM ints i JOIN floats f ON i.k + 1 = f.k + 1",
    "a_key_and_a_condition": "SELECT i.a, f.b FROM ints i LEFT JOIN floats f ON f.k = i.k AND i.a <> 'x'",
    "a_decimal_key_and_a_condition": "SELECT i.a, d.c FROM ints i LEFT JOIN decimals d ON d.k = i.k AND i.a <> 'x'",
    # Conditions on the left table, on both tables and on none: the first two are keys, the last a nested loop join.
    "a_key_and_conditions_on_each_side": "SELECT i.a, f.b FROM ints i LEFT JOIN floats f ON f.k = i.k AND i.a <> 'x' AND f.b <> 's' AND 1 = 1",
    "a_key_and_a_condition_on_both_tables": "SELECT i.a, f.b FROM ints i LEFT JOIN floats f ON f.k = i.k AND f.b < i.a",
    "an_alias_of_an_alias": "WITH c AS (SELECT k AS kk, b FROM floats), d AS (SELECT kk AS k2, b FROM c) SELECT i.a, d.b FROM ints i JOIN d ON i.k = d.k2",
    "a_named_derived_columns_list": "SELECT i.a, c.y FROM ints i JOIN (SELECT k, b FROM floats) AS c(x, y) ON i.k = c.x",
    # A subquery's keys are grouped as they are compared: 2**53 + 1 is 2**53 as a float, one match, not two.
    "in_over_integers_one_float_apart": "SELECT bf FROM bigfloats WHERE k IN (SELECT k FROM bigints)",
    "exists_over_integers_one_float_apart": "SELECT bf FROM bigfloats f WHERE EXISTS (SELECT 1 FROM bigints i WHERE i.k = f.k)",
    "scalar_over_integers_one_float_apart": "SELECT bf, (SELECT max(bi) FROM bigints i WHERE i.k = f.k) AS m FROM bigfloats f",
    # uint64 with int64 exactly: 2**63 - 1 is not 2**63.
    "unsigned_near_two_to_the_63": "SELECT i.bi, u.bu FROM bigints i JOIN bigunsigned u ON i.k = u.k",
    "signed_not_in_unsigned": "SELECT bi FROM bigints WHERE k NOT IN (SELECT k FROM bigunsigned WHERE k IS NOT NULL)",
    "signed_in_unsigned": "SELECT bi FROM bigints WHERE k IN (SELECT k FROM bigunsigned)",
    # The key of a table joined before: Polars takes no expression over it in a later join's ON.
    "a_key_joined_before": "SELECT x.a, z.b FROM ints x JOIN ints y ON x.k = y.k JOIN floats z ON y.k = z.k",
    "a_key_joined_before_used_twice": "SELECT x.a, z.b, w.b AS b2 FROM ints x JOIN ints y ON x.k = y.k JOIN floats z ON y.k = z.k "
                                      "JOIN floats w ON y.k = w.k",
    "a_derived_tables_key_joined_before": "SELECT x.a, z.b FROM ints x JOIN (SELECT k, a FROM ints) y ON x.k = y.k "
                                          "JOIN floats z ON y.k = z.k",
    # Zoned timestamps of two zones and units compare as instants; INTERSECT and EXCEPT join their columns as keys.
    "zones_and_units_as_instants": "SELECT u.z, b.zb FROM utc u JOIN berlin b ON u.t = b.t",
    "zoned_in_zoned": "SELECT zb FROM berlin WHERE t IN (SELECT t FROM utc)",
    # A computed zoned time's zone is unknown to sqlglot's types: compared as instants all the same.
    "a_computed_zoned_key": "SELECT u.z, b.zb FROM utcns u JOIN berlin b ON u.t = b.t + INTERVAL '0 seconds'",
    # A zoned column against a TIMESTAMP literal, read as UTC: Polars failed as it pruned row groups by their statistics.
    "a_zoned_column_against_a_timestamp_literal": "SELECT z FROM utc WHERE t >= TIMESTAMP '2024-01-01 12:00:00'",
    "a_zoned_column_between_timestamp_literals": "SELECT z FROM utcns WHERE t BETWEEN TIMESTAMP '2024-01-01 00:00:00' "
                                                 "AND TIMESTAMP '2024-01-02 00:00:00'",
    # Orderings of unlike types: join_where conditions of a FROM list and of a correlated EXISTS (Polars: "'join_where'
    # cannot compare Float64 with Int64").
    "an_ordering_across_a_from_list": "SELECT i.a, f.b FROM ints i, floats f WHERE i.k < f.k",
    "an_ordering_in_a_correlated_exists": "SELECT i.a FROM ints i WHERE EXISTS (SELECT 1 FROM floats f WHERE f.k = i.k AND f.k < i.k + 1)",
    # A correlated scalar subquery's ordering of unlike types: Polars takes its condition only of two bare columns,
    # so either side is cast through a derived table over its table, the outer one too (it failed as the job ran).
    "a_correlated_ordering_in_a_select_list": "SELECT a, (SELECT max(b) FROM floats f WHERE f.k < i.k) AS m FROM ints i",
    "a_correlated_ordering_in_where": "SELECT a FROM ints i WHERE a > (SELECT max(b) FROM floats f WHERE f.k < i.k)",
    "a_correlated_ordering_of_an_outer_float": "SELECT b, (SELECT max(a) FROM ints i WHERE i.k >= f.k) AS m FROM floats f",
    "a_correlated_count_of_decimals": "SELECT a, (SELECT count(*) FROM decimals d WHERE d.k <> i.k) AS n FROM ints i",
    "a_correlated_ordering_of_unsigned_and_signed": "SELECT bi, (SELECT min(bu) FROM bigunsigned u WHERE u.k > b.k) AS m FROM bigints b",
    "a_correlated_ordering_of_a_joined_table": "SELECT i.a, f.b, (SELECT max(d.c) FROM decimals d WHERE d.k <= i.k) AS m "
                                               "FROM ints i JOIN floats f ON i.k = f.k",
    "a_correlated_ordering_under_a_star": "SELECT *, (SELECT max(b) FROM floats f WHERE f.k < i.k) AS m FROM ints i",
    "a_correlated_ordering_of_a_ctes_column": "WITH c AS (SELECT k, a FROM ints WHERE a <> 'n') "
                                              "SELECT a, (SELECT max(b) FROM floats f WHERE f.k < c.k) AS m FROM c",
    "a_correlated_ordering_beside_an_equality": "SELECT a, (SELECT count(*) FROM floats f WHERE f.k < i.k AND f.b <> i.a) AS n FROM ints i",
    # uint64 with int64 in a join on more than keys: the cast key column was lost ("unable to find column "_u_1"").
    "an_exists_of_unsigned_with_an_ordering": "SELECT b.bi FROM bigints b WHERE EXISTS (SELECT 1 FROM bigunsigned u WHERE u.k = b.k AND u.k > b.k - 1)",
    "a_left_join_of_unsigned_on_a_key_and_an_ordering": "SELECT b.bi, u.bu FROM bigints b LEFT JOIN bigunsigned u ON u.k = b.k AND u.k >= b.k",
    "an_ordering_beside_a_key": "SELECT i.a, f.b FROM ints i JOIN floats f ON i.k = f.k WHERE i.k <= f.k",
    "intersect_of_int_and_float": "SELECT k FROM ints INTERSECT SELECT k FROM floats",
    "except_of_float_and_int": "SELECT k FROM floats EXCEPT SELECT k FROM ints",
    "intersect_of_two_columns": "SELECT k, a FROM ints INTERSECT SELECT k, b FROM floats",
    # A user's grouped table keeps its groups in a JOIN (each matches): only a subquery's is grouped as compared.
    "a_grouped_table_joined_on_a_float_key": "SELECT d.n, f.bf FROM (SELECT k AS kk, count(*) AS n FROM bigints GROUP BY k) d "
                                             "JOIN bigfloats f ON d.kk = f.k",
    "grouped_counts_by_a_float_key": "SELECT f.b, count(*) AS n FROM floats f JOIN ints i ON i.k = f.k GROUP BY f.b",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_an_equality_of_unlike_types_gives_duckdbs_answer(data: Path, referee: Any, name: str) -> None:
    expected = referee.execute(QUERIES[name]).df()
    assert_same(run_polars(spec(data, QUERIES[name])), expected, ordered=False)


def test_the_casts_are_written_only_where_the_types_differ(data: Path) -> None:
    """Keys of one type keep the query as it was (every TPC-H query; tests/test_sql_tpch.py checks their answers)."""
    from spillway.jobs.polars_frame import build_lazyframe

    same = plan_spec(JobSpec.model_validate(spec(data, "SELECT a.a, b.a AS a2 FROM ints a JOIN ints b ON a.k = b.k")))
    assert "CAST" not in build_lazyframe(same).explain().upper()
    unlike = plan_spec(JobSpec.model_validate(spec(data, QUERIES["int_joins_float"])))
    assert "Float64" in build_lazyframe(unlike).explain()


@pytest.mark.engines("polars")
def test_an_unlike_key_runs_through_rest(api: SpillwayClient, data: Path, referee: Any, tmp_path: Path) -> None:
    """The job that failed as ``sql_failed`` ("datatypes of join keys don't match") succeeds with DuckDB's rows."""
    import pandas as pd

    out = tmp_path / "out"
    accepted = api.submit({**spec(data, QUERIES["grouped_counts_by_a_float_key"], str(out)), "name": "sql_unlike_keys", "engine": "polars"})
    job = wait_terminal(api, accepted.id, timeout=120)
    assert job.state == JobStatus.SUCCEEDED, job.error
    got = pd.concat(pd.read_parquet(path) for path in sorted(out.glob("*.parquet")))
    assert_same(got.reset_index(drop=True), referee.execute(QUERIES["grouped_counts_by_a_float_key"]).df(), ordered=False)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_an_equality_of_unlike_types_on_the_gpu_matches_the_cpu(data: Path, name: str) -> None:
    """The casts on cudf-polars, which raises (never falls back) on what it cannot run."""
    assert_gpu_gives_the_cpus_answer(spec(data, QUERIES[name]), name, ordered=False)


@pytest.mark.engines("polars")
def test_a_query_polars_cannot_plan_over_the_real_types_fails_naming_the_source(api: SpillwayClient, tmp_path: Path) -> None:
    """A naive timestamp key with a zoned one: the submit check (kinds only) passes it, Polars refuses it when the service
    plans the job over the real types. The job fails as sql_failed naming the source, as a worker's failure would."""
    root = tmp_path / "zones"
    root.mkdir()
    moment = [datetime.datetime(2024, 1, 1)]
    pq.write_table(pa.table({"t": pa.array(moment, pa.timestamp("ms")), "m": ["m1"]}), root / "naive.parquet")
    pq.write_table(pa.table({"t": pa.array(moment, pa.timestamp("ms", tz="UTC")), "z": ["z1"]}), root / "zoned.parquet")
    sources = {name: {"format": "parquet", "path": str(root / f"{name}.parquet")} for name in ("naive", "zoned")}
    job_spec = {"name": "sql_zones", "engine": "polars", "sources": {**sources, "q": {"sql": "SELECT n.m, z.z FROM naive n JOIN zoned z ON n.t = z.t"}},
                "source": "q", "sink": {"path": str(tmp_path / "out")}}
    job = wait_terminal(api, api.submit(job_spec).id, timeout=120)
    assert job.state == JobStatus.FAILED and job.error is not None
    assert job.error.code == "sql_failed" and job.error.field == "sources.q.sql", job.error
    assert "join keys" in job.error.message and "Traceback" not in job.error.message


def test_an_ordering_of_two_time_units_keeps_dates_nanoseconds_cannot_hold(tmp_path: Path) -> None:
    """Milliseconds against nanoseconds were compared in nanoseconds, which hold only 1677–2262: 2500-06-01 and
    1600-01-01 became null and their rows fell out of ``<`` and ``<>``, silently (a helper's hostile run). An ordering
    now compares in microseconds; the expected rows are worked out here (DuckDB refuses the comparison)."""
    far = [datetime.datetime(2020, 1, 1), datetime.datetime(2500, 6, 1), datetime.datetime(1600, 1, 1), datetime.datetime(9999, 12, 31)]
    near = [datetime.datetime(2020, 1, 1), datetime.datetime(2021, 1, 1)]
    pq.write_table(pa.table({"id": pa.array(range(len(far)), pa.int64()), "ts": pa.array(far, pa.timestamp("ms"))}), tmp_path / "m.parquet")
    pq.write_table(pa.table({"id": pa.array(range(len(near)), pa.int64()), "ts": pa.array(near, pa.timestamp("ns"))}), tmp_path / "n.parquet")
    sources = {name: {"format": "parquet", "path": str(tmp_path / f"{name}.parquet")} for name in ("m", "n")}
    for op, compare in (("<", lambda a, b: a < b), ("<>", lambda a, b: a != b), (">=", lambda a, b: a >= b)):
        sql = f"SELECT m.id AS i, n.id AS j FROM m, n WHERE m.ts {op} n.ts"
        got = run_polars({"sources": {**sources, "q": {"sql": sql}}, "source": "q", "sink": {"path": "/tmp/unused-sql-key-sink"}})
        expected = sorted((i, j) for i, a in enumerate(far) for j, b in enumerate(near) if compare(a, b))
        assert sorted(map(tuple, got.itertuples(index=False))) == expected, op


def test_an_ordering_of_a_fractional_decimal_and_a_large_integer_is_not_cast(tmp_path: Path) -> None:
    """``CAST(small AS DECIMAL(38, 30)) < big``: cast to the common decimal, the integer overflowed its 8 integer
    digits and the job failed as it ran (a hostile run), and Polars' own comparison made it null: false for 10^12.
    An ordering compares such a pair with 18 decimal places; across two tables (a ``join_where``) too."""
    small, big = [1, 2, 3], [0, 2, 10**12]
    pq.write_table(pa.table({"id": pa.array([0, 1, 2], pa.int64()), "small": pa.array(small, pa.int32()), "big": pa.array(big, pa.int64())}),
                   tmp_path / "ints.parquet")
    sql = "SELECT id FROM ints WHERE CAST(small AS DECIMAL(38, 30)) < big"
    got = run_polars({"sources": {"ints": {"format": "parquet", "path": str(tmp_path / "ints.parquet")}, "q": {"sql": sql}},
                      "source": "q", "sink": {"path": "/tmp/unused-sql-key-sink"}})
    assert sorted(got["id"]) == [i for i in range(3) if small[i] < big[i]]
    across = "SELECT a.id AS i, b.id AS j FROM ints a, ints b WHERE CAST(a.small AS DECIMAL(38, 30)) < b.big"  # a join_where
    got = run_polars({"sources": {"ints": {"format": "parquet", "path": str(tmp_path / "ints.parquet")}, "q": {"sql": across}},
                      "source": "q", "sink": {"path": "/tmp/unused-sql-key-sink"}})
    assert sorted(map(tuple, got.itertuples(index=False))) == sorted((i, j) for i in range(3) for j in range(3) if small[i] < big[j])


def test_a_correlated_ordering_of_two_time_units_keeps_far_dates(tmp_path: Path) -> None:
    """A correlated scalar subquery's ``<`` of milliseconds against nanoseconds, now cast (to microseconds) through
    derived tables, keeps dates nanoseconds cannot hold, either table outer (DuckDB refuses the comparison, so the
    counts are worked out here)."""
    far = [datetime.datetime(2020, 1, 1), datetime.datetime(2500, 6, 1), datetime.datetime(1600, 1, 1)]
    near = [datetime.datetime(2020, 1, 1), datetime.datetime(2021, 1, 1)]
    pq.write_table(pa.table({"id": pa.array(range(len(far)), pa.int64()), "ts": pa.array(far, pa.timestamp("ms"))}), tmp_path / "m.parquet")
    pq.write_table(pa.table({"id": pa.array(range(len(near)), pa.int64()), "ts": pa.array(near, pa.timestamp("ns"))}), tmp_path / "n.parquet")
    sources = {name: {"format": "parquet", "path": str(tmp_path / f"{name}.parquet")} for name in ("m", "n")}
    for outer, inner, mine, theirs in (("m", "n", far, near), ("n", "m", near, far)):
        sql = f"SELECT o.id, (SELECT count(*) FROM {inner} x WHERE x.ts < o.ts) AS c FROM {outer} o"
        got = run_polars({"sources": {**sources, "q": {"sql": sql}}, "source": "q", "sink": {"path": "/tmp/unused-sql-key-sink"}})
        expected = sorted((i, sum(1 for b in theirs if b < a)) for i, a in enumerate(mine))
        assert sorted(map(tuple, got.itertuples(index=False))) == expected, outer
