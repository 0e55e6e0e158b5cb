"""Exact decimals as an opt-in: ``cast(x, 'decimal(p, s)')`` on the Polars engine, refused before any work on Dask."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import dask
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from spillway.jobs.engine_choice import choose_engine
from spillway.jobs.errors import ExpressionError, SpecError, TypeMismatch
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec, validate_submission
from spillway.service.client import ApiError, SpillwayClient
from tests.conftest import wait_terminal

# Prices in a decimal(10, 2) file, which every engine reads as float64 unless a job casts them.
PRICES = [decimal.Decimal("0.10")] * 10 + [decimal.Decimal("32986.52"), None]


@pytest.fixture()
def prices(tmp_path: Path) -> Path:
    table = pa.table({"k": pa.array([1] * 10 + [2, 2]), "price": pa.array(PRICES, pa.decimal128(10, 2)),
                      "name": pa.array(["a"] * 12)})
    pq.write_table(table, tmp_path / "prices.parquet")
    return tmp_path / "prices.parquet"


def job(path: Path, expr: str, sink: Path | str = "/tmp/unused-decimals", **extra: Any) -> dict[str, Any]:
    return {"source": {"format": "parquet", "path": str(path)},
            "steps": [{"op": "assign", "column": "exact", "expr": expr},
                      {"op": "groupby", "by": ["k"], "aggs": {"total": {"func": "sum", "column": "exact"},
                                                               "as_float": {"func": "sum", "column": "price"}}},
                      {"op": "sort", "by": ["k"]}],
            "sink": {"path": str(sink)}, **extra}


def test_a_decimal_cast_makes_sums_exact_on_polars(prices: Path) -> None:
    out = build_lazyframe(plan_spec(JobSpec.model_validate(job(prices, "cast(price, 'decimal(12, 2)') * 3")))).collect()
    assert out["total"].to_list() == [decimal.Decimal("3.00"), decimal.Decimal("98959.56")]
    assert out.schema["total"] == pl.Decimal(38, 2) and out.schema["as_float"] == pl.Float64  # the default stays float64


def test_the_dask_engine_refuses_it_before_any_work(prices: Path) -> None:
    spec = JobSpec.model_validate(job(prices, "cast(price, 'decimal(12, 2)')", engine="dask"))
    with pytest.raises(SpecError) as submitted:
        validate_submission(spec, ["/"])
    assert submitted.value.field == "steps[0].expr" and "runs only on the Polars engine" in submitted.value.message
    with backend_config("pandas"), dask.config.set(scheduler="sync"), pytest.raises(SpecError) as built:
        build_frame(spec, plan_spec(spec))  # a job moved from the GPU Polars engine
    assert built.value.field == "steps[0].expr"
    assert validate_submission(spec.model_copy(update={"engine": "auto"}), ["/"]) is not None


@pytest.mark.parametrize(("expr", "error", "message"), [
    ("cast(name, 'decimal(10, 2)')", TypeMismatch, "cast to 'decimal(10, 2)' takes a number, got 'name' (string)"),
    ("cast(price, 'decimal(39, 2)')", ExpressionError, "or 'decimal(p, s)' (p from 1 to 38, s from 0 to p), got 'decimal(39, 2)'"),
    ("cast(price, 'decimal(4, 5)')", ExpressionError, "got 'decimal(4, 5)'"),
    ("cast(price, 'numeric')", ExpressionError, "got 'numeric'"),
])
def test_bad_decimal_casts_are_refused_naming_them(prices: Path, expr: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        plan_spec(JobSpec.model_validate(job(prices, expr)))
    assert info.value.field == "steps[0].expr" and message in info.value.message, info.value.message  # type: ignore[attr-defined]


def test_through_the_service_a_decimal_is_written_exactly_or_refused(api: SpillwayClient, engine: str, prices: Path, tmp_path: Path) -> None:
    exact_totals_or_refused(api, engine, job(prices, "cast(price, 'decimal(12, 2)')", sink=tmp_path / "out"), tmp_path / "out", "steps[0].expr")


def exact_totals_or_refused(api: SpillwayClient, engine: str, spec: dict[str, Any], out: Path, field: str, mentions: str = "") -> Any:
    """On dask: a 422 naming ``field`` (saying ``mentions``), nothing written (None). On polars: the SUCCEEDED job, its totals exact decimals."""
    if engine == "dask":
        with pytest.raises(ApiError) as info:
            api.submit(spec)
        assert info.value.status == 422 and info.value.detail.field == field and mentions in info.value.detail.message, info.value.detail
        assert not out.exists()
        return None
    done = wait_terminal(api, api.submit(spec).id)
    assert done.state.value == "SUCCEEDED", done.error
    written = pads.dataset(out, format="parquet").to_table()
    assert written.schema.field("total").type == pa.decimal128(38, 2)
    assert sorted(written.column("total").to_pylist()) == [decimal.Decimal("1.00"), decimal.Decimal("32986.52")]
    return done


@pytest.mark.parametrize(("precision", "scale"), [(10, 2), (15, 2), (12, 4), (18, 5), (38, 2), (15, 0)])
def test_a_float_read_from_a_parquet_decimal_gets_its_exact_value_back(precision: int, scale: int) -> None:
    """As docs/spec.md says: at the file's scale, or one digit more, within 15 significant digits."""
    rng = np.random.default_rng(precision * 100 + scale)
    digits = min(precision, 15)
    exact = [decimal.Decimal(int(i)).scaleb(-scale) for i in rng.integers(-(10 ** (digits - 1)), 10 ** (digits - 1), 200_000)]
    floats = pl.Series([float(value) for value in exact])  # what every engine reads such a file as
    for target in {scale, min(scale + 1, 15 - digits + scale)}:
        assert floats.cast(pl.Decimal(38, target)).to_list() == exact


def test_a_product_of_two_decimals_is_rounded_to_the_larger_scale(tmp_path: Path) -> None:
    """Polars 1.44's rule, written in docs/spec.md: cast to a larger scale first to keep every digit."""
    pq.write_table(pa.table({"x": [0.05, 0.09]}), tmp_path / "x.parquet")
    spec = {"source": {"format": "parquet", "path": str(tmp_path / "x.parquet")},
            "steps": [{"op": "assign", "column": "at_two", "expr": "cast(x, 'decimal(10, 2)') * cast(x, 'decimal(10, 2)')"},
                      {"op": "assign", "column": "at_four", "expr": "cast(x, 'decimal(38, 4)') * cast(x, 'decimal(38, 4)')"}],
            "sink": {"path": "/tmp/unused-decimals"}}
    out = build_lazyframe(plan_spec(JobSpec.model_validate(spec))).collect()
    assert out["at_two"].to_list() == [decimal.Decimal("0.00"), decimal.Decimal("0.01")]
    assert out["at_four"].to_list() == [decimal.Decimal("0.0025"), decimal.Decimal("0.0081")]


# A source that keeps its decimals: ``decimals: exact`` (docs/spec.md, "Exact decimals").


def exact_job(path: Path, sink: Path | str = "/tmp/unused-decimals", **source: Any) -> dict[str, Any]:
    return {"source": {"format": "parquet", "path": str(path), "decimals": "exact", **source},
            "steps": [{"op": "filter", "expr": "price > 0.05"},
                      {"op": "groupby", "by": ["k"], "aggs": {"total": {"func": "sum", "column": "price"},
                                                               "top": {"func": "max", "column": "price"}}},
                      {"op": "sort", "by": ["k"]}],
            "sink": {"path": str(sink)}}


def test_a_source_keeping_its_decimals_sums_them_exactly_where_float64_does_not(prices: Path) -> None:
    exact = build_lazyframe(plan_spec(JobSpec.model_validate(exact_job(prices)))).collect()
    assert exact["total"].to_list() == [decimal.Decimal("1.00"), decimal.Decimal("32986.52")]
    assert exact.schema["total"] == pl.Decimal(38, 2) and exact.schema["top"] == pl.Decimal(10, 2)
    def tripled(decimals: str) -> pl.DataFrame:
        spec = {**exact_job(prices, decimals=decimals), "steps": [{"op": "assign", "column": "t", "expr": "price * 3"}, {"op": "limit", "n": 1}]}
        return build_lazyframe(plan_spec(JobSpec.model_validate(spec))).collect()

    assert tripled("exact")["t"].to_list() == [decimal.Decimal("0.30")]
    assert tripled("float64")["t"].to_list() == [0.30000000000000004]  # the default: float64's 0.1 × 3


def test_exact_decimals_run_on_polars_whatever_the_default_and_dask_refuses_them(prices: Path) -> None:
    spec = JobSpec.model_validate(exact_job(prices))
    choice = choose_engine(spec, "dask", "pandas")
    assert choice.engine == "polars" and "source reads decimals exactly, which only the Polars engine computes" in choice.reason
    with pytest.raises(ValidationError) as asked:
        JobSpec.model_validate({**exact_job(prices), "engine": "dask"})
    (error,) = asked.value.errors()
    assert error["loc"] == ("engine",) and "source.decimals is exact" in error["msg"]
    with backend_config("pandas"), dask.config.set(scheduler="sync"), pytest.raises(SpecError) as built:
        build_frame(spec, plan_spec(spec))  # a job moved from the GPU Polars engine must not read them as floats
    assert built.value.field == "source.decimals"


def test_decimals_exact_on_a_csv_source_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"source": {"format": "csv", "path": str(tmp_path / "a.csv"), "decimals": "exact"}, "sink": {"path": "/tmp/x"}})
    (error,) = refused.value.errors()
    assert error["loc"] == ("source",) and "decimals: exact reads parquet decimal columns" in error["msg"]


def test_through_the_service_exact_decimals_are_written_as_decimals_or_refused(api: SpillwayClient, engine: str, prices: Path,
                                                                                 tmp_path: Path) -> None:
    done = exact_totals_or_refused(api, engine, {**exact_job(prices, sink=tmp_path / "out"), "engine": engine}, tmp_path / "out", "engine",
                                   mentions="source.decimals")
    if done is not None:
        assert done.result is not None and {c.name: c.type for c in done.result.columns}["total"] == "decimal128(38, 2)"
