"""Dask-engine progress named after the spec (issue 17 item 3): stages, overall counts, the ETA.

Graphs are planned by the real optimizer; the plugin runs on a real LocalCluster; jobs run
through the live service and the CLI.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import dask
import pytest
from dask._task_spec import DataNode
from dask.core import get_dependencies
from distributed import Client, LocalCluster

from bench.tpch_examples import QUERIES, load_spec, tpchgen, write_tables
from spillway.cluster.plan import plan_job
from spillway.cluster.progress import JobProgressPlugin
from spillway.jobs.read_progress import read_stage_name
from spillway.jobs.sink import SinkWriter
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import PROGRESS_TOPIC, JobProgress, JobStatus, StageProgress
from spillway.service.client import SpillwayClient
from tests.conftest import ROOT, ServiceProcess, wait_terminal


def spec_stage_names(spec: JobSpec) -> set[str]:
    """Every name a stage of ``spec`` may have: its sources' reads, its steps (and its derived sources'), its sink."""
    names = {read_stage_name(field) for field, _ in spec.source_fields()}
    names |= {f"{at}[{index}] {step.op}" for at, steps in spec.step_lists() for index, step in enumerate(steps)}
    return names | {f"write {spec.sink.format}"}


def sales_spec(data: dict[str, Path], out: Path, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "named_stages",
        "sources": {"products": {"format": "csv", "path": str(data["products"])}},
        "source": {"format": "parquet", "path": str(data["sales"])},
        "steps": [
            {"op": "filter", "expr": "amount > 0 and region != 'test'"},
            {"op": "join", "right": "products", "on": ["product_id"]},
            {"op": "groupby", "by": ["region", "category"], "aggs": {"revenue": {"func": "sum", "column": "amount"},
                                                                     "customers": {"func": "nunique", "column": "customer_id"}}},
            {"op": "sort", "by": ["revenue"], "descending": True},
        ],
        "sink": {"path": str(out)},
    }
    spec.update(overrides)
    return spec


SHAPES: dict[str, dict[str, Any]] = {
    "join, groupby, sort": {},
    "derived source, union, limit, csv": {
        "sources": {
            "big": {"from": "sales", "steps": [{"op": "filter", "expr": "amount > 50"}, {"op": "select", "columns": ["order_id", "amount"]}]},
            "sales": {"format": "parquet", "path": "{sales}"},
        },
        "source": "sales",
        "steps": [
            {"op": "select", "columns": ["order_id", "amount"]},
            {"op": "union", "sources": ["big"]},
            {"op": "sort", "by": ["amount", "order_id"]},
            {"op": "limit", "n": 10},
        ],
        "sink": {"path": "{out}", "format": "csv"},
    },
    "a derived source and a filtered source joined in": {
        "sources": {
            "products": {"format": "csv", "path": "{products}"},
            "kitchen": {"from": "products", "steps": [{"op": "filter", "expr": "category == 'kitchen'"}]},
            "stock": {"from": "sales", "steps": [{"op": "join", "right": "products", "on": ["product_id"]},
                                                 {"op": "assign", "column": "value", "expr": "amount * unit_cost"}]},
            "sales": {"format": "parquet", "path": "{sales}"},
        },
        "source": "stock",
        "steps": [
            {"op": "join", "right": "kitchen", "on": ["product_id"], "how": "semi"},
            {"op": "groupby", "by": ["region"], "aggs": {"value": {"func": "sum", "column": "value"}}},
        ],
    },
    "window, drop_duplicates": {
        "sources": {},
        "steps": [
            {"op": "window", "partition_by": ["region"], "order_by": [{"column": "amount"}], "columns": {"rank": {"func": "row_number"}}},
            {"op": "drop_duplicates", "subset": ["region", "rank"]},
        ],
    },
}


def shaped_spec(data: dict[str, Path], out: Path, shape: dict[str, Any]) -> JobSpec:
    filled = {"products": str(data["products"]), "sales": str(data["sales"]), "out": str(out)}

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return value.format(**filled) if value.startswith("{") and value.endswith("}") else value
        if isinstance(value, list):
            return [fill(v) for v in value]
        return {k: fill(v) for k, v in value.items()} if isinstance(value, dict) else value

    return JobSpec.model_validate(sales_spec(data, out, **fill(shape)))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_stage_of_a_planned_graph_is_named_after_the_spec(sample_data: dict[str, Path], tmp_path: Path, shape: str) -> None:
    check_stage_names(shaped_spec(sample_data, tmp_path / "out", SHAPES[shape]))


@pytest.fixture(scope="module")
def small_tpch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TPC-H SF 0.01 in 4 files a table: only planned here, so small is enough."""
    generator = tpchgen()
    if generator is None:
        pytest.skip("tpchgen-cli is not installed: pip install tpchgen-cli")
    root = tmp_path_factory.mktemp("tpch-sf0.01")
    write_tables(generator, root, 0.01, 4)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("query", QUERIES)
def test_every_tpch_stage_is_named_after_the_spec(small_tpch: Path, tmp_path: Path, query: str) -> None:
    # The 22 queries' graphs hold what the optimizer does most: projections and filters pushed into
    # reads, fusions over earlier fusions (q11 lost its nation read to the sink before), shuffles.
    check_stage_names(JobSpec.model_validate(load_spec(query, small_tpch, tmp_path / "out")))


def check_stage_names(spec: JobSpec) -> None:
    with dask.config.set(scheduler="sync"):
        plan = plan_job(spec, "pandas", SinkWriter(spec.sink, "names"))
    allowed = spec_stage_names(spec)
    assert set(plan.stages) <= allowed, set(plan.stages) - allowed
    assert set(plan.stage_of_key) == set(plan.graph)
    assert all(stages and set(stages) <= allowed for stages in plan.stage_of_key.values())
    # A task that needs no other reads files (or is a constant, e.g. an `in` list): it must count as
    # a read, not fall through to the sink.
    starts = [key for key, task in plan.graph.items() if not get_dependencies(plan.graph, key) and not isinstance(task, DataNode)]
    assert starts and all(any(s.startswith("read ") for s in plan.stage_of_key[key]) for key in starts), [plan.stage_of_key[k] for k in starts]
    shown = [stage.name for stage in plan.empty_progress().stages]
    # Every file source is read, the sink written, and the reads are listed first, the sink last.
    reads = [read_stage_name(field) for field, _ in spec.source_fields()]
    assert set(reads) <= set(shown) and shown[-1] == f"write {spec.sink.format}"
    assert shown[: len(reads)] == [name for name in plan.stages if name in reads]
    assert plan.stage_totals[shown[-1]] >= 2, "the sink counts the tasks that write partitions, not only the final one"
    # Every step shows, also one the optimizer folded into another (a sort into a top-k, a select into the read).
    assert allowed - set(shown) == set(), allowed - set(shown)
    progress = plan.empty_progress()
    assert progress.tasks_total == len(plan.graph) and progress.tasks_done == 0 and progress.note
    assert {s.name: s.total for s in progress.stages} == {name: n for name, n in plan.stage_totals.items()}


def test_fused_reads_and_steps_count_in_each_stage(sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = JobSpec.model_validate(sales_spec(sample_data, tmp_path / "out"))
    with dask.config.set(scheduler="sync"):
        plan = plan_job(spec, "pandas", SinkWriter(spec.sink, "fused"))
    # Dask fuses the parquet read with the filter and the join's probe into one task per partition.
    readers = [stages for stages in plan.stage_of_key.values() if "read source" in stages]
    assert readers and all({"steps[0] filter", "steps[1] join"} <= set(stages) for stages in readers)
    assert "steps[2] groupby" in plan.stages and plan.stage_totals["steps[2] groupby"] > len(readers)  # its tree and shuffle too


def test_a_step_folded_into_another_counts_its_tasks(sample_data: dict[str, Path], tmp_path: Path) -> None:
    def plan(steps: list[dict[str, Any]]) -> Any:
        spec = JobSpec.model_validate(sales_spec(sample_data, tmp_path / "out", sources={}, steps=steps))
        with dask.config.set(scheduler="sync"):
            return plan_job(spec, "pandas", SinkWriter(spec.sink, "folded"))

    def keys_of(planned: Any, stage: str) -> set[Any]:
        return {key for key, stages in planned.stage_of_key.items() if stage in stages}

    # A sort under a limit becomes a top-k: the top-k's tasks do the sort's work.
    top = plan([{"op": "sort", "by": ["amount"], "descending": True}, {"op": "limit", "n": 5}])
    assert keys_of(top, "steps[0] sort") and keys_of(top, "steps[0] sort") <= keys_of(top, "steps[1] limit")
    # A select becomes the read's column list: the read's tasks do it.
    picked = plan([{"op": "select", "columns": ["region", "amount"]}, {"op": "rename", "columns": {"amount": "a"}}])
    assert keys_of(picked, "steps[0] select") == keys_of(picked, "read source") != set()


def test_the_plugin_counts_a_fused_task_in_each_stage_and_once_overall() -> None:
    async def run() -> list[dict[str, Any]]:
        async with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, asynchronous=True, dashboard_address=":0") as cluster:
            async with Client(cluster, asynchronous=True) as client:
                graph = {("read", 0): (sum, [1, 2]), ("read", 1): (sum, [3, 4]), ("step", 0): (max, ("read", 0), ("read", 1))}
                stages = {("read", 0): ("read source",), ("read", 1): ("read source", "steps[0] filter"), ("step", 0): ("steps[0] filter",)}
                await client.register_plugin(JobProgressPlugin("j1", stages, [("step", 0)], ["read source", "steps[0] filter"], interval=0.05))
                futures = client.get(graph, [("step", 0)], sync=False)
                assert await client.gather(futures) == [7]

                def ended(dask_scheduler: Any) -> bool:
                    return "spillway-progress-j1" not in dask_scheduler.plugins

                while not await client.run_on_scheduler(ended):
                    await asyncio.sleep(0.05)
                return [message for _, message in await client.get_events(PROGRESS_TOPIC)]

    events = asyncio.run(run())
    final = events[-1]
    assert final["ended"] and final["stages"] == [["read source", 2, 2], ["steps[0] filter", 2, 2]]
    assert final["tasks"] == [3, 3] and final["elapsed_s"] >= 0
    progress = JobProgress(stages=[StageProgress(name=n, done=d, total=t) for n, d, t in final["stages"]],
                           tasks_done=final["tasks"][0], tasks_total=final["tasks"][1], elapsed_s=final["elapsed_s"])
    assert progress.done == progress.total == 3 and progress.eta_s == 0


def test_the_estimate_is_the_pace_so_far() -> None:
    half = JobProgress(stages=[StageProgress(name="read source", done=5, total=10)], elapsed_s=4.0)
    assert half.eta_s == 4.0
    tasks = JobProgress(stages=[StageProgress(name="read source", done=9, total=10)], tasks_done=2, tasks_total=10, elapsed_s=1.0)
    assert tasks.done == 2 and tasks.eta_s == 4.0  # distinct tasks, not the stages' sum
    assert JobProgress(stages=[StageProgress(name="read source", done=0, total=10)], elapsed_s=3.0).eta_s is None
    assert JobProgress(stages=[StageProgress(name="read source", done=3, total=10)]).eta_s is None  # no clock, no estimate


@pytest.mark.engines("dask")
def test_a_running_job_reports_spec_stages_that_only_grow(api: SpillwayClient, big_data: dict[str, Path], tmp_path: Path) -> None:
    spec = sales_spec(big_data, tmp_path / "out")
    job_id = api.submit(spec).id
    events = list(api.events(job_id))
    assert events[-1].kind == "end" and events[-1].state == JobStatus.SUCCEEDED, events[-1].error
    allowed = spec_stage_names(JobSpec.model_validate(spec))
    seen: dict[str, int] = {}
    overall = 0
    for event in events:
        progress = event.progress
        assert {s.name for s in progress.stages} <= allowed, [s.name for s in progress.stages]
        for stage in progress.stages:
            assert stage.done >= seen.get(stage.name, 0), f"{stage.name} went back"
            seen[stage.name] = stage.done
        assert progress.done >= overall and (not progress.stages or (progress.tasks_total or 0) > 0)
        overall = progress.done
        if 0 < progress.done < progress.total:
            assert progress.eta_s is not None and progress.eta_s >= 0
    assert {"read source", "read products", "steps[0] filter", "steps[1] join", "steps[2] groupby", "write parquet"} <= set(seen)
    final = api.get(job_id).progress
    assert [s.name for s in final.stages] == [s.name for s in events[-1].progress.stages]
    assert all(s.done == s.total > 0 for s in final.stages)
    assert final.tasks_done == final.tasks_total and final.eta_s == 0


def spillway(service: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spillway", *args, "--url", service.url], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


@pytest.mark.engines("dask")
def test_cli_status_and_wait_show_spec_stages_and_overall(api: SpillwayClient, service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    job_id = api.submit(sales_spec(sample_data, tmp_path / "out")).id
    waited = spillway(service, "wait", job_id)
    assert waited.returncode == 0, waited.stderr
    assert "overall (tasks)" in waited.stdout and "steps[2] groupby" in waited.stdout
    status = spillway(service, "status", job_id)
    assert status.returncode == 0, status.stderr
    job = api.get(job_id)
    lines = status.stdout.splitlines()
    for stage in job.progress.stages:
        assert any(line.split() == [*stage.name.split(), f"{stage.done}/{stage.total}"] for line in lines), stage.name
    assert any(line.split() == ["overall", f"{job.progress.tasks_done}/{job.progress.tasks_total}", "tasks"] for line in lines)
    assert "tree" not in status.stdout and "fused" not in status.stdout


@pytest.mark.engines("polars")
def test_cli_result_says_string_and_one_file(api: SpillwayClient, service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = {"name": "one_file", "source": {"format": "parquet", "path": str(sample_data["sales"])},
            "steps": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}}}], "sink": {"path": str(tmp_path / "out")}}
    job = wait_terminal(api, api.submit(spec).id)
    assert job.result is not None and len(job.result.files) == 1
    assert {c.name: c.type for c in job.result.columns}["region"] == "large_string"  # what Polars writes, kept in the manifest
    shown = spillway(service, "result", job.id)
    assert shown.returncode == 0, shown.stderr
    assert "region: string" in shown.stdout and "large_string" not in shown.stdout
    assert "1 file " in shown.stdout and "1 files" not in shown.stdout


def test_stages_in_different_units_add_up_as_whole_stages() -> None:
    # A Polars job: a read counting MiB beside 1-of-1 steps; 150 MiB and one step do not add up.
    progress = JobProgress(stages=[StageProgress(name="read source", done=150, total=150, unit="MiB"),
                                   StageProgress(name="steps: filter", done=0, total=1), StageProgress(name="write parquet", done=0, total=1)],
                           elapsed_s=2.0)
    assert progress.counts_stages and (progress.done, progress.total) == (1, 3) and progress.eta_s == 4.0
    same_unit = JobProgress(stages=[StageProgress(name="steps: filter", done=1, total=1), StageProgress(name="write parquet", done=0, total=1)])
    assert not same_unit.counts_stages and (same_unit.done, same_unit.total) == (1, 2)
