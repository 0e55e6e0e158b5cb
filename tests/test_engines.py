"""The two engines give the same answers: every expression feature, the examples, null rules.

In-process and on real files: the Dask engine computes its graph with dask's synchronous
scheduler, the Polars engine collects its LazyFrame. The service-level tests (test_tpch,
test_service_e2e, test_sink_modes, ...) run every job on both engines through the `api`
fixture; these are the engine-level checks that need no service.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from spillway.jobs import ir
from spillway.jobs.engine_choice import choose_engine
from spillway.jobs.gpu_support import WRONG_ON_CUDF_POLARS
from spillway.jobs.expr import parse_expression
from spillway.jobs.errors import IntegerOverflow
from spillway.jobs.lower_polars import INT64_OVERFLOW, to_polars
from spillway.jobs.pandas_numbers import DIVISION_BY_ZERO
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.polars_io import partition_directory
from spillway.jobs.polars_run import cannot_run_on_gpu
from spillway.jobs.samples import write_sample_data
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from spillway.service.cli import load_spec
from tests.test_expr import FEATURES, make_frame, plain

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_both(spec: JobSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    plan = plan_spec(spec)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        on_dask = build_frame(spec, plan).compute().reset_index(drop=True)
    return on_dask, build_lazyframe(plan, filters_before_casts=True).collect().to_pandas()


def assert_same_rows(dask_rows: pd.DataFrame, polars_rows: pd.DataFrame, *, ordered: bool) -> None:
    """Same columns, same rows (as multisets unless ``ordered``), numbers within 1e-9 relative."""
    assert list(dask_rows.columns) == list(polars_rows.columns)
    assert len(dask_rows) == len(polars_rows)

    def canonical(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.astype(object).where(frame.notna(), None)
        return frame if ordered else frame.sort_values(list(frame.columns), key=lambda c: c.map(repr)).reset_index(drop=True)

    left, right = canonical(dask_rows), canonical(polars_rows)
    for column in left.columns:
        for a, b in zip(left[column], right[column], strict=True):
            if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)):
                assert np.isclose(float(a), float(b), rtol=1e-9, atol=0, equal_nan=True), (column, a, b)
            else:
                assert a == b or str(a) == str(b), (column, a, b)


@pytest.mark.parametrize("text", list(FEATURES))
def test_every_expression_feature_lowers_to_the_same_values(text: str) -> None:
    frame = make_frame()
    expression = parse_expression(text)
    expected = plain(pd.Series(expression.evaluate(frame)) if not np.isscalar(expression.evaluate(frame)) else pd.Series([expression.evaluate(frame)] * len(frame)))
    kinds = {"day_text": "string", "name": "string", "category": "string"}
    got = pl.from_pandas(frame).select(to_polars(expression.node, text, None, kinds).alias("value"))["value"]
    got_values = plain(got.to_pandas() if len(got) == len(frame) else pd.Series([got[0]] * len(frame)))
    for want, have in zip(expected, got_values, strict=True):
        if want is None or have is None:
            assert want is None and have is None, (text, want, have)
        elif isinstance(want, (int, float, np.number)) and not isinstance(want, bool):
            assert np.isclose(float(want), float(have), rtol=1e-12, equal_nan=True), (text, want, have)
        else:
            assert pd.Timestamp(want) == pd.Timestamp(have) if isinstance(want, pd.Timestamp) else want == have, (text, want, have)


# Measured on an H200 (bench/RESULTS.md): month/year intervals (Polars' offset_by) and parsing text as datetimes;
# truncating to weeks, months, quarters or years (Unsupported bucket '1w'/'1mo'/'1q'/'1y'), week differences
# (the same bucket), and split_part (ListFunction.Get), all refused by cudf-polars 26.10 (gpu_tests_2026-12-01c.log).
NOT_ON_CUDF_POLARS = {'cast(day_text, "datetime64[ns]")', 'ship_date + interval(1, "year")', 'ship_date - interval(2, "months")',
                      'interval(1, "month") + ship_date',
                      "date_trunc('year', ship_date)", "date_trunc('quarter', ship_date)", "date_trunc('month', ship_date)",
                      "date_trunc('week', ship_date)", "date_diff('week', date('1998-01-01'), ship_date)",
                      "split_part(name, ' ', 2)", "split_part(name, '.', 1)", "split_part(name, 'an', 3)",
                      # substr over columns (Slice only supports literal start and stop values) and regex replacement
                      # (literal=False is not supported for replace): gpu_tests.log of 2026-12-02.
                      "substr(name, qty % 4)", "substr(name, 1, length(name) - 2)",
                      "regexp_replace(name, 'a', '_')", "regexp_replace(name, '([aeiou])', '<$1>', 'g')"}


@pytest.mark.gpu
@pytest.mark.parametrize("text", list(FEATURES))
def test_every_expression_feature_gives_the_same_values_on_cudf_polars(text: str) -> None:
    pytest.importorskip("cudf_polars")
    frame = pl.from_pandas(make_frame())
    kinds = {"day_text": "string", "name": "string", "category": "string"}
    expression = parse_expression(text)
    query = frame.lazy().select(to_polars(expression.node, text, None, kinds).alias("value"))
    gpu = pl.GPUEngine(executor="in-memory", raise_on_fail=True)
    if text in NOT_ON_CUDF_POLARS:  # cudf-polars 26.10 refuses these: a job using them moves to dask-cudf under auto
        with pytest.raises(Exception) as refused:
            query.collect(engine=gpu)
        assert cannot_run_on_gpu(refused.value), refused.value
        return
    if any(isinstance(node, ir.Call) and node.name in WRONG_ON_CUDF_POLARS for node in ir.walk(expression.node)):
        # cudf-polars takes it but answers wrongly: Spillway never runs it there (jobs.gpu_support.untrusted_on_gpu).
        return
    on_gpu, on_cpu = query.collect(engine=gpu), query.collect()
    if text == "round(amount, 1)":  # cuDF rounds the binary value (83.55 is 83.5499...), Polars the decimal text
        assert np.allclose(on_gpu["value"].to_numpy(), on_cpu["value"].to_numpy(), atol=0.1 + 1e-9, equal_nan=True)
        return
    # exp, pow and the like may differ in the last bit between the GPU's and the CPU's math libraries
    assert_frame_equal(on_gpu, on_cpu, check_exact=False, rel_tol=1e-12, abs_tol=0), text


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    write_sample_data(root / "var/demo/data", rows=20_000, files=4)
    return root


@pytest.mark.parametrize("name", ["revenue_by_region", "daily_orders"])
def test_examples_give_the_same_answer_on_both_engines(name: str, demo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(demo_root)
    spec = load_spec(EXAMPLES / f"{name}.yaml")
    on_dask, on_polars = run_both(spec)
    assert len(on_dask) > 0
    assert_same_rows(on_dask, on_polars, ordered=any(step.op == "sort" for step in spec.steps[-1:]))


@pytest.fixture()
def null_keys(tmp_path: Path) -> Path:
    pd.DataFrame({"k": [1.0, None, 3.0], "a": ["x", "y", "z"]}).to_parquet(tmp_path / "left.parquet")
    pd.DataFrame({"k": [1.0, None, 4.0], "b": ["p", "q", "r"]}).to_parquet(tmp_path / "right.parquet")
    return tmp_path


@pytest.mark.parametrize(("how", "rows"), [
    ("inner", [(1.0, "x", "p")]),
    ("left", [(1.0, "x", "p"), (None, "y", None), (3.0, "z", None)]),
    ("right", [(1.0, "x", "p"), (None, None, "q"), (4.0, None, "r")]),
    ("outer", [(1.0, "x", "p"), (None, "y", None), (3.0, "z", None), (None, None, "q"), (4.0, None, "r")]),
])
def test_a_null_join_key_matches_nothing_on_both_engines(null_keys: Path, how: str, rows: list[tuple[Any, ...]]) -> None:
    spec = JobSpec.model_validate({
        "source": {"format": "parquet", "path": str(null_keys / "left.parquet")},
        "steps": [{"op": "join", "right": {"format": "parquet", "path": str(null_keys / "right.parquet")}, "on": ["k"], "how": how}],
        "sink": {"path": str(null_keys / "out")},
    })
    for frame in run_both(spec):
        got = sorted((tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)), key=repr)
        assert got == sorted(rows, key=repr), how


def test_a_comparison_with_null_is_false_on_both_engines_even_under_not(tmp_path: Path) -> None:
    pd.DataFrame({"s": ["a", None, "b"], "n": [1.0, None, 3.0]}).to_parquet(tmp_path / "t.parquet")
    spec = JobSpec.model_validate({
        "source": {"format": "parquet", "path": str(tmp_path / "t.parquet")},
        "steps": [{"op": "assign", "column": "ne", "expr": "s != 'a'"}, {"op": "assign", "column": "not_eq", "expr": "not (s == 'a')"},
                  {"op": "assign", "column": "in_list", "expr": "n in (1, 3)"}, {"op": "filter", "expr": "not (n > 2)"}],
        "sink": {"path": str(tmp_path / "out")},
    })
    for frame in run_both(spec):
        assert frame[["ne", "not_eq", "in_list"]].astype(bool).values.tolist() == [[False, False, True], [False, True, False]]


def test_partition_directories_escape_values_and_names_that_look_like_paths() -> None:
    assert partition_directory(["p"], ("../../../tmp/outside/evil",)) == "p=..%2F..%2F..%2Ftmp%2Foutside%2Fevil"
    assert partition_directory(["../evil_col", "q"], ("a=b", None)) == "..%2Fevil_col=a%3Db/q=__HIVE_DEFAULT_PARTITION__"


def test_auto_picks_polars_and_says_why() -> None:
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": "x.parquet"}, "sink": {"path": "out"}})
    choice = choose_engine(spec, "auto", "pandas")
    assert (choice.engine, choice.device) == ("polars", "cpu") and "auto" in choice.reason and "service default" in choice.reason
    assert choose_engine(spec.model_copy(update={"engine": "dask"}), "auto", "cudf").model_dump() == {
        "engine": "dask", "device": "gpu", "reason": "engine: dask — the spec asks for it"}
    assert choose_engine(spec, "dask", "pandas").engine == "dask"


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_an_integer_column_with_nulls_stays_an_integer_on_both_engines(tmp_path: Path, fmt: str) -> None:
    """Read from every format and through an outer join's unmatched rows: '7', never '7.0'."""
    rows = pd.DataFrame({"k": [1, 2, 3], "a": pd.array([7, None, -3], dtype="Int64")})
    path = tmp_path / f"left.{fmt}"
    if fmt == "parquet":
        rows.to_parquet(path)
    elif fmt == "csv":
        rows.to_csv(path, index=False)
    else:
        rows.to_json(path, orient="records", lines=True)
    pd.DataFrame({"k": [1, 3, 4], "n": [10, 20, 30]}).to_parquet(tmp_path / "right.parquet")
    spec = JobSpec.model_validate({
        "source": {"format": fmt, "path": str(path)},
        "steps": [{"op": "join", "right": {"format": "parquet", "path": str(tmp_path / "right.parquet")}, "on": ["k"], "how": "outer"},
                  {"op": "assign", "column": "a_text", "expr": "cast(a, 'string')"},
                  {"op": "assign", "column": "n_text", "expr": "cast(n, 'string')"},
                  {"op": "assign", "column": "k_or_null", "expr": "cast(k if k > 1 else None, 'string')"},
                  {"op": "sort", "by": ["k"]}],
        "sink": {"path": str(tmp_path / "out")},
    })
    plan = plan_spec(spec)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        on_dask = build_frame(spec, plan).compute().reset_index(drop=True)
    on_polars = build_lazyframe(plan).collect()
    assert str(on_dask["a"].dtype) == "Int64" and str(on_dask["n"].dtype) == "Int64"
    assert on_polars.schema["a"] == pl.Int64 and on_polars.schema["n"] == pl.Int64
    want = {"a_text": ["7", None, "-3", None], "n_text": ["10", None, "20", "30"], "k_or_null": [None, "2", "3", "4"]}
    for column, values in want.items():
        assert on_dask[column].astype(object).where(on_dask[column].notna(), None).tolist() == values, column
        assert on_polars[column].to_list() == values, column


# A filter whose expression can fail the job sees only the rows its step sees, on both engines: dask's
# optimizer merged it with the filter before it (and moves filters below joins), so it met the rows that
# filter had removed (jobs.pipeline._kept_in_place).
GUARDED_FILTERS = {  # the steps, and the x values left
    "divide after a filter": ([{"op": "filter", "expr": "y != 0"}, {"op": "filter", "expr": "divide(x, y) > 1"}], [2, 3]),
    "divide after a filter and a select": ([{"op": "filter", "expr": "y != 0"}, {"op": "select", "columns": ["x", "y", "t"]},
                                           {"op": "filter", "expr": "divide(x, y) >= 1"}], [2, 3]),
    "a cast of text after a filter": ([{"op": "filter", "expr": "t != 'none'"}, {"op": "filter", "expr": "cast(t, 'int64') > 2"}], [2, 3]),
    "integer arithmetic after a filter": ([{"op": "filter", "expr": "x < 10"}, {"op": "filter", "expr": "x * 1000000000000000000 > 2500000000000000000"}],
                                          [3, 4]),
    "divide after an and": ([{"op": "filter", "expr": "y != 0 and divide(x, y) > 1"}], [2, 3]),
    "a cast after an and, then more": ([{"op": "filter", "expr": "t != 'none' and x < 10 and cast(t, 'int64') > 2 and x > 0"}], [2, 3]),
    "divide after a join": ([{"op": "join", "right": {"format": "parquet", "path": "{keys}"}, "on": ["y"]},
                             {"op": "filter", "expr": "divide(x, y) > 0"}], [2, 3]),
}


@pytest.mark.parametrize(("steps", "left"), list(GUARDED_FILTERS.values()), ids=list(GUARDED_FILTERS))
def test_a_filter_that_can_fail_sees_only_its_steps_rows(tmp_path: Path, steps: list[dict[str, Any]], left: list[int]) -> None:
    pd.DataFrame({"x": [1, 2, 3, 4, 2**62], "y": [0, 1, 2, 0, 0], "t": ["none", "3", "7", "none", "none"]}).to_parquet(tmp_path / "xy.parquet")
    pd.DataFrame({"y": [1, 2], "w": ["a", "b"]}).to_parquet(tmp_path / "keys.parquet")  # no key 0: the join drops y == 0
    filled = [{**step, "right": {**step["right"], "path": str(tmp_path / "keys.parquet")}} if "right" in step else step for step in steps]
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(tmp_path / "xy.parquet")}, "steps": filled,
                                   "sink": {"path": str(tmp_path / "out")}})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert sorted(on_dask["x"]) == left, on_dask


def test_date_parts_and_lengths_are_int64_on_both_engines(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    """Polars gives ``month`` as Int8, ``day_of_year`` as Int16, ``length`` as UInt32, in which arithmetic wrapped:
    ``month(ts) * 100`` was -80 for December, ``length('') - 5`` 4294967291; pandas' date parts are int32, so the Dask
    engine refused ``year(ts) * 10000000`` as an overflow. Both compute their arithmetic in int64 now."""
    exprs = {"m": "month(ts) * 100", "doy": "day_of_year(ts) * 1000", "q": "quarter(ts) * 100", "dow": "day_of_week(ts) * 100",
             "y": "year(ts) * 1000000", "y7": "year(ts) * 10000000", "short": "length(region) - 100", "w": "week(ts) * 1000",
             "d": "day(ts) * 10"}
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(sample_data["sales"])},
                                   "steps": [*({"op": "assign", "column": k, "expr": v} for k, v in exprs.items()),
                                             {"op": "select", "columns": ["order_id", *exprs]}],
                                   "sink": {"path": "/tmp/unused"}})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    ts = sales_frame.set_index("order_id")["ts"]
    got = on_polars.set_index("order_id").loc[ts.index]
    assert (got["m"] == ts.dt.month * 100).all() and (got["doy"] == ts.dt.dayofyear * 1000).all()
    assert (got["short"] == sales_frame.set_index("order_id")["region"].str.len() - 100).all()
    assert got["m"].max() == 1200 and (got["y7"] == ts.dt.year.astype("int64") * 10000000).all()
    assert all(str(t) == "int64" for t in got.dtypes)


def test_date_parts_with_null_dates_on_both_engines(tmp_path: Path) -> None:
    """Both engines give exact int64 date parts with nulls (pandas' Int64 on the Dask engine: pandas gives a partition's parts
    as float64 where a date is null), compute ``year(ts) * 10**7`` in int64 (pandas' int32 parts were refused as an
    overflow), and a filter after another one does not meet the overflow of rows that one removed. More in test_date_parts_nulls."""
    path = tmp_path / "dates.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "n": [1, 200, 3, 4], "s": ["ab", None, "", "xyz"],
                             "ts": [datetime.datetime(2024, 12, 31), None, datetime.datetime(2021, 1, 3), datetime.datetime(2020, 2, 29)]}), path)
    exprs = {"big": "year(ts) * 1000000000000000 + day(ts)", "m": "month(ts) * 100", "y7": "year(ts) * 10000000",
             "l": "length(s) - 5", "q": "quarter(ts) * 2147483647", "mixed": "coalesce(month(ts), 1.5)"}
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(path)},
                                   "steps": [*({"op": "assign", "column": k, "expr": v} for k, v in exprs.items()),
                                             {"op": "select", "columns": ["id", *exprs]}], "sink": {"path": "/tmp/unused"}})
    on_dask, polars_as_pandas = run_both(spec)
    assert_same_rows(on_dask, polars_as_pandas, ordered=False)
    assert sorted(map(tuple, on_dask.astype(object).where(on_dask.notna(), None).values.tolist()))[0][1] == 2024000000000000031
    on_polars = sorted(build_lazyframe(plan_spec(spec), filters_before_casts=True).collect().rows())  # not via pandas' floats
    assert on_polars[0] == (1, 2024000000000000031, 1200, 20240000000, -3, 4 * 2147483647, 12.0)
    assert on_polars[1] == (2, None, None, None, None, None, 1.5)
    filtered = JobSpec.model_validate({"source": {"format": "parquet", "path": str(path)},
                                       "steps": [{"op": "filter", "expr": "n > 100"}, {"op": "filter", "expr": "year(ts) * 4611686018427387904 > 0"}],
                                       "sink": {"path": "/tmp/unused"}})
    on_dask, on_polars_rows = run_both(filtered)  # the only row left has no date: no overflow on either engine
    assert len(on_dask) == len(on_polars_rows) == 0


@pytest.mark.parametrize("expr", ["n + 0 != 12 and divide(1, n + 0 - 12) < 0", "month(ts) != 12 and divide(1, month(ts) - 12) < 0",
                                  "year(ts) <= 2019 and year(ts) * 4560000000000000 > 0"])
def test_a_guard_put_first_keeps_the_checks_after_it_from_failing(tmp_path: Path, expr: str) -> None:
    """docs/spec.md "Put the guard first": a check sees only the rows the ``and``-ed parts to its left keep. On Polars
    that held only where the guard was pushed into the scan (a plain column's ``n != 12``): ``n + 0 != 12`` or
    ``month(ts) != 12`` let ``divide`` meet the zero and fail the job."""
    path = tmp_path / "guards.parquet"
    pq.write_table(pa.table({"n": [1, 12, 3], "ts": [datetime.datetime(2020, 1, 1), datetime.datetime(2020, 12, 1), datetime.datetime(2021, 3, 1)]}), path)
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(path)}, "steps": [{"op": "filter", "expr": expr}], "sink": {"path": "/tmp/unused"}})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert sorted(on_polars["n"].tolist()) == ([] if "year" in expr else [1, 3])


def guard_spec(tmp_path: Path, step: dict[str, Any]) -> JobSpec:
    """One step over ``n`` = 1, 12, 3 (12: ``divide(1, n - 12)`` meets a zero, ``n * 922337203685477580`` leaves int64)."""
    pq.write_table(pa.table({"n": [1, 12, 3]}), tmp_path / "n.parquet")
    return JobSpec.model_validate({"source": {"format": "parquet", "path": str(tmp_path / "n.parquet")}, "steps": [step],
                                   "sink": {"path": "/tmp/unused"}})


# The guard first at any depth: a check in a part of an ``and`` sees only the rows the parts to its left keep, inside
# parentheses, under ``not`` or ``or``, in an assign, in ``case``'s conditions; a check in a branch of ``if`` or ``case``
# only the rows that take it. The Dask engine ordered only a filter's top-level parts: each of these failed it, not Polars.
NESTED_GUARDS = [  # the step, its expression, and the n a filter keeps or an assign's values for n = 1, 12, 3
    ("filter", "n > 0 and (n != 12 and divide(1, n - 12) < 0)", [1, 3]),
    ("filter", "not (n + 0 != 12 and divide(1, n - 12) > 0)", [1, 3, 12]),
    ("filter", "(n != 12 and divide(1, n - 12) < 0) or n == 12", [1, 3, 12]),
    ("filter", "n < 100 and (n > 0 and (n != 12 and n * 922337203685477580 > 0))", [1, 3]),
    ("assign", "n != 12 and divide(1, n - 12) < 0", [True, False, True]),
    ("assign", "case(n > 0 and (n != 12 and divide(1, n - 12) < 0), 1, 0)", [1, 0, 1]),
    ("assign", "1 if n != 12 and -(n * 922337203685477580) < 0 else 0", [1, 0, 1]),
    ("assign", "divide(11, n - 12) if n != 12 else 0", [-1.0, 0.0, -11 / 9]),
    ("assign", "case(n == 12, 0, divide(1, n - 12) < 0, 1, 2)", [1, 0, 1]),
]


@pytest.mark.parametrize(("expr", "check"), [("divide(11, n - 12) if n != 12 else 0", "divide(11, n - 12)"),
                                            ("case(n != 12, divide(1, n - 12), 0)", "divide(1, n - 12)"),
                                            ("n * 768614336404564651 if n != 12 else 0", "n * 768614336404564651")])
def test_a_branch_holds_its_rows_in_the_polars_lowering(expr: str, check: str) -> None:
    """A check in a branch of ``if`` or ``case`` carries the rows that take the branch in the Polars expression itself:
    each branch evaluated over every row, as an engine without Polars' CPU short-cut (which evaluates a branch of
    when/then over its own rows, as an optimisation) may, fails on no row; the check alone fails on n = 12."""
    def lowered(text: str) -> pl.Expr:
        return to_polars(parse_expression(text).node, text, None, {"n": "numeric"}, {"n": pl.Int64})

    rows = pl.DataFrame({"n": [1, 12, 3]})
    branches = lowered(expr).meta.pop()  # the condition and the branches' values
    assert len(branches) == 3
    for branch in branches:
        rows.select(branch.alias("value"))
    with pytest.raises(pl.exceptions.PolarsError):
        rows.select(lowered(check).alias("value"))


@pytest.mark.parametrize(("op", "expr", "want"), NESTED_GUARDS, ids=[expr for _, expr, _ in NESTED_GUARDS])
def test_a_guard_keeps_the_checks_after_it_from_failing_at_any_depth(tmp_path: Path, op: str, expr: str, want: list[Any]) -> None:
    step = {"op": "filter", "expr": expr} if op == "filter" else {"op": "assign", "column": "c", "expr": expr}
    on_dask, on_polars = run_both(guard_spec(tmp_path, step))
    assert_same_rows(on_dask, on_polars, ordered=False)
    rows = on_polars.set_index("n")
    assert (sorted(rows.index) if op == "filter" else rows.loc[[1, 12, 3], "c"].tolist()) == want


@pytest.mark.parametrize("step", [{"op": "filter", "expr": "n > 0 and (n < 100 and divide(1, n - 12) < 0)"},
                                  {"op": "assign", "column": "c", "expr": "n > 0 and (divide(1, n - 12) < 0 and n != 12)"},
                                  {"op": "assign", "column": "c", "expr": "divide(1, n - 12) if n > 0 else 0"},
                                  {"op": "assign", "column": "c", "expr": "n != 1 and (n > 2 and n * 922337203685477580 > 0)"}],
                         ids=lambda step: step["expr"])
def test_a_check_its_guard_lets_a_bad_row_reach_still_fails_on_both_engines(tmp_path: Path, step: dict[str, Any]) -> None:
    """A guard that lets n = 12 reach the check (it keeps that row, comes after the check, or sends it into the check's
    branch) does not protect it: the job fails on both engines, as the check is meant to."""
    spec = guard_spec(tmp_path, step)
    plan = plan_spec(spec)
    with pytest.raises((ZeroDivisionError, IntegerOverflow), match="division by zero|integer overflow"):
        with backend_config("pandas"), dask.config.set(scheduler="sync"):
            build_frame(spec, plan).compute()
    with pytest.raises(pl.exceptions.PolarsError, match=f"{DIVISION_BY_ZERO}|{INT64_OVERFLOW}"):
        build_lazyframe(plan, filters_before_casts=True).collect()


def test_a_cast_of_a_nullable_int_keeps_its_nulls_on_both_engines(tmp_path: Path) -> None:
    """pandas reads an int column with nulls as its nullable Int64, whose astype('int32') refused the null
    ("cannot convert NA to integer"): the Dask engine failed ``cast(n, 'int32')``; the null stays null now."""
    path = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"n": [1, None, 3]}), path)
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(path)}, "sink": {"path": "/tmp/unused"},
                                   "steps": [{"op": "assign", "column": "c", "expr": "cast(n, 'int32')"},
                                             {"op": "assign", "column": "d", "expr": "cast(n * 2, 'int64')"}]})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert on_dask["c"].isna().tolist() == [False, True, False] and str(on_dask["c"].dtype) == "Int32"


@pytest.mark.parametrize("descending", [False, True])
def test_top_k_over_files_out_of_key_order_keeps_the_right_rows(tmp_path: Path, descending: bool) -> None:
    """Two files, ids 5-8 then 1-4: the Dask engine's top_k kept 5, 6 for the first two in id order (a cumcount over
    one sort, paired with the rows of another). Now each group is cut in one partition; the rows come out in order."""
    folder = tmp_path / "rev"
    folder.mkdir()
    for name, ids in (("a", [5, 6, 7, 8]), ("b", [1, 2, 3, 4])):  # more columns than the order needs: the sorts then differ
        pq.write_table(pa.table({"id": ids, "g": [1] * 4, "x": [1.0] * 4, "y": ["u"] * 4}), folder / f"{name}.parquet")
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(folder)}, "sink": {"path": "/tmp/unused"},
                                   "steps": [{"op": "top_k", "by": ["g"], "order": [{"column": "id", "descending": descending}], "k": 2}]})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=True)
    assert on_dask["id"].tolist() == ([8, 7] if descending else [1, 2])


def test_lag_with_a_float_default_over_integers_gives_floats_on_both_engines(tmp_path: Path) -> None:
    """A window ``lag`` of an int column with ``default: 1.5``: Polars gives floats (the supertype); the Dask engine
    failed on pandas' nullable ints (KeyError: dtype('float64'))."""
    path = tmp_path / "lags.parquet"
    pq.write_table(pa.table({"g": [1, 1, 2, 2], "n": pa.array([1, None, 3, 4]), "o": [1, 2, 3, 4]}), path)
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(path)}, "sink": {"path": "/tmp/unused"},
                                   "steps": [{"op": "window", "partition_by": ["g"], "order_by": [{"column": "o"}],
                                              "columns": {"p": {"func": "lag", "column": "n", "default": 1.5}}}]})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert sorted(on_dask["p"].tolist()) == [1.0, 1.5, 1.5, 3.0]
