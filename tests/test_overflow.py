"""Integer overflow is an error on both engines, never a wrapped-around answer (issue 16 item 12); so are
``divide`` by zero and a text ``strptime`` cannot read, each naming the expression (issue 20).

Integer ``+``, ``-``, ``*``, ``**`` and unary ``-`` over int64 columns: a result outside int64 fails the
job as ``integer_overflow`` naming the expression; a constant outside int64 is a 422 at submit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import polars as pl
import pytest

from spillway.cluster.manager import _signalled
from spillway.jobs.expr import parse_expression
from spillway.jobs.lower_polars import INT64_OVERFLOW, to_polars
from spillway.jobs.pandas_numbers import DIVISION_BY_ZERO
from spillway.service.client import SpillwayClient
from tests.conftest import ServiceProcess, wait_terminal


def assign(sample_data: dict[str, Path], tmp_path: Path, expr: str) -> dict[str, Any]:
    return {"source": {"format": "parquet", "path": str(sample_data["sales"])},
            "steps": [{"op": "assign", "column": "x", "expr": expr}, {"op": "select", "columns": ["order_id", "quantity", "x"]}],
            "sink": {"path": str(tmp_path / "out")}}


@pytest.mark.parametrize("expr", ["quantity + 9223372036854775807", "quantity * 4611686018427387904", "-(quantity - 9223372036854775807 - 2)",
                                  "quantity ** 70", "(quantity + 1) ** 64", "(quantity + 1) ** 700"])
def test_an_overflowing_integer_result_fails_the_job_naming_the_expression(
    api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path, expr: str
) -> None:
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, expr)).id)
    assert job.state.value == "FAILED" and job.error is not None
    assert job.error.code == "integer_overflow", job.error
    assert job.error.field == "steps[0].expr"
    assert "integer overflow in" in job.error.message and "outside int64" in job.error.message
    assert not list((tmp_path / "out").glob("*.parquet")), "nothing is committed"


def written_type(sink: Path, column: str) -> pa.DataType:
    """A column's type in the committed files (pandas would read the Dask engine's nullable ints back as Int64)."""
    return pads.dataset(sink, format="parquet").schema.field(column).type


def test_integer_arithmetic_within_int64_is_exact(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path, sales_frame: pd.DataFrame) -> None:
    # Close to the bounds, and through them and back: only results are checked, each within int64 here.
    expr = "quantity * 3 - 1 + (9223372036854775780 - quantity) - 9223372036854775780"
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, expr)).id)
    assert job.state.value == "SUCCEEDED", job.error
    out = pd.read_parquet(tmp_path / "out").sort_values("order_id")
    expected = sales_frame.sort_values("order_id")["quantity"] * 2 - 1
    assert out["x"].tolist() == expected.tolist()
    assert written_type(tmp_path / "out", "x") == pa.int64()


@pytest.mark.parametrize(("expr", "value"), [("(quantity * 0 + 3) ** 39", 3**39), ("(quantity * 0 - 2) ** 63", -(2**63)),
                                             ("(quantity * 0 - 3) ** 39", -(3**39)), ("(quantity * 0 + 7) ** 0", 1)])
def test_an_integer_power_within_int64_is_exact(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path, expr: str, value: int) -> None:
    # 3 ** 39 and -2 ** 63 lie near the bounds, where float64 cannot hold them exactly: the answer is the int64 one.
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, expr)).id)
    assert job.state.value == "SUCCEEDED", job.error
    out = pd.read_parquet(tmp_path / "out")
    assert set(out["x"].tolist()) == {value} and written_type(tmp_path / "out", "x") == pa.int64()


@pytest.mark.parametrize("expr", ["quantity ** -1", "pow(quantity, -2)", "(quantity - quantity) ** -1"])
def test_an_integer_to_a_negative_constant_power_is_a_float(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path,
                                                           sales_frame: pd.DataFrame, expr: str) -> None:
    """``2 ** -1`` is 0.5, as in Python and SQL (a zero base gives inf, as float division by zero does): an integer
    column to a negative power failed as the job ran (Polars: "conversion from i32 to u32 failed"; numpy: "Integers to
    negative integer powers are not allowed")."""
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, expr)).id)
    assert job.state.value == "SUCCEEDED", job.error
    out = pd.read_parquet(tmp_path / "out").sort_values("order_id")
    quantity = sales_frame.sort_values("order_id")["quantity"].astype("float64")
    base = quantity - quantity if expr.startswith("(") else quantity
    exponent = -2 if "-2" in expr else -1
    assert out["x"].tolist() == pytest.approx((base**exponent).tolist(), rel=1e-12)
    assert written_type(tmp_path / "out", "x") == pa.float64()


@pytest.mark.parametrize(("text", "refusal"), [("name ** -1", "cannot apply '**' to 'name' (string)"),
                                             ("pow(name, -2)", "cannot apply '**' to 'name' (string)"),
                                             ("0 ** -1", "0.0 cannot be raised to a negative power")])
def test_a_negative_power_of_text_or_of_a_zero_constant_is_refused_at_submit(text: str, refusal: str) -> None:
    with pytest.raises(Exception) as refused:
        parse_expression(text, field="steps[0].expr").infer_kind({"name": "string", "quantity": "numeric"})
    assert refusal in str(refused.value)


def test_float_arithmetic_is_not_checked(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path) -> None:
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, "quantity * 1e300 * 1e300")).id)
    assert job.state.value == "SUCCEEDED", job.error
    assert (pd.read_parquet(tmp_path / "out")["x"] == float("inf")).all()


@pytest.mark.parametrize(
    ("expr", "value"),
    [("quantity + 9223372036854775808", "9223372036854775808"), ("quantity - (9223372036854775807 + 1)", "9223372036854775808"),
     ("quantity * -9223372036854775809", "9223372036854775809")],
)
def test_a_constant_outside_int64_is_a_422(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path, expr: str, value: str) -> None:
    response = httpx.post(f"{service.url}/jobs", json=assign(sample_data, tmp_path, expr), timeout=60)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "steps[0].expr" and f"{value} is outside int64" in error["message"]


@pytest.mark.parametrize("text, value", [("cast('41', 'int64') + 1", 42), ("strpos('abc', 'b') + 1", 3),
                                         ("day_of_week(date('2024-01-03')) + 1", 4), ("try_cast('41', 'int64') * 2", 82)])
def test_checked_arithmetic_on_a_folded_function_value(text: str, value: int) -> None:
    # A function of literals folds to a numpy scalar; the Dask engine's overflow check took it for a column.
    assert parse_expression(text).evaluate(pd.DataFrame({"a": [1]})) == value


def test_divide_by_zero_fails_the_job_naming_the_expression_on_both_engines(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path) -> None:
    """``divide`` errs where SQL's division does; ``safe_divide`` gives null and ``/`` an infinity (docs/spec.md, "Numbers")."""
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, "divide(quantity, quantity - quantity)")).id)
    assert job.state.value == "FAILED" and job.error is not None
    assert (job.error.code, job.error.field) == ("division_by_zero", "steps[0].expr"), job.error
    assert "division by zero in steps[0].expr 'divide(quantity, quantity - quantity)'" in job.error.message, job.error.message
    assert not list((tmp_path / "out").glob("*.parquet")), "nothing is committed"
    fine = wait_terminal(api, api.submit(assign(sample_data, tmp_path / "fine", "divide(order_id, quantity + 1000)")).id)
    assert fine.state.value == "SUCCEEDED", fine.error


def test_a_text_strptime_cannot_read_fails_the_job_naming_the_expression_on_both_engines(api: SpillwayClient, sample_data: dict[str, Path],
                                                                                        tmp_path: Path) -> None:
    expr = "strptime(cast(quantity, 'string'), '%Y-%m-%d')"
    job = wait_terminal(api, api.submit(assign(sample_data, tmp_path, expr)).id)
    assert job.state.value == "FAILED" and job.error is not None
    assert (job.error.code, job.error.field) == ("text_not_parsed", "steps[0].expr"), job.error
    assert "a text does not match the format in steps[0].expr 'strptime(cast(quantity" in job.error.message, job.error.message
    assert "conversion from `str` to `datetime" in job.error.message  # which texts, as the engine said
    assert not list((tmp_path / "out").glob("*.parquet")), "nothing is committed"


def test_a_sentinel_date_cast_to_nanoseconds_fails_the_job_naming_the_expression_on_both_engines(api: SpillwayClient, tmp_path: Path) -> None:
    """9999-12-31 (a common 'no end' date) fits datetime64[ns] nowhere: Dask failed raw, Polars gave a null silently."""
    import datetime

    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1, 2], "d": pa.array([datetime.date(9999, 12, 31), datetime.date(2024, 1, 1)], pa.date32())}), tmp_path / "d.parquet")

    def spec(out: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
        return {"source": {"format": "parquet", "path": str(tmp_path / "d.parquet")},
                "steps": [*steps, {"op": "assign", "column": "x", "expr": "cast(d, 'datetime64[ns]')"}], "sink": {"path": str(tmp_path / out)}}

    job = wait_terminal(api, api.submit(spec("out", [])).id)
    assert job.state.value == "FAILED" and job.error is not None
    assert (job.error.code, job.error.field) == ("datetime_out_of_range", "steps[0].expr"), job.error
    assert "in steps[0].expr 'cast(d, 'datetime64[ns]')'" in job.error.message and "9999-12-31" in job.error.message, job.error.message
    assert not (tmp_path / "out").exists(), "nothing is committed"
    fine = wait_terminal(api, api.submit(spec("fine", [{"op": "filter", "expr": "d < date('2100-01-01')"}])).id)
    assert fine.state.value == "SUCCEEDED", fine.error


CHECKED = ["a + b", "a - b", "a * b", "-a", "a ** 2"]
_INT64 = {"a": pl.Int64, "b": pl.Int64}


def _checked_query(text: str, rows: dict[str, list[int]]) -> pl.LazyFrame:
    lowered = to_polars(parse_expression(text).node, text, None, {"a": "numeric", "b": "numeric"}, _INT64)
    return pl.DataFrame(rows, schema=_INT64).lazy().select(lowered.alias("value"))


@pytest.mark.parametrize("text", CHECKED)
def test_the_polars_check_needs_no_128_bit_integers(text: str) -> None:
    # cudf-polars has no Int128: a check through it would send every integer job off the GPU.
    assert "Int128" not in str(_checked_query(text, {"a": [1], "b": [2]}).explain(optimized=False))


@pytest.mark.parametrize("text", CHECKED)
def test_an_integer_overflow_on_polars_fails_with_the_sentinel_alone(text: str) -> None:
    with pytest.raises(pl.exceptions.InvalidOperationError) as failed:
        _checked_query(text, {"a": [2**62, -(2**63), 3], "b": [2**62, 1, 4]}).collect()
    assert _signalled(str(failed.value), INT64_OVERFLOW), failed.value


@pytest.mark.gpu
@pytest.mark.parametrize("text", CHECKED)
def test_an_integer_overflow_on_cudf_polars_fails_with_the_sentinel(text: str) -> None:
    pytest.importorskip("cudf_polars")
    gpu = pl.GPUEngine(executor="in-memory", raise_on_fail=True)
    within = {"a": [7, -3, 2**31, None], "b": [5, 0, 2**31, 1]}
    assert _checked_query(text, within).collect(engine=gpu).equals(_checked_query(text, within).collect()), text
    outside = {"a": [2**62, -(2**63), 3], "b": [2**62, 1, 4]}  # each of CHECKED leaves int64 in row 1 or 2
    with pytest.raises(Exception) as failed:
        _checked_query(text, outside).collect(engine=gpu)
    assert _signalled(str(failed.value), INT64_OVERFLOW), failed.value


@pytest.mark.gpu
def test_a_zero_divisor_on_cudf_polars_fails_with_its_own_sentinel() -> None:
    pytest.importorskip("cudf_polars")
    gpu = pl.GPUEngine(executor="in-memory", raise_on_fail=True)
    assert _checked_query("divide(a, b)", {"a": [7, 8], "b": [2, 4]}).collect(engine=gpu)["value"].to_list() == [3.5, 2.0]
    with pytest.raises(Exception) as failed:
        _checked_query("divide(a, b)", {"a": [7, 8], "b": [2, 0]}).collect(engine=gpu)
    assert _signalled(str(failed.value), DIVISION_BY_ZERO) and not _signalled(str(failed.value), INT64_OVERFLOW), failed.value


def test_cudf_polars_failed_casts_name_the_check_by_their_type() -> None:
    """cudf-polars' error for a failed strict cast names only its types (text as a device run gave it,
    bench/results/gpu_tests_2026-12-02b.log); a user's cast of text to int64 is neither check."""
    user_cast = "InvalidOperationError: Conversion from <type_id.STRING: 23> to <type_id.INT64: 4> failed."
    assert not _signalled(user_cast, INT64_OVERFLOW) and not _signalled(user_cast, DIVISION_BY_ZERO)
    assert _signalled(user_cast.replace("INT64: 4", "UINT16: 6"), INT64_OVERFLOW)
    assert _signalled(user_cast.replace("INT64: 4", "UINT8: 5"), DIVISION_BY_ZERO)
