"""NaN on the Polars engine (docs/spec.md, "Null tests and fills"): a value, not a null, in sorts, comparisons,
join keys, distinct rows and group keys; and the same answers on cudf-polars as on Polars' CPU engine."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec

NAN, INF = float("nan"), float("inf")

#: Steps over ``left`` (id, g, v: NaN twice, a null, an infinity), with ``right`` keyed on v (NaN, 1.0, null).
CASES: dict[str, list[dict[str, Any]]] = {
    "sort": [{"op": "sort", "by": ["v", "id"]}],
    "sort_descending": [{"op": "sort", "by": ["v", "id"], "descending": True}],
    "join": [{"op": "join", "right": "RIGHT", "on": ["v"]}],
    "left_join": [{"op": "join", "right": "RIGHT", "on": ["v"], "how": "left"}],
    "semi_join": [{"op": "join", "right": "RIGHT", "on": ["v"], "how": "semi"}],
    "anti_join": [{"op": "join", "right": "RIGHT", "on": ["v"], "how": "anti"}],
    "drop_duplicates": [{"op": "drop_duplicates", "subset": ["v"]}, {"op": "select", "columns": ["v"]}],
    "groupby_key": [{"op": "groupby", "by": ["v"], "aggs": {"n": {"func": "count", "column": "id"}}}],
    "expressions": [{"op": "assign", "column": name, "expr": expr} for name, expr in {
        "filled": "fillna(v, 0)", "missing": "isnull(v)", "above_one": "v > 1", "itself": "v == v", "first": "coalesce(v, 7.0)"}.items()],
    "filter": [{"op": "filter", "expr": "v >= 1"}],
    "greatest": [{"op": "assign", "column": "top", "expr": "greatest(v, 1.5)"}, {"op": "assign", "column": "bottom", "expr": "least(v, 1.5)"}],
    "top_k": [{"op": "top_k", "by": ["g"], "order": [{"column": "v", "descending": True}, {"column": "id"}], "k": 2}],
    "sql": [],  # the comparisons of "expressions" and "filter" in a SQL source (Polars' SQL lowering, not ours)
}
SQL = ("SELECT id, v > 1 AS above_one, v = v AS itself, v <= 'NaN'::double AS at_most_nan, v < 'NaN'::double AS below_nan "
       "FROM left_rows WHERE v >= 1 OR v IS NULL")
ORDERED = ("sort", "sort_descending")


def _query(tmp_path: Path, case: str) -> pl.LazyFrame:
    left, right = tmp_path / "left.parquet", tmp_path / "right.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3, 4, 5, 6], "g": [1, 1, 1, 2, 2, 2],
                             "v": pa.array([2.0, NAN, None, 1.0, NAN, INF])}), left)
    pq.write_table(pa.table({"v": pa.array([NAN, 1.0, None]), "tag": ["nan", "one", "null"]}), right)
    steps = [{**step, "right": {"format": "parquet", "path": str(right)}} if step.get("right") == "RIGHT" else step for step in CASES[case]]
    source: Any = {"format": "parquet", "path": str(left)}
    sources = {"left_rows": source, "q": {"sql": SQL}} if case == "sql" else {}
    spec = JobSpec.model_validate({"sources": sources, "source": "q" if sources else source, "steps": steps, "sink": {"path": "/tmp/unused"}})
    return build_lazyframe(plan_spec(spec))


def _rows(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    """Rows as tuples with NaN as the text 'nan', so that they compare and sort."""
    return [tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in row) for row in frame.iter_rows()]


def test_nan_is_a_value_that_sorts_last_and_equals_itself_on_polars(tmp_path: Path) -> None:
    """What docs/spec.md says, on Polars' CPU engine: NaN above every number (+inf included) and equal to
    itself, as PostgreSQL and DuckDB order and compare it; nulls still last and matching nothing."""
    def run(case: str) -> list[tuple[Any, ...]]:
        return _rows(_query(tmp_path, case).collect())

    assert [row[0] for row in run("sort")] == [4, 1, 6, 2, 5, 3]  # 1.0, 2.0, inf, NaN, NaN, null
    assert [row[0] for row in run("sort_descending")] == [5, 2, 6, 1, 4, 3]  # NaN first, the null still last
    assert sorted((row[0], row[3]) for row in run("join")) == [(2, "nan"), (4, "one"), (5, "nan")]  # NaN matches NaN, null nothing
    assert sorted(row[0] for row in run("semi_join")) == [2, 4, 5]
    assert sorted(row[0] for row in run("anti_join")) == [1, 3, 6]
    assert sorted(run("drop_duplicates"), key=repr) == sorted([(2.0,), (1.0,), ("nan",), (INF,), (None,)], key=repr)
    assert dict(run("groupby_key"))["nan"] == 2
    by_id = {row[0]: row[3:] for row in run("expressions")}
    assert by_id[2] == ("nan", False, True, True, "nan"), "NaN is not null, is above 1 and equals itself"
    assert by_id[3] == (0.0, True, False, False, 7.0), "a null is"
    assert sorted(row[0] for row in run("filter")) == [1, 2, 4, 5, 6]
    extremes = {row[0]: row[3:] for row in run("greatest")}  # NaN the largest, as PostgreSQL and DuckDB; nulls skipped
    assert extremes == {1: (2.0, 1.5), 2: ("nan", 1.5), 3: (1.5, 1.5), 4: (1.5, 1.0), 5: ("nan", 1.5), 6: (INF, 1.5)}
    assert sorted((row[1], row[0]) for row in run("top_k")) == [(1, 1), (1, 2), (2, 5), (2, 6)]  # NaN first in each group, then 2.0 / inf
    assert sorted(run("sql"), key=repr) == sorted([(1, True, True, True, True), (2, True, True, True, False), (3, None, None, None, None),
                                                   (4, False, True, True, True), (5, True, True, True, False), (6, True, True, True, True)], key=repr)


# cudf-polars compares as IEEE does (``NaN > 1``, ``NaN == NaN`` false; found on the H200, 2026-12-04). Steps'
# expressions are lowered around it (jobs.nan_order), a SQL source's comparisons since 2026-12-05 too (jobs.sql_nan;
# the H200 run of 2026-12-04 dropped NaN rows by ``v >= 1`` there).
@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_nan_on_cudf_polars_as_on_polars(tmp_path: Path, case: str) -> None:
    """cudf-polars gives Polars' CPU answer where NaN meets sorts, comparisons, joins, distinct rows and group keys."""
    pytest.importorskip("cudf_polars")
    from tests.cudf_polars_run import on_cudf_polars

    query = _query(tmp_path, case)
    got = on_cudf_polars(query, f"nan_{case}")
    assert got is not None, "cudf-polars refused it"
    expected = query.collect()
    if case in ORDERED:
        assert_frame_equal(got, expected, check_dtypes=False)
    else:
        assert sorted(_rows(got), key=repr) == sorted(_rows(expected), key=repr), f"cudf-polars:\n{got}\nPolars:\n{expected}"


def _ieee_compare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polars' comparisons as cudf-polars runs them: false wherever a NaN is (``!=`` true), null wherever a null is."""
    from spillway.jobs import nan_order

    def nanish(x: pl.Expr) -> pl.Expr:  # is_nan where the type has one (an emulation: never on decimals in the lowering)
        return x.cast(pl.Float64, strict=False).is_nan().fill_null(False)

    for name, compare in dict(nan_order.IEEE_COMPARE).items():
        monkeypatch.setitem(nan_order.IEEE_COMPARE, name, lambda x, y, c=compare, n=name: pl.when(x.is_null() | y.is_null()).then(
            None).when(nanish(x) | nanish(y)).then(pl.lit(n == "!=")).otherwise(c(x, y)))


VALUES = [1.0, 2.0, INF, -INF, NAN, None]


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_nan_aware_comparisons_give_the_total_order_where_comparisons_follow_ieee(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """jobs.nan_order's terms, run where ``==``… follow IEEE (as on cudf-polars: emulated here), give Polars' CPU
    answers, the language's, for every pair of 1, 2, ±inf, NaN and null; and they change nothing on the CPU."""
    from spillway.jobs import nan_order

    pairs = pl.DataFrame({"a": [a for a in VALUES for _ in VALUES], "b": VALUES * len(VALUES)}, schema={"a": pl.Float64, "b": pl.Float64})
    a, b = pl.col("a"), pl.col("b")
    language = pairs.select(nan_order.IEEE_COMPARE[op](a, b)).to_series().to_list()  # Polars' CPU engine: the total order
    on_cpu = pairs.select(nan_order.total_order_compare(op, a, b, a_may_be_nan=True, b_may_be_nan=True)).to_series().to_list()
    assert on_cpu == language
    _ieee_compare(monkeypatch)
    assert pairs.select(nan_order.IEEE_COMPARE[">"](a, b)).to_series().to_list()[4 * len(VALUES)] is False  # NaN > 1: false
    under_ieee = pairs.select(nan_order.total_order_compare(op, a, b, a_may_be_nan=True, b_may_be_nan=True)).to_series().to_list()
    wrong = [(x, y, got, want) for x, y, got, want in zip(pairs["a"], pairs["b"], under_ieee, language) if got != want]
    assert not wrong, f"a {op} b (a, b, got, Polars' answer): {wrong}"


def test_only_comparisons_that_may_meet_a_nan_get_terms(tmp_path: Path) -> None:
    """An integer column, or ``==``/``<`` against a number literal, keeps its plain form (and its parquet pushdown)."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"i": [1, 2], "v": [1.0, NAN]}), path)

    def plan_of(expr: str) -> str:
        spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(path)},
                                       "steps": [{"op": "filter", "expr": expr}], "sink": {"path": "/tmp/unused"}})
        return build_lazyframe(plan_spec(spec)).explain(optimizations=pl.QueryOptFlags.none())

    assert "is_nan" not in plan_of("i > 1") and "is_nan" not in plan_of("v < 1.5") and "is_nan" not in plan_of("v == 2.0")
    assert "is_nan" in plan_of("v > 1") and "is_nan" in plan_of("v == v") and "is_nan" in plan_of("i / i > 0")


#: Shapes a review found (2026-12-04): a decimal or bool beside a float (Polars refuses is_nan on them), NaN made by
#: float arithmetic (a negative number to a fractional power, inf - inf, 0 * inf), a float32 NaN literal, NaN through
#: greatest and sqrt, and join conditions over the right side's columns.
SHAPES: dict[str, list[dict[str, Any]]] = {
    "decimal_below_float": [{"op": "filter", "expr": "cast(i, 'decimal(10,2)') < v"}],
    "bool_below_float": [{"op": "filter", "expr": "b < v"}],
    "float_above_bool": [{"op": "filter", "expr": "v > b"}],
    "fractional_power": [{"op": "assign", "column": "x", "expr": "i ** 0.5 > 1"}],
    "infinity_minus_itself": [{"op": "assign", "column": "x", "expr": "(i + 1e309) - 1e309 > 0"}],
    "zero_times_infinity": [{"op": "assign", "column": "x", "expr": "i * 1e309 >= 0"}],
    "float32_nan_literal": [{"op": "assign", "column": "x", "expr": "v < cast('nan', 'float32')"}],
    "greatest_of_a_nan_power": [{"op": "assign", "column": "x", "expr": "greatest(i ** 0.5, 1.0)"}],
    "sqrt_of_nan": [{"op": "assign", "column": "x", "expr": "sqrt(v)"}, {"op": "assign", "column": "y", "expr": "ln(v)"}],
    "join_where_right_float": [{"op": "join", "right": "RIGHT", "on": ["g"], "where": "v < w"}],
    "join_where_right_itself": [{"op": "join", "right": "RIGHT", "on": ["g"], "where": "w == w"}],
    "left_join_where": [{"op": "join", "right": "RIGHT", "on": ["g"], "how": "left", "where": "v > w"}],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_nan_shapes_give_polars_answers_under_ieee_comparisons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    left, right = tmp_path / "left.parquet", tmp_path / "right.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3, 4, 5], "g": [1, 1, 2, 2, 2], "i": [-4, 0, 10, None, 2],
                             "v": pa.array([2.0, NAN, None, -1.0, INF]), "b": [True, False, None, True, False]}), left)
    pq.write_table(pa.table({"g": [1, 2, 2], "w": pa.array([NAN, 1.0, None])}), right)
    steps = [{**s, "right": {"format": "parquet", "path": str(right)}} if s.get("right") == "RIGHT" else s for s in SHAPES[shape]]
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(left)}, "steps": steps, "sink": {"path": "/tmp/unused"}})

    def answer() -> list[tuple[Any, ...]]:
        return sorted(_rows(build_lazyframe(plan_spec(spec)).collect()), key=repr)

    language = answer()  # Polars' CPU engine compares under NaN's total order: the language's answer
    if shape == "greatest_of_a_nan_power":  # (-4) ** 0.5 is NaN, above 1.0 (max_horizontal alone skipped it)
        assert [row[-1] for row in language if row[0] == 1] == ["nan"]
    _ieee_compare(monkeypatch)
    assert answer() == language


def _sql_value(node: Any, row: dict[str, float | None], *, ieee: bool) -> Any:
    """``node`` (comparisons, AND/OR/NOT, IS NULL, columns and numbers) on ``row``, with SQL's nulls; comparisons
    under IEEE (Python's floats: ``NaN > 1`` false) or under NaN's total order (NaN equal to itself, above all)."""
    from sqlglot import exp

    def value(n: Any) -> Any:
        return _sql_value(n, row, ieee=ieee)

    if isinstance(n := node, exp.Paren):
        return value(n.this)
    if isinstance(n, exp.Column):
        return row[n.name]
    if isinstance(n, exp.Literal):
        return float(n.this)
    if isinstance(n, exp.Null):
        return None
    if isinstance(n, exp.Boolean):
        return n.this
    if isinstance(n, exp.Cast):
        return float(n.this.name) if n.this.is_string else value(n.this)
    if isinstance(n, (exp.Add, exp.Sub, exp.Div)):
        x, y = value(n.this), value(n.expression)
        if isinstance(n, exp.Div) and y == 0:
            return math.nan if x == 0 or math.isnan(x) else math.copysign(math.inf, x)
        return x + y if isinstance(n, exp.Add) else x - y if isinstance(n, exp.Sub) else x / y
    if isinstance(n, exp.Is):
        return value(n.this) is None
    if isinstance(n, exp.Case):  # CASE WHEN … THEN … ELSE … END: a null condition is not true
        return next((value(branch.args["true"]) for branch in n.args["ifs"] if value(branch.this) is True), value(n.args["default"]))
    if isinstance(n, exp.Not):
        inner = value(n.this)
        return None if inner is None else not inner
    if isinstance(n, exp.Between):
        return value(exp.and_(exp.GTE(this=n.this, expression=n.args["low"]), exp.LTE(this=n.this, expression=n.args["high"])))
    if isinstance(n, (exp.And, exp.Or)):
        parts = [value(n.this), value(n.expression)]
        decided = False if isinstance(n, exp.And) else True
        return decided if decided in parts else (None if None in parts else not decided)
    a, b = value(n.this), value(n.expression)
    if a is None or b is None:
        return None
    if not ieee:  # NaN as the largest value, equal to itself: order by (is NaN, value)
        a, b = (math.isnan(a), 0.0 if math.isnan(a) else a), (math.isnan(b), 0.0 if math.isnan(b) else b)
    ops = {exp.EQ: lambda: a == b, exp.NEQ: lambda: a != b, exp.LT: lambda: a < b, exp.LTE: lambda: a <= b,
           exp.GT: lambda: a > b, exp.GTE: lambda: a >= b}
    return ops[type(n)]()


SQL_VALUES = [1.0, 2.0, INF, -INF, NAN, None]


@pytest.mark.parametrize("condition", ["a = b", "a <> b", "a < b", "a <= b", "a > b", "a >= b", "a BETWEEN b AND c",
                                       "NOT a BETWEEN b AND c", "a > 1 AND (b = c OR c < a)"])
def test_sql_comparisons_give_the_total_order_where_comparisons_follow_ieee(condition: str) -> None:
    """jobs.sql_nan's rewrite of a SQL source's comparisons, evaluated as cudf-polars compares (IEEE), gives the
    language's answer (the total order, as Polars' CPU engine, PostgreSQL and DuckDB) for every triple of 1, 2,
    ±inf, NaN and null; evaluated under the total order it changes nothing."""
    import sqlglot
    from sqlglot import exp

    from spillway.jobs.sql_nan import nan_aware

    def condition_of(sql: str) -> Any:
        return sqlglot.parse_one(sql, dialect="postgres").find(exp.Where).this

    query = f'SELECT "t"."a" FROM "t" AS "t" WHERE {condition.replace("a", "t.a").replace("b", "t.b").replace("c", "t.c")}'
    plain = condition_of(query)
    rewritten = condition_of(nan_aware(sqlglot.parse_one(query, dialect="postgres"),
                                       {"t": {"a": pl.Float64(), "b": pl.Float64(), "c": pl.Float64()}}, "postgres").sql("postgres"))
    assert rewritten.sql() != plain.sql()
    triples = [{"a": a, "b": b, "c": c} for a in SQL_VALUES for b in SQL_VALUES for c in SQL_VALUES]
    wrong = [(row, got, want) for row in triples
             if (got := _sql_value(rewritten, row, ieee=True)) != (want := _sql_value(plain, row, ieee=False))]
    assert not wrong, f"{condition} (row, under IEEE, the language's answer): {wrong[:5]}"
    assert all(_sql_value(rewritten, row, ieee=False) == _sql_value(plain, row, ieee=False) for row in triples)
    assert any(_sql_value(plain, row, ieee=True) != _sql_value(plain, row, ieee=False) for row in triples), "IEEE differs somewhere"


@pytest.mark.parametrize("condition", ["t.a <= CAST('NaN' AS DOUBLE)", "CAST('NaN' AS DOUBLE) > t.a", "t.a = 0.0 / 0.0",
                                       "t.a < CAST('NaN' AS DOUBLE)", "CAST('NaN' AS DOUBLE) >= t.a", "NOT t.a < CAST('NaN' AS DOUBLE)",
                                       "t.a <> CAST('nan' AS DOUBLE)", "t.a < CAST('inf' AS DOUBLE) - CAST('inf' AS DOUBLE)",
                                       "t.a >= CAST('NaN' AS DOUBLE) AND t.a <= 1 + 2"])
def test_a_side_of_no_column_is_decided_nan_or_not_when_planning(condition: str) -> None:
    """Polars folds constants on the CPU, under the total order, before cudf-polars sees the plan: a term
    ``'NaN'::double <> 'NaN'::double`` became ``false``, and ``v <= 'NaN'::double`` was false for every row on the
    H200 (2026-12-05). A side of no column is decided NaN or not when planning; every ``<>`` left reads a column,
    and the rewrite evaluated under IEEE gives the language's answer for 1, 2, ±inf, NaN and null."""
    import sqlglot
    from sqlglot import exp

    from spillway.jobs.sql_nan import nan_aware

    query = f'SELECT "t"."a" FROM "t" AS "t" WHERE {condition}'
    plain = sqlglot.parse_one(query, dialect="postgres").find(exp.Where).this
    written = nan_aware(sqlglot.parse_one(query, dialect="postgres"), {"t": {"a": pl.Float64()}}, "postgres").sql("postgres")
    rewritten = sqlglot.parse_one(written, dialect="postgres").find(exp.Where).this
    assert all(node.find(exp.Column) is not None for node in rewritten.find_all(exp.NEQ) if node not in plain.find_all(exp.NEQ)), written
    rows = [{"a": a} for a in SQL_VALUES]
    wrong = [(row, got, want) for row in rows if (got := _sql_value(rewritten, row, ieee=True)) != (want := _sql_value(plain, row, ieee=False))]
    assert not wrong, f"{condition} (row, under IEEE, the language's answer): {wrong}"
    # And on Polars' CPU engine, which runs the same text under the total order: the terms change nothing there
    # (``NOT a <> a`` for "a is no NaN" made ``v < 'NaN'::double`` true on a NaN there, a review found).
    changed = [(row, got) for row in rows if (got := _sql_value(rewritten, row, ieee=False)) != _sql_value(plain, row, ieee=False)]
    assert not changed, f"{condition} under the total order (row, got): {changed}"


def test_sql_comparisons_get_terms_only_where_a_side_may_be_nan() -> None:
    """Integers, texts and number literals under ``=``, ``<>``, ``<``, ``<=`` keep the plain form (and the parquet
    pushdown); a float column, a cast 'NaN' or a division gets terms; key equalities in a join's ON stay as written."""
    import sqlglot

    from spillway.jobs.sql_nan import nan_aware

    schemas = {"t": {"i": pl.Int64(), "s": pl.String(), "v": pl.Float64()}, "u": {"i": pl.Int64(), "w": pl.Float32()}}

    def rewritten(where: str) -> str:
        sql = f'SELECT "t"."i" FROM "t" AS "t" JOIN "u" AS "u" ON "t"."v" = "u"."w" WHERE {where}'
        return nan_aware(sqlglot.parse_one(sql, dialect="postgres"), schemas, "postgres").sql("postgres")

    for plain in ('"t"."i" > 1', '"t"."s" = \'x\'', '"t"."v" < 1.5', '"t"."v" = 2', '"t"."v" <= 3', '"t"."i" = "u"."i"'):
        assert rewritten(plain).endswith(f"WHERE {plain}"), plain
    for nan_side in ('"t"."v" > 1', '"t"."v" = "u"."w"', '"t"."i" / "u"."i" >= 0'):
        assert "<>" in rewritten(nan_side).split("WHERE")[1], nan_side
    nan_literal = '"t"."i" < CAST(\'NaN\' AS DOUBLE PRECISION)'  # decided when planning: every integer is below NaN
    assert rewritten(nan_literal).endswith(f'WHERE ({nan_literal} OR NOT "t"."i" IS NULL)')
    assert 'ON "t"."v" = "u"."w"' in rewritten('"t"."v" > 1')


def test_sql_nan_terms_only_in_plans_for_cudf_polars(tmp_path: Path) -> None:
    """The manager builds CPU jobs with ``ieee_comparisons=False``: Polars' CPU engine orders NaN so itself, and the
    rewrite costs planning time (jobs/sql_nan.py); a plan for cudf-polars has the terms, and both give one answer."""
    frame = _query(tmp_path, "sql")
    spec = JobSpec.model_validate({"sources": {"left_rows": {"format": "parquet", "path": str(tmp_path / "left.parquet")},
                                               "q": {"sql": SQL}}, "source": "q", "sink": {"path": "/tmp/unused"}})
    on_cpu = build_lazyframe(plan_spec(spec), ieee_comparisons=False)

    def self_comparisons(lazy: pl.LazyFrame) -> int:
        return lazy.explain(optimizations=pl.QueryOptFlags.none()).count('col("v") == col("v")')

    assert self_comparisons(frame) > self_comparisons(on_cpu) == 1  # the query's own ``v = v``, and the terms' ``v <> v``
    assert sorted(_rows(on_cpu.collect()), key=repr) == sorted(_rows(frame.collect()), key=repr)


def _sql_plan(tmp_path: Path, sql: str, **tables: dict[str, list[Any]]) -> Any:
    for name, columns in tables.items():
        pq.write_table(pa.table(columns), tmp_path / f"{name}.parquet")
    sources: dict[str, Any] = {name: {"format": "parquet", "path": str(tmp_path / f"{name}.parquet")} for name in tables}
    return plan_spec(JobSpec.model_validate({"sources": {**sources, "q": {"sql": sql}}, "source": "q", "sink": {"path": "/tmp/unused"}}))


def test_a_keyword_column_survives_the_nan_rewrite(tmp_path: Path) -> None:
    """The rewrite reads the regenerated text back: a name a rewrite made from a keyword column (``_u_0.select``)
    is quoted, so it reads (before: a sqlglot ParseError at run time, and at submit with an ordered window)."""
    kw = {"id": [1, 2], "v": [1.0, 2.0], "select": [1.0, 3.0]}
    plan = _sql_plan(tmp_path, 'SELECT id FROM kw WHERE v IN (SELECT "select" FROM kw)', kw=kw)
    for ieee in (True, False):
        assert build_lazyframe(plan, ieee_comparisons=ieee).collect()["id"].to_list() == [1]
    windowed = _sql_plan(tmp_path, 'SELECT id, row_number() OVER (ORDER BY id) AS r FROM kw WHERE v IN (SELECT "select" FROM kw)', kw=kw)
    assert build_lazyframe(windowed).collect().rows() == [(1, 1)]


@pytest.mark.parametrize("depth", [22, 8])
def test_nan_terms_past_what_polars_sql_takes_are_a_refusal_naming_the_source(tmp_path: Path, depth: int) -> None:
    """Float arithmetic nested 22 deep (the submit check takes 23) or CASEs of comparisons nested 8 deep: with the
    NaN terms the text passes Polars' SQL parser's depth, or grows threefold a level; a SqlRefused naming the source
    (the job's failure on the GPU), not a parser error or minutes of planning. Without the terms it runs."""
    from spillway.jobs.sql_check import SqlRefused

    x = "v"
    for _ in range(depth):
        x = f"(1 + {x})" if depth > 10 else f"CASE WHEN ({x}) > 1 THEN v ELSE 0.5 END"
    plan = _sql_plan(tmp_path, f"SELECT id FROM t WHERE {x} > 1", t={"id": [1], "v": [1.0]})
    assert build_lazyframe(plan, ieee_comparisons=False).collect().height == (1 if depth > 10 else 0)
    with pytest.raises(SqlRefused, match=r"^sources\.q\.sql: its comparisons over floats.*split it with CTEs"):
        build_lazyframe(plan).collect()
