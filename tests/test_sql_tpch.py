"""The official TPC-H SQL, as written, through the live service as SQL sources.

Each ``examples/tpch/sql/qNN.sql`` (the 22 queries with their validation parameters) becomes a
spec whose named sources are the eight tables of SF 0.1 data from tpchgen-cli and whose
``answer`` source is the query text; the job runs on the Polars engine and its committed parquet
must equal DuckDB's answer to the same text over the same files (tests/test_tpch.py's check:
same columns, same rows, in order, numbers within 1e-9 relative).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.tpch_examples import QUERIES, TABLES
from spillway.jobs.status import JobStatus
from spillway.service.client import SpillwayClient
from tests.conftest import wait_terminal
from tests.test_tpch import assert_same_answer, committed_output, referee, tpch_data  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.engines("polars")]


def sql_spec(name: str, data: Path, out: Path) -> dict[str, Any]:
    """The spec that runs ``name``'s official SQL over the tables under ``data``."""
    sources: dict[str, Any] = {table: {"format": "parquet", "path": str(data / table)} for table in TABLES}
    sources["answer"] = {"sql": QUERIES[name]}
    return {"name": f"tpch_sql_{name}", "sources": sources, "source": "answer", "sink": {"path": str(out)}, "engine": "auto"}


def test_all_22_queries_are_here() -> None:
    assert sorted(QUERIES) == [f"q{n:02d}" for n in range(1, 23)]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_tpch_sql_matches_duckdb(api: SpillwayClient, tpch_data: Path, referee: Any, tmp_path: Path, name: str) -> None:  # noqa: F811
    out = tmp_path / name
    accepted = api.submit(sql_spec(name, tpch_data, out))
    job = wait_terminal(api, accepted.id, timeout=240)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.progress.engine is not None and job.progress.engine.engine == "polars"
    expected = referee.execute(QUERIES[name]).df()
    assert len(expected) > 0
    assert_same_answer(committed_output(api, accepted.id, out), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_tpch_sql_on_the_gpu_matches_the_cpu(tpch_data: Path, tmp_path: Path, name: str) -> None:  # noqa: F811
    """Each query's LazyFrame, as the service builds it, on cudf-polars gives the CPU's answer; where
    cudf-polars cannot translate it, it says so (a SQL job is then a 422 at submit on a GPU cluster)."""
    pytest.importorskip("cudf_polars")
    from spillway.jobs.gpu_support import gpu_engine, gpu_refusal
    from spillway.jobs.polars_frame import build_lazyframe
    from spillway.jobs.spec import JobSpec
    from spillway.jobs.validate import plan_spec

    frame = build_lazyframe(plan_spec(JobSpec.model_validate(sql_spec(name, tpch_data, tmp_path / "out"))))
    refusal = gpu_refusal(frame)
    assert refusal is None, f"cudf-polars refuses {name}: {refusal}"
    assert_same_answer(frame.collect(engine=gpu_engine()).to_pandas(), frame.collect().to_pandas())


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_tpch_sql_plans_for_the_gpu_have_no_nested_loop_join_and_no_has_nulls(tpch_data: Path, tmp_path: Path, name: str) -> None:  # noqa: F811
    """The operators cudf-polars 26.10 refused in Q15 and Q16 on an H100 (2026-12-06) stay out of every query's plan
    for the GPU (tests/test_sql_hash_join_forms.py has the shapes), so the GPU test above can pass where no GPU is."""
    from spillway.jobs.polars_frame import build_lazyframe
    from spillway.jobs.spec import JobSpec
    from spillway.jobs.validate import plan_spec

    plan = build_lazyframe(plan_spec(JobSpec.model_validate(sql_spec(name, tpch_data, tmp_path / "out")))).explain()
    assert "NESTED LOOP JOIN" not in plan and "has_nulls" not in plan, plan
