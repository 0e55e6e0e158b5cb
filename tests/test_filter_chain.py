"""Consecutive filter steps on the Dask engine, built as one filter (issue 16 item 14).

Dask's optimizer merges nested filters itself, in time that grew with the square of the chain
(100 filters: 3.5 s to optimise). jobs.pipeline and-s the masks of a run of filters instead, as a
balanced tree. A filter whose expression can fail the job is never merged: it sees only the rows the
filters before it keep. Checked here against the steps one at a time, on both engines, and the
progress stages, one per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pytest
from dask.dataframe.dask_expr._expr import Filter

from spillway.cluster.plan import plan_job
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.sink import SinkWriter
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.test_assign_chain import one_at_a_time
from tests.test_engines import assert_same_rows, run_both


def keep(expr: str) -> dict[str, str]:
    return {"op": "filter", "expr": expr}


CHAINS: dict[str, list[dict[str, Any]]] = {
    "two": [keep("amount > 10"), keep("region != 'north'")],
    "nulls and not": [keep("not (quantity == 3)"), keep("isnull(amount) or amount < 500"), keep("region in ('south', 'west')")],
    "between assigns": [keep("amount > 5"), {"op": "assign", "column": "a", "expr": "amount * 2"}, keep("a < 900"), keep("quantity >= 2")],
    "a failing filter between": [keep("quantity != 4"), keep("amount > 1"), keep("divide(amount, quantity - 4) > 0"), keep("amount < 800")],
    "a literal": [keep("1 == 1"), keep("amount > 100")],
}
# One step at a time, dask's optimizer fails on this one (RecursionError at 150 nested filters).
MANY = [keep(f"amount > {i}") for i in range(150)]


def chain_spec(data: dict[str, Path], out: Path, steps: list[dict[str, Any]]) -> JobSpec:
    return JobSpec.model_validate({"name": "filters", "source": {"format": "parquet", "path": str(data["sales"])}, "steps": steps,
                                   "sink": {"path": str(out)}})


def filters_in(frame: Any) -> int:
    return sum(isinstance(node, Filter) for node in frame.expr.walk())


@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_run_of_filters_keeps_the_rows_of_the_steps_one_at_a_time(sample_data: dict[str, Path], tmp_path: Path, chain: str) -> None:
    spec = chain_spec(sample_data, tmp_path / "out", CHAINS[chain])
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        got = build_frame(spec, plan_spec(spec)).compute()
        expected = one_at_a_time(spec).compute()
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert len(got) > 0
    assert_same_rows(*run_both(spec), ordered=False)


def test_a_long_run_of_filters_plans_and_keeps_the_right_rows(sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = chain_spec(sample_data, tmp_path / "out", MANY)
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    source = pd.read_parquet(sample_data["sales"])
    assert sorted(on_dask["order_id"]) == sorted(source[source["amount"] > 149]["order_id"])


def test_a_run_is_one_filter_and_a_failing_filter_its_own(sample_data: dict[str, Path], tmp_path: Path) -> None:
    with backend_config("pandas"):
        many = chain_spec(sample_data, tmp_path / "out", MANY)
        assert filters_in(build_frame(many, plan_spec(many))) == 1
        split = chain_spec(sample_data, tmp_path / "out", CHAINS["a failing filter between"])
        assert filters_in(build_frame(split, plan_spec(split))) == 3  # the two before, the failing one, the one after


def test_each_filter_of_a_run_is_its_own_stage(sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = chain_spec(sample_data, tmp_path / "out", CHAINS["between assigns"])
    with dask.config.set(scheduler="sync"):
        plan = plan_job(spec, "pandas", SinkWriter(spec.sink, "filter-stages"))
    names = [f"steps[{index}] {step.op}" for index, step in enumerate(spec.steps)]
    assert plan.stages == ["read source", *names, "write parquet"]
    assert all(plan.stage_totals[stage] > 0 for stage in plan.stages), plan.stage_totals


@pytest.mark.parametrize(("expr", "rows"), [("1 == 1", 4), ("1 == 2", 0), ("2 > 1 and 3 > 4", 0)])
def test_a_constant_filter_keeps_every_row_or_none_on_both_engines(tmp_path: Path, expr: str, rows: int) -> None:
    # The Dask engine failed on one (`frame.loc[True]`: "boolean values can not be used in a slice").
    pd.DataFrame({"x": [1, 2, 3, 4]}).to_parquet(tmp_path / "x.parquet")
    spec = JobSpec.model_validate({"source": {"format": "parquet", "path": str(tmp_path / "x.parquet")}, "steps": [keep(expr)],
                                   "sink": {"path": str(tmp_path / "out")}})
    on_dask, on_polars = run_both(spec)
    assert len(on_dask) == len(on_polars) == rows
    assert list(on_dask.columns) == ["x"]
