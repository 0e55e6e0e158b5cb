"""cudf-polars' answer, known before any work: refused queries are a 422 under ``engine: polars``
and start on dask-cudf under ``auto`` (jobs/gpu_support.py).

The translation tests and the service tests are marked ``gpu`` (they need cudf-polars and a
GPU); the choice logic itself runs everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

from spillway.jobs.errors import GpuUnsupported
from spillway.jobs.expr import parse_expression
from spillway.jobs.gpu_support import check_gpu_submission, gpu_engine, gpu_refusal, plan_gpu_refusal, settle_on_gpu, untrusted_on_gpu
from spillway.jobs.lower_polars import to_polars
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.polars_run import cannot_run_on_gpu
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import EngineChoice, JobStatus
from spillway.jobs.validate import plan_spec
from spillway.service.client import ApiError
from spillway.service.launcher import ServiceProcess, launch_service
from tests.conftest import wait_terminal
from tests.test_expr import FEATURES, make_frame

ON_GPU = EngineChoice(engine="polars", device="gpu", reason="engine: auto — Polars runs every step of this spec")


def test_a_query_cudf_polars_can_run_keeps_the_polars_engine() -> None:
    assert settle_on_gpu(ON_GPU, "auto", None) is ON_GPU
    assert settle_on_gpu(ON_GPU, "polars", None) is ON_GPU


def test_under_auto_a_refused_query_starts_on_dask_cudf_with_the_reason() -> None:
    choice = settle_on_gpu(ON_GPU, "auto", "NotImplementedError: offset_by")
    assert (choice.engine, choice.device) == ("dask", "gpu")
    assert "cudf-polars cannot run it (NotImplementedError: offset_by)" in choice.reason


def test_under_engine_polars_a_refused_query_is_an_error_naming_the_field() -> None:
    with pytest.raises(GpuUnsupported) as refused:
        settle_on_gpu(ON_GPU, "polars", "NotImplementedError: offset_by")
    assert refused.value.field == "engine" and "offset_by" in refused.value.message and "engine: auto" in refused.value.message


def test_on_a_cpu_cluster_nothing_is_asked_of_cudf_polars(tmp_path: Path) -> None:
    # No cudf-polars here: asking it would fail with ImportError, so passing shows it was not asked.
    pd.DataFrame({"a": [1, 2]}).to_parquet(tmp_path / "in.parquet")
    spec = JobSpec.model_validate({"name": "t", "engine": "polars", "source": {"format": "parquet", "path": str(tmp_path / "in.parquet")}, "sink": {"path": str(tmp_path / "out")}})
    check_gpu_submission(plan_spec(spec), "polars", "pandas")


def _spec_with(tmp_path: Path, expr: str, engine: str) -> JobSpec:
    pd.DataFrame({"t": pd.to_datetime(["1998-10-30"])}).to_parquet(tmp_path / "in.parquet")
    return JobSpec.model_validate({"name": "t", "engine": engine, "source": {"format": "parquet", "path": str(tmp_path / "in.parquet")},
                                   "steps": [{"op": "assign", "column": "u", "expr": expr}], "sink": {"path": str(tmp_path / "out")}})


def test_a_function_cudf_polars_answers_wrongly_is_never_run_there(tmp_path: Path) -> None:
    # No cudf-polars here: Spillway's own reason is found before cudf-polars' translation would be asked.
    plan = plan_spec(_spec_with(tmp_path, "convert_tz(t, 'UTC', 'America/New_York')", "polars"))
    assert "daylight-saving" in (untrusted_on_gpu(plan) or "")
    with pytest.raises(GpuUnsupported) as refused:
        check_gpu_submission(plan, "polars", "cudf")
    assert refused.value.field == "engine" and "convert_tz" in refused.value.message
    choice = settle_on_gpu(ON_GPU, "auto", untrusted_on_gpu(plan))
    assert (choice.engine, choice.device) == ("dask", "gpu") and "convert_tz" in choice.reason


def test_other_functions_are_left_to_cudf_polars_to_judge(tmp_path: Path) -> None:
    assert untrusted_on_gpu(plan_spec(_spec_with(tmp_path, "date_trunc('day', t)", "auto"))) is None


# --- on the GPU -------------------------------------------------------------------------------

KINDS = {"day_text": "string", "name": "string", "category": "string"}


@pytest.mark.gpu
@pytest.mark.parametrize("text", list(FEATURES))
def test_the_translation_refuses_exactly_what_cudf_polars_refuses_to_run(text: str) -> None:
    pytest.importorskip("cudf_polars")
    query = pl.from_pandas(make_frame()).lazy().select(to_polars(parse_expression(text).node, text, None, KINDS).alias("value"))
    refusal = gpu_refusal(query)
    try:
        query.collect(engine=gpu_engine())
        ran = True
    except Exception as exc:  # noqa: BLE001 - what matters is whether it was a refusal
        assert cannot_run_on_gpu(exc), exc
        ran = False
    assert (refusal is None) == ran, (text, refusal)


@pytest.fixture(scope="module")
def gpu_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    pytest.importorskip("cudf_polars")
    env = {"SPILLWAY_CLUSTER__BACKEND": "cudf", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]'}
    service = launch_service(tmp_path_factory.mktemp("gpu_svc"), env, timeout=300)
    yield service
    service.stop()


def month_shift_spec(sample_data: dict[str, Path], sink: Path, engine: str) -> dict[str, Any]:
    """A month interval: Polars' ``offset_by``, which cudf-polars 26.10 refuses."""
    return {
        "name": "next_month", "engine": engine, "source": {"format": "parquet", "path": str(sample_data["sales"])},
        "steps": [{"op": "assign", "column": "due", "expr": 'ts + interval(1, "month")'}, {"op": "select", "columns": ["order_id", "ts", "due"]}],
        "sink": {"path": str(sink)},
    }


@pytest.mark.gpu
def test_engine_polars_with_a_query_cudf_polars_refuses_is_a_422_at_submit(gpu_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    with gpu_service.client() as client, pytest.raises(ApiError) as refused:
        client.submit(month_shift_spec(sample_data, tmp_path / "out", "polars"))
    assert refused.value.status == 422 and refused.value.detail.code == "gpu_unsupported" and refused.value.detail.field == "engine"
    assert not (tmp_path / "out").exists()


@pytest.mark.gpu
def test_engine_auto_with_a_query_cudf_polars_refuses_moves_to_dask_cudf_when_the_worker_refuses_it(
    gpu_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path
) -> None:
    # The service does not translate the plan itself under auto: the worker's cudf-polars does,
    # before it runs anything, and its refusal sends the job to dask-cudf with the reason.
    with gpu_service.client() as client:
        job = wait_terminal(client, client.submit(month_shift_spec(sample_data, tmp_path / "out", "auto")).id, timeout=300)
        lines = client.logs(job.id)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.progress.engine is not None and (job.progress.engine.engine, job.progress.engine.device) == ("dask", "gpu")
    assert "cudf-polars cannot run it" in job.progress.engine.reason
    assert any("engine: dask on gpu" in line for line in lines), lines
    assert not any("Polars ran on" in line for line in lines)  # the Polars task ran nothing
    shifted = pl.read_parquet(tmp_path / "out" / "*.parquet")
    assert shifted.height > 0 and (shifted["due"] > shifted["ts"]).all()


@pytest.mark.gpu
def test_a_hive_partitioned_source_runs_on_cudf_polars_not_dask_cudf(gpu_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    # cudf-polars refuses Polars' hive scan; Spillway scans each folder itself (jobs/polars_io.py), so the job stays on Polars.
    sales = pd.read_parquet(sample_data["sales"])
    sales.to_parquet(tmp_path / "hive", partition_cols=["region"], index=False)
    spec = {
        "name": "hive_on_gpu", "engine": "auto", "source": {"format": "parquet", "path": str(tmp_path / "hive")},
        "steps": [{"op": "groupby", "by": ["region"], "aggs": {"total": {"func": "sum", "column": "amount"}}}], "sink": {"path": str(tmp_path / "out")},
    }
    with gpu_service.client() as client:
        job = wait_terminal(client, client.submit(spec).id, timeout=300)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.progress.engine is not None and (job.progress.engine.engine, job.progress.engine.device) == ("polars", "gpu"), job.progress.engine
    got = pl.read_parquet(tmp_path / "out" / "*.parquet").sort("region")
    want = sales.groupby("region")["amount"].sum()
    assert got["region"].to_list() == list(want.index) and np.allclose(got["total"].to_numpy(), want.to_numpy())


# --- the frame cudf-polars is asked about scans one file a source ------------------------------

def _many_files(root: Path, hive: bool, **options: Any) -> dict[str, Any]:
    """Four parquet files with a decimal column; under ``hive``, folders ``k=1`` then ``k=x`` (the key is text only because of the last)."""
    for index, key in enumerate(["1", "1", "x", "x"]):
        folder = root / (f"k={key}" if hive else "")
        folder.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"id": [index * 10 + i for i in range(5)], "price": [1.5, 2.0, 3.25, 4.0, 5.5]},
                     schema={"id": pl.Int64, "price": pl.Decimal(12, 2)}).write_parquet(folder / f"part{index}.parquet")
    return {"format": "parquet", "path": str(root), **options}


@pytest.mark.parametrize("hive", [False, True], ids=["plain", "hive"])
def test_the_frame_asked_about_scans_the_first_file_with_the_types_all_files_give(tmp_path: Path, hive: bool) -> None:
    spec = JobSpec.model_validate({"name": "t", "source": _many_files(tmp_path / "in", hive), "steps": [{"op": "filter", "expr": "price > 2"}],
                                   "sink": {"path": str(tmp_path / "out")}})
    plan = plan_spec(spec)
    whole, probe = build_lazyframe(plan), build_lazyframe(plan, first_file_only=True)
    assert probe.collect_schema() == whole.collect_schema()
    assert whole.collect().height == 12
    assert sorted(probe.collect()["id"].to_list()) == [2, 3, 4]  # the first file's rows alone
    if hive:
        assert probe.collect_schema()["k"] == pl.String  # typed from every folder, not from k=1 alone


@pytest.mark.gpu
@pytest.mark.parametrize("expr", ["price > 2", "ts_shift > 0"], ids=["runs", "refused"])
def test_cudf_polars_is_asked_about_one_file_a_source_and_answers_as_for_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expr: str) -> None:
    """The submit's question (one file a source: the CPU test above) gets the answer the whole frame gets.

    cudf-polars 26.10 reads no footer while translating (the decimal literals' physical types are read when the scan
    runs), so what one file saves is measured, not asserted: bench/gpu_refusal_cost.py, 1 ms for 2300 files on an H100.
    """
    pytest.importorskip("cudf_polars")
    from spillway.jobs import gpu_support

    asked_about: list[pl.LazyFrame] = []
    refusal = gpu_support.gpu_refusal
    monkeypatch.setattr(gpu_support, "gpu_refusal", lambda frame: asked_about.append(frame) or refusal(frame))
    steps: list[dict[str, Any]] = [{"op": "filter", "expr": "price > 2"}]
    if expr != "price > 2":  # a month interval: Polars' offset_by, which cudf-polars 26.10 refuses
        steps = [{"op": "assign", "column": "ts", "expr": "timestamp('2020-01-31')"},
                 {"op": "assign", "column": "ts_shift", "expr": 'ts + interval(1, "month")'}, *steps]
    source = _many_files(tmp_path / "in", False, decimals="exact")
    spec = JobSpec.model_validate({"name": "t", "source": source, "steps": steps, "sink": {"path": str(tmp_path / "out")}})
    plan = plan_spec(spec)
    asked = plan_gpu_refusal(plan)
    assert asked == refusal(build_lazyframe(plan))
    assert (asked is None) == (expr == "price > 2"), asked
    assert asked_about or expr != "price > 2"  # a query Spillway trusts is asked of cudf-polars
    for probe in asked_about:  # one file's rows, not all four files'
        assert probe.select(pl.len()).collect().item() < build_lazyframe(plan).select(pl.len()).collect().item()
