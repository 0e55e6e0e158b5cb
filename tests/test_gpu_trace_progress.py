"""Live GPU progress from cudf-polars' trace events (jobs/gpu_trace_progress.py).

The counting, the plan's shape and the stage rows are checked here on the CPU with events of
the shape cudf-polars 26.10 logs (read off an H200 by bench/gpu_trace_probe.py); the route from
structlog in a fresh process with the traces' environment variable set; and, marked ``gpu``,
a job through the service on the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from spillway.jobs.gpu_trace_progress import NODE_UNIT, TRACE_NOTE, TRACES_ENV, NodeCounts, PlanNodeCounter, PlanShape, plan_shape, stage_rows
from spillway.jobs.status import JobStatus
from spillway.service.launcher import ServiceProcess
from tests.conftest import wait_terminal
from tests.test_gpu_support import gpu_service  # noqa: F401 - the GPU service fixture

ROOT = Path(__file__).resolve().parents[1]


def test_the_counter_counts_evaluated_nodes_and_scans_and_ignores_other_events() -> None:
    counter = PlanNodeCounter()
    for node in ("Scan", "HStack", "Filter", "Scan", "Join"):
        counter.record({"event": "Execute IR", "type": node, "scope": "evaluate_ir_node"})
    counter.record({"event": "IO Task", "ir_type": "SplitScan"})
    counter.record({"event": "something else"})
    assert counter.counts() == NodeCounts(nodes=5, scans=2, events=7)  # every event moves the query; only nodes are counted
    counter.record({"event": "Query Plan", "plan": {"roots": ["1"], "nodes": {"1": {}, "2": {}, "3": {}}}})
    counter.record({"event": "Streaming Actor"})
    assert counter.counts() == NodeCounts(nodes=5, scans=2, plan_nodes=3, actors_done=1, events=9)
    counter.reset()
    assert counter.counts() == NodeCounts(nodes=0, scans=0)


def test_the_plan_shape_counts_distinct_nodes_and_scans(tmp_path: Path) -> None:
    pl.DataFrame({"k": [1, 2, 3], "v": [1.0, 2.0, 3.0]}).write_parquet(tmp_path / "a.parquet")
    pl.DataFrame({"k": [1, 2], "w": ["x", "y"]}).write_parquet(tmp_path / "b.parquet")
    a, b = pl.scan_parquet(tmp_path / "a.parquet"), pl.scan_parquet(tmp_path / "b.parquet")
    single = plan_shape(a.filter(pl.col("v") > 1))
    assert single.scans == 1 and single.nodes >= 1
    joined = plan_shape(a.join(b, on="k").group_by("w").agg(pl.col("v").sum()))
    assert joined.scans == 2 and joined.nodes > joined.scans


def test_stage_rows_complete_reads_after_every_scan_count_nodes_in_the_steps_and_are_never_done_before_the_end() -> None:
    plans = [("read source", 1), ("read sources.b", 1), ("steps: join → groupby", None), ("write parquet", None)]
    shape = PlanShape(nodes=6, scans=2)
    early = stage_rows(plans, shape, NodeCounts(nodes=1, scans=1), finished=False)
    assert early == [("read source", 0, 1, None), ("read sources.b", 0, 1, None), ("steps: join → groupby", 1, 6, NODE_UNIT), ("write parquet", 0, 1, None)]
    scanned = stage_rows(plans, shape, NodeCounts(nodes=3, scans=2), finished=False)
    assert [row[1] for row in scanned] == [1, 1, 3, 0]
    # cudf-polars may evaluate a node more than the Polars plan shows: the count stops short of the total until the end.
    over = stage_rows(plans, shape, NodeCounts(nodes=9, scans=2), finished=False)
    assert over[2] == ("steps: join → groupby", 5, 6, NODE_UNIT) and over[3][1] == 0
    done = stage_rows(plans, shape, NodeCounts(nodes=9, scans=2), finished=True)
    assert done == [("read source", 1, 1, None), ("read sources.b", 1, 1, None), ("steps: join → groupby", 6, 6, NODE_UNIT), ("write parquet", 1, 1, None)]


def test_the_streaming_executors_plan_and_actors_count_when_it_logs_them() -> None:
    plans = [("read source", 1), ("write parquet", None)]  # no steps: the last source's stage counts the nodes
    rows = stage_rows(plans, PlanShape(nodes=4, scans=1), NodeCounts(nodes=20, scans=3, plan_nodes=7, actors_done=2), finished=False)
    assert rows == [("read source", 2, 7, NODE_UNIT), ("write parquet", 0, 1, None)]


def _in_fresh_process(code: str, traces: str) -> dict[str, object]:
    env = {**os.environ, TRACES_ENV: traces, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert done.stderr.strip() == "", done.stderr  # the events are counted and dropped, never printed
    return json.loads(done.stdout.strip().splitlines()[-1])


ROUTE = """
import json, structlog
from spillway.jobs import gpu_trace_progress as t
installed = t.install()
log = structlog.get_logger()  # as cudf-polars gets its logger
log.info("Execute IR", type="Scan", scope="evaluate_ir_node")
log.info("Execute IR", type="GroupBy", scope="evaluate_ir_node")
c = t.COUNTER.counts()
print(json.dumps({"installed": installed, "again": t.install(), "nodes": c.nodes, "scans": c.scans}))
"""


def test_install_routes_cudf_polars_structlog_events_to_the_counter_when_traces_are_on() -> None:
    assert _in_fresh_process(ROUTE, "1") == {"installed": True, "again": True, "nodes": 2, "scans": 1}


def test_install_does_nothing_when_traces_are_off() -> None:
    off = _in_fresh_process("import json\nfrom jobs import gpu_trace_progress as t\nprint(json.dumps({'installed': t.install()}))", "0")
    assert off == {"installed": False}


@pytest.mark.gpu
def test_a_gpu_job_reports_the_plan_nodes_cudf_polars_evaluated(gpu_service: ServiceProcess,  # noqa: F811
    big_data: dict[str, Path], tmp_path: Path) -> None:
    spec = {
        "name": "gpu_nodes", "engine": "polars", "source": {"format": "parquet", "path": str(big_data["sales"] / "*.parquet")},
        "steps": [{"op": "filter", "expr": "amount > 0"}, {"op": "groupby", "by": ["region"], "aggs": {"total": {"func": "sum", "column": "amount"}}},
                  {"op": "sort", "by": ["region"]}],
        "sink": {"path": str(tmp_path / "out")},
    }
    with gpu_service.client() as client:
        job_id = client.submit(spec).id
        events = list(client.events(job_id))
        job = wait_terminal(client, job_id, timeout=300)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.progress.note == TRACE_NOTE
    steps = next(stage for stage in job.progress.stages if stage.name.startswith("steps"))
    assert steps.unit == NODE_UNIT and steps.total >= 3 and steps.done == steps.total
    # Events before the task's first heartbeat carry the stages as planned (or none yet).
    counts = [stage.done for e in events for stage in e.progress.stages if stage.name.startswith("steps") and stage.unit == NODE_UNIT]
    assert counts and counts == sorted(counts) and counts[-1] == steps.total, counts
