"""Planning is bounded and never blocks others (issue 16 item 8).

Bounds checked before anything is built: total steps across every list, partitions estimated
from file sizes and blocksize. Then a planning time limit, and planning in a thread that
cancel and shutdown interrupt, while other jobs plan and run beside it.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from spillway.jobs.spec import MAX_TOTAL_STEPS, JobSpec
from tests.conftest import ServiceProcess, start_service, wait_for


def chained(sales: Path, sink: Path, *, lists: int, steps: int) -> dict[str, Any]:
    """``lists`` derived sources of ``steps`` assigns each, chained one after another."""
    sources: dict[str, Any] = {"raw": {"format": "parquet", "path": str(sales)}}
    for j in range(lists):
        sources[f"d{j}"] = {"from": "raw" if j == 0 else f"d{j - 1}", "steps": [{"op": "assign", "column": "x", "expr": f"amount + {i}"} for i in range(steps)]}
    return {"sources": sources, "source": f"d{lists - 1}", "sink": {"path": str(sink)}}


def slow_to_plan(sales: Path, sink: Path) -> dict[str, Any]:
    """A Dask-engine job whose graph takes seconds to build (tens on two busy cores): eight derived
    sources of 50 assigns each, each followed by a filter, unioned; dask-expr's optimiser is
    superlinear in such chains. (Assigns alone no longer are: a run of them is one assign.)"""
    sources: dict[str, Any] = {"raw": {"format": "parquet", "path": str(sales)}}
    for j in range(8):
        steps = [[{"op": "assign", "column": f"x{i % 3}", "expr": f"amount + {i + j}"}, {"op": "filter", "expr": f"x{i % 3} > {-1000 - i}"}]
                 for i in range(50)]
        sources[f"d{j}"] = {"from": "raw", "steps": [step for pair in steps for step in pair]}
    return {"sources": sources, "source": "d0", "steps": [{"op": "union", "sources": [f"d{j}" for j in range(1, 8)]}],
            "sink": {"path": str(sink)}, "engine": "dask"}


def trivial(sales: Path, sink: Path, engine: str = "dask") -> dict[str, Any]:
    return {"source": {"format": "parquet", "path": str(sales)}, "steps": [{"op": "filter", "expr": "amount > 0"}], "sink": {"path": str(sink)}, "engine": engine}


def test_total_steps_are_capped_across_every_list(tmp_path: Path) -> None:
    # 63 lists of 200 steps (each at the per-list cap) are 12,600 steps: they took 11 s to submit.
    body = chained(tmp_path / "sales", tmp_path / "out", lists=63, steps=200)
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(body)
    (error,) = refused.value.errors()
    assert error["type"] == "too_many_steps"
    assert f"over the limit of {MAX_TOTAL_STEPS}" in error["msg"]
    # Named where the total first passes the cap: the fifth list of 200 brings it to 1,000.
    assert error["loc"] == ("sources", f"d{MAX_TOTAL_STEPS // 200}", "steps")
    JobSpec.model_validate(chained(tmp_path / "sales", tmp_path / "out", lists=5, steps=200))  # 1,000: at the cap


def test_too_many_steps_is_a_422_naming_the_list(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    body = chained(sample_data["sales"], tmp_path / "out", lists=63, steps=200)
    response = httpx.post(f"{service.url}/jobs", json=body, timeout=60)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "sources.d5.steps" and "steps in all" in error["message"]


@pytest.fixture(scope="module")
def busy_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service with a short cancel wait, a small partition limit and a planning limit, two jobs at once."""
    proc = start_service(
        tmp_path_factory.mktemp("planning"),
        extra_env={
            "SPILLWAY_MAX_CONCURRENT_JOBS": "2",
            "SPILLWAY_CANCEL_TIMEOUT_S": "3",
            "SPILLWAY_MAX_PARTITIONS": "500",
            "SPILLWAY_MAX_PLANNING_S": "300",
        },
    )
    yield proc
    proc.stop()


def submit(service: ServiceProcess, body: dict[str, Any]) -> str:
    response = httpx.post(f"{service.url}/jobs", json=body, timeout=60)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def job(service: ServiceProcess, job_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{service.url}/jobs/{job_id}", timeout=30).json())


def terminal(service: ServiceProcess, job_id: str, timeout: float = 120) -> dict[str, Any]:
    return dict(wait_for(lambda: (j := job(service, job_id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and j, timeout=timeout,
                         what=f"job {job_id} to finish"))


def test_too_many_partitions_is_a_422_at_submit_naming_the_blocksize(busy_service: ServiceProcess, tmp_path: Path) -> None:
    # Estimated from the file's size and blocksize before the job is queued (it used to fail once it ran).
    csv = tmp_path / "t.csv"
    rows = 40_000
    pd.DataFrame({"a": np.arange(rows), "s": ["x" * 20] * rows}).to_csv(csv, index=False)  # about 1.1 MB
    body = {"source": {"format": "csv", "path": str(csv), "blocksize": "1KiB"}, "sink": {"path": str(tmp_path / "out")}, "engine": "dask"}
    before = httpx.get(f"{busy_service.url}/jobs", timeout=30).json()["total"]
    for route in ("/jobs", "/jobs:validate"):
        response = httpx.post(f"{busy_service.url}{route}", json=body, timeout=60)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "too_many_partitions" and error["field"] == "source.blocksize"
        assert "estimated from the files' sizes" in error["message"] and "over the limit of 500" in error["message"]
    assert httpx.get(f"{busy_service.url}/jobs", timeout=30).json()["total"] == before, "no job was stored"
    # The limit is the Dask engine's: Polars does not split a source by blocksize, and runs the same spec.
    finished = terminal(busy_service, submit(busy_service, {**body, "engine": "polars"}))
    assert finished["state"] == "SUCCEEDED", finished["error"]


def test_one_jobs_planning_does_not_stop_the_next_and_cancel_is_prompt(
    busy_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path
) -> None:
    slow = submit(busy_service, slow_to_plan(sample_data["sales"], tmp_path / "slow"))
    wait_for(lambda: job(busy_service, slow)["state"] == "RUNNING", what="the slow job to start planning")
    # Both engines: a Dask-engine job builds its graph beside the other's, a Polars job needs none.
    for engine in ("dask", "polars"):
        quick = terminal(busy_service, submit(busy_service, trivial(sample_data["sales"], tmp_path / f"quick-{engine}", engine)))
        assert quick["state"] == "SUCCEEDED", quick
        planning = job(busy_service, slow)
        # Still planning: a job's stages are known (and saved) only once its graph is built.
        assert planning["state"] == "RUNNING" and planning["progress"]["stages"] == [], "the slow job finished planning first"
    # The cancel waits at most SPILLWAY_CANCEL_TIMEOUT_S (3 s) for the job to stop; planning is interrupted well within it.
    response = httpx.post(f"{busy_service.url}/jobs/{slow}/cancel", timeout=60)
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "CANCELLED"
    logs = httpx.get(f"{busy_service.url}/jobs/{slow}/logs", timeout=30).json()["lines"]
    assert any("planning interrupted: cancelled by user" in line for line in logs), logs
    assert not any("graph:" in line for line in logs), "the cancel waited for the graph to be built"


def test_planning_past_its_limit_fails_the_job(sample_data: dict[str, Path], tmp_path: Path) -> None:
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_MAX_PLANNING_S": "2"})
    try:
        finished = terminal(service, submit(service, slow_to_plan(sample_data["sales"], tmp_path / "slow")))
        assert finished["state"] == "FAILED"
        assert finished["error"]["code"] == "planning_timed_out"
        assert "SPILLWAY_MAX_PLANNING_S" in finished["error"]["message"]
        # The service goes on: the next job plans and runs.
        assert terminal(service, submit(service, trivial(sample_data["sales"], tmp_path / "next")))["state"] == "SUCCEEDED"
    finally:
        service.stop()


def test_sigint_during_planning_stops_the_service(sample_data: dict[str, Path], tmp_path: Path) -> None:
    service = start_service(tmp_path / "svc")
    try:
        slow = submit(service, slow_to_plan(sample_data["sales"], tmp_path / "slow"))
        wait_for(lambda: job(service, slow)["state"] == "RUNNING", what="the slow job to start planning")
    finally:
        # stop() kills the process after its timeout: waiting for the planning (tens of seconds) would show as -SIGKILL.
        code = service.stop(signal.SIGINT, timeout=15)
    assert code == 0, service.log()[-3000:]
    restarted = start_service(tmp_path / "svc")
    try:
        finished = job(restarted, slow)
    finally:
        restarted.stop()
    assert finished["state"] == "FAILED" and finished["error"]["code"] == "interrupted"


def test_graphs_build_in_several_threads_at_once(sample_data: dict[str, Path], tmp_path: Path) -> None:
    """Graphs of every shape built in four threads at once give the graphs built one at a time, and
    leave dask's config as it was (each build sets the backend and the shuffle method)."""
    import threading

    import dask

    from spillway.cluster.plan import plan_job
    from spillway.jobs.sink import SinkWriter
    from spillway.jobs.validate import plan_spec

    sales = {"format": "parquet", "path": str(sample_data["sales"])}
    products = {"format": "csv", "path": str(sample_data["products"])}
    steps: dict[str, list[dict[str, Any]]] = {
        "sorted_groups": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}, "q": {"func": "median", "column": "quantity"}}},
                          {"op": "sort", "by": ["n"]}],
        "joined": [{"op": "join", "right": products, "on": ["product_id"]}, {"op": "filter", "expr": "unit_cost > 10"}],
        "windowed": [{"op": "window", "partition_by": ["region"], "order_by": [{"column": "amount"}], "columns": {"r": {"func": "row_number"}}}],
        "top": [{"op": "top_k", "by": ["region"], "order": [{"column": "amount", "descending": True}], "k": 3}, {"op": "drop_duplicates"}],
        "sorted": [{"op": "assign", "column": "x", "expr": "amount * quantity"}, {"op": "sort", "by": ["x"]}],
    }
    specs = {name: JobSpec.model_validate({"source": sales, "steps": s, "sink": {"path": str(tmp_path / name)}, "engine": "dask"})
             for name, s in steps.items()}
    plans = {name: plan_spec(spec) for name, spec in specs.items()}
    before = dask.config.get("dataframe.shuffle.method", None), dask.config.get("dataframe.backend", None)

    def build(name: str, run: str) -> int:
        return len(plan_job(specs[name], "pandas", SinkWriter(specs[name].sink, run), None, plans[name]).graph)

    with dask.config.set(scheduler="sync"):  # a sort's boundaries are computed while planning
        alone = {name: build(name, f"alone-{name}") for name in specs}
        together: list[tuple[str, int]] = []
        errors: list[BaseException] = []

        def worker(offset: int) -> None:
            names = list(specs)
            try:
                for name in names[offset:] + names[:offset]:
                    together.append((name, build(name, f"t{offset}-{name}")))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "graph building deadlocked"
    assert errors == []
    assert len(together) == 4 * len(specs) and all(size == alone[name] for name, size in together)
    assert (dask.config.get("dataframe.shuffle.method", None), dask.config.get("dataframe.backend", None)) == before


@pytest.mark.parametrize(
    ("format", "blocksize"),
    [("csv", None), ("csv", "4KiB"), ("csv", "64KiB"), ("jsonl", "4KiB"), ("parquet", None), ("parquet", "1KiB"), ("parquet", "64MiB")],
)
def test_the_estimate_is_the_partitions_dask_reads(tmp_path: Path, format: str, blocksize: str | None) -> None:
    """The estimate, from sizes (and parquet row groups) alone, against the partitions dask makes of the same files."""
    import dask

    from spillway.jobs.dask_read import estimated_partitions, read_source
    from spillway.jobs.spec import SourceSpec

    for index in range(3):
        frame = pd.DataFrame({"a": np.arange(30_000) + index, "s": ["x" * 8] * 30_000})
        if format == "csv":
            frame.to_csv(tmp_path / f"{index}.csv", index=False)
        elif format == "jsonl":
            frame.to_json(tmp_path / f"{index}.jsonl", orient="records", lines=True)
        else:
            frame.to_parquet(tmp_path / f"{index}.parquet", row_group_size=10_000)
    source = SourceSpec(format=format, path=str(tmp_path / f"*.{format}"), blocksize=blocksize)  # type: ignore[arg-type]
    with dask.config.set({"dataframe.backend": "pandas"}):
        assert estimated_partitions(source) == read_source(source).npartitions


def test_a_pipeline_run_over_the_partition_estimate_fails_before_its_job_is_stored(busy_service: ServiceProcess, tmp_path: Path) -> None:
    # A scheduled or triggered run is checked as POST /jobs is: the estimate refuses it, and no job is made.
    csv = tmp_path / "t.csv"
    pd.DataFrame({"a": np.arange(40_000), "s": ["x" * 20] * 40_000}).to_csv(csv, index=False)
    spec = {"source": {"format": "csv", "path": str(csv), "blocksize": "1KiB"}, "sink": {"path": str(tmp_path / "out_{{ ds_nodash }}")}, "engine": "dask"}
    created = httpx.post(f"{busy_service.url}/pipelines", json={"name": "too_split", "spec": spec, "schedule": "@yearly"}, timeout=30)
    assert created.status_code == 201, created.text
    before = httpx.get(f"{busy_service.url}/jobs", timeout=30).json()["total"]
    run = httpx.post(f"{busy_service.url}/pipelines/too_split/runs", json={"logical_date": "2026-11-30"}, timeout=30)
    assert run.status_code == 201, run.text

    def ended() -> dict[str, Any] | None:
        items = httpx.get(f"{busy_service.url}/pipelines/too_split/runs", timeout=30).json()["items"]
        item = next(item for item in items if item["logical_date"].startswith("2026-11-30"))
        return item if item["state"] in ("SUCCEEDED", "FAILED") else None

    item = wait_for(ended, timeout=60, what="the run to end")
    assert item["state"] == "FAILED" and item["reason"].startswith("too_many_partitions:"), item
    assert "estimated from the files' sizes" in item["reason"] and "over the limit of 500" in item["reason"]
    assert [attempt["job_id"] for attempt in item["attempts"]] == [None], "no job was stored"
    assert httpx.get(f"{busy_service.url}/jobs", timeout=30).json()["total"] == before
