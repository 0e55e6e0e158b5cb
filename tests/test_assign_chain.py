"""Consecutive assign steps on the Dask engine, built as one dask ``assign`` (issue 16 item 14).

jobs/assign_run.py evaluates each step of a run over the columns the steps before it left, so
a chain of assigns is one dask expression instead of one per step (a 200-step chain took 16-36 s
to plan as a chain). Checked here against the same steps applied one at a time, as before: the same
frame on the real sample data, every dtype and value; runtime errors naming the step that failed,
through the live service on both engines; progress stages named after each step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
import pytest
from dask.dataframe.dask_expr._expr import Assign

from spillway.cluster.plan import plan_job
from spillway.jobs.dask_read import read_source
from spillway.jobs.pipeline import apply_step, backend_config, build_frame
from spillway.jobs.sink import SinkWriter
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from spillway.service.client import SpillwayClient
from tests.conftest import wait_terminal


def assign(column: str, expr: str) -> dict[str, str]:
    return {"op": "assign", "column": column, "expr": expr}


CHAINS: dict[str, list[dict[str, Any]]] = {
    "independent": [assign("a", "amount + 1"), assign("b", "quantity * 2"), assign("c", "lower(region)")],
    "each reading the one before": [assign("a", "quantity + 1"), assign("b", "a * 2"), assign("c", "b - a"), assign("d", "c > 3 and a < 9")],
    "a column of the source replaced, then read": [assign("amount", "amount * 2"), assign("d", "amount + 1"), assign("amount", "d - 1")],
    "a column set twice keeps its first place": [assign("x", "quantity"), assign("y", "1.5"), assign("x", "x * 10"), assign("z", "x + y")],
    "a constant, then read (a new run)": [assign("k", "1"), assign("e", "k + quantity"), assign("n", "None"), assign("f", "coalesce(n, e)")],
    "nulls, text and times": [
        assign("maybe", "None if quantity > 5 else amount"), assign("filled", "coalesce(maybe, 0.0)"),
        assign("label", "upper(region) + '-' + cast(quantity, 'string')"), assign("short", "substr(label, 0, 3)"),
        assign("day", "date_trunc('day', ts)"), assign("later", "day + interval(1, 'month')"), assign("kind", "case(isnull(maybe), 'none', 'some')"),
    ],
    "checked operations in a run": [
        assign("q", "quantity + 1"), assign("ratio", "divide(amount, q)"), assign("text", "strftime(ts, '%Y-%m-%d')"),
        assign("parsed", "strptime(text, '%Y-%m-%d')"), assign("big", "q * 1000000000000"),
    ],
    "runs between other steps": [
        assign("a", "amount + 1"), {"op": "filter", "expr": "a > 10"}, assign("b", "a * 2"), assign("c", "b + a"),
        {"op": "select", "columns": ["order_id", "c", "b"]}, assign("d", "c - b"), {"op": "rename", "columns": {"d": "e"}}, assign("f", "e * 2"),
    ],
}


def chain_spec(data: dict[str, Path], out: Path, steps: list[dict[str, Any]]) -> JobSpec:
    return JobSpec.model_validate({"name": "assigns", "source": {"format": "parquet", "path": str(data["sales"])}, "steps": steps,
                                   "sink": {"path": str(out)}})


def one_at_a_time(spec: JobSpec) -> dd.DataFrame:
    """The spec's steps applied as they were before runs were merged: one dask call per step."""
    plan = plan_spec(spec)
    frame = read_source(spec.source, field="source")  # type: ignore[arg-type]
    for index, step in enumerate(spec.steps):
        frame = apply_step(frame, step, f"steps[{index}]", lambda ref, field: None, plan)  # type: ignore[arg-type,return-value]
    return frame


def assigns_in(frame: dd.DataFrame) -> int:
    return sum(isinstance(node, Assign) for node in frame.expr.walk())


@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_run_of_assigns_gives_the_frame_of_the_steps_one_at_a_time(sample_data: dict[str, Path], tmp_path: Path, chain: str) -> None:
    spec = chain_spec(sample_data, tmp_path / "out", CHAINS[chain])
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        merged, reference = build_frame(spec, plan_spec(spec)), one_at_a_time(spec)
        assert list(merged.columns) == list(reference.columns)
        assert merged._meta.dtypes.to_dict() == reference._meta.dtypes.to_dict()
        got, expected = merged.compute(), reference.compute()
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert len(got) > 1000


def test_a_run_is_one_assign_however_its_steps_read_each_other(sample_data: dict[str, Path], tmp_path: Path) -> None:
    # 50 steps, each reading the one before, and one reading a source column: one Assign, not 50.
    steps = [assign("c0", "quantity + 1"), *(assign(f"c{i}", f"c{i - 1} + amount") for i in range(1, 50))]
    spec = chain_spec(sample_data, tmp_path / "out", steps)
    with backend_config("pandas"):
        assert assigns_in(build_frame(spec, plan_spec(spec))) == 1
        assert assigns_in(one_at_a_time(spec)) == 50
    # A constant read by a later step ends the run: that column must exist in a frame first.
    constant = chain_spec(sample_data, tmp_path / "out", CHAINS["a constant, then read (a new run)"])
    with backend_config("pandas"):
        assert assigns_in(build_frame(constant, plan_spec(constant))) == 3


def test_each_step_of_a_run_is_its_own_stage(sample_data: dict[str, Path], tmp_path: Path) -> None:
    # With steps whose value has no expression of its own in the graph: a constant (steps[4]), and
    # the very expression of an earlier step (steps[5]: the same dask expression as steps[2]'s).
    chain = CHAINS["runs between other steps"]
    steps = [*chain[:4], assign("k", "7"), assign("again", "a * 2"), {"op": "select", "columns": ["order_id", "c", "b", "k", "again"]}, *chain[5:]]
    spec = chain_spec(sample_data, tmp_path / "out", steps)
    with dask.config.set(scheduler="sync"):
        plan = plan_job(spec, "pandas", SinkWriter(spec.sink, "assign-stages"))
    names = [f"steps[{index}] {step.op}" for index, step in enumerate(spec.steps)]
    assert plan.stages == ["read source", *names, "write parquet"]
    totals = plan.stage_totals
    # Every step's work is counted, each assign in every task that computes its run: all the partitions.
    assert all(totals[stage] == totals["read source"] for stage in names if "assign" in stage), totals
    assert all(totals[stage] > 0 for stage in plan.stages), totals


OVERFLOW = "quantity * 4611686018427387904"


@pytest.mark.parametrize(("steps", "code", "field", "says"), [
    # Only the failing step has + - * or divide or strptime: both engines can then name it.
    ([assign("a", "round(amount, 1)"), assign("b", "quantity"), assign("x", OVERFLOW), assign("d", "lower(region)")],
     "integer_overflow", "steps[2].expr", "integer overflow in"),
    ([assign("a", "abs(quantity)"), assign("z", "cast(quantity > 100, 'int64')"), assign("y", "divide(a, z)"), assign("w", "a")],
     "division_by_zero", "steps[2].expr", "division by zero in steps[2].expr 'divide(a, z)'"),
    ([assign("s", "cast(quantity, 'string')"), assign("t", "strptime(s, '%Y-%m-%d')"), assign("u", "lower(s)")],
     "text_not_parsed", "steps[1].expr", "a text does not match the format in steps[1].expr 'strptime(s"),
])
def test_a_failing_step_in_a_run_is_named(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path, steps: list[dict[str, Any]],
                                          code: str, field: str, says: str) -> None:
    job = wait_terminal(api, api.submit(chain_spec(sample_data, tmp_path / "out", steps)).id)
    assert job.state.value == "FAILED" and job.error is not None
    assert (job.error.code, job.error.field) == (code, field), job.error
    assert says in job.error.message, job.error.message
    assert not list((tmp_path / "out").glob("*.parquet")), "nothing is committed"


@pytest.mark.engines("dask")
def test_the_dask_engine_names_which_checked_step_of_a_run_overflowed(api: SpillwayClient, sample_data: dict[str, Path], tmp_path: Path) -> None:
    # Every step has integer arithmetic: the Dask engine's check names the one whose rows overflowed.
    steps = [assign("a", "quantity + 1"), assign("b", "a * 2"), assign("x", "b * 4611686018427387904"), assign("c", "b - a")]
    job = wait_terminal(api, api.submit(chain_spec(sample_data, tmp_path / "out", steps)).id)
    assert job.state.value == "FAILED" and job.error is not None
    assert (job.error.code, job.error.field) == ("integer_overflow", "steps[2].expr"), job.error
    assert "'b * 4611686018427387904'" in job.error.message, job.error.message
