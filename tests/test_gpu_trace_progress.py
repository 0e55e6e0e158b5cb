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

from spillway.jobs.gpu_trace_progress import CHUNK_UNIT, NODE_UNIT, TRACE_NOTE, TRACES_ENV, NodeCounts, PlanNodeCounter, PlanShape, plan_shape, stage_rows
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
    counter.record({"event": "IO Task", "ir_type": "DataFrameScan"})  # an in-memory frame's slice: no file read
    counter.record({"event": "something else"})
    # Every event moves the query; only nodes and file chunks are counted.
    assert counter.counts() == NodeCounts(nodes=5, scans=2, events=8, chunks_read=1)
    counter.record({"event": "Query Plan", "plan": {"roots": ["1"], "nodes": {"1": {}, "2": {}, "3": {}}}})
    counter.record({"event": "Streaming Actor"})
    assert counter.counts() == NodeCounts(nodes=5, scans=2, plan_nodes=3, actors_done=1, events=10, plan_scans=0, scan_chunks=0, chunks_read=1)
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


def _node(kind: str, **properties: object) -> dict[str, object]:
    """A node of the plan cudf-polars logs (``SerializablePlan``, as a dict)."""
    return {"id": "0", "children": [], "schema": {}, "properties": properties, "type": kind}


STREAMING_PLAN = {"roots": ["1"], "partition_info": None, "nodes": {
    "1": _node("GroupBy"), "2": _node("Select"),
    "3": _node("StreamingScan", typ="parquet", scan_count=4, prefix="/data/sales/part.", predicate=None),
}}


def test_on_the_streaming_executor_the_counter_counts_the_plans_file_chunks_and_the_scans_that_finished() -> None:
    counter = PlanNodeCounter()
    counter.record({"event": "Query Plan", "plan": STREAMING_PLAN})
    for _ in range(3):
        counter.record({"event": "IO Task", "ir_type": "SplitScan", "actor_ir_type": "StreamingScan"})
    counter.record({"event": "Streaming Actor", "actor_ir_type": "Select"})
    assert counter.counts() == NodeCounts(nodes=0, scans=0, plan_nodes=3, actors_done=1, events=5, plan_scans=1, scan_chunks=4,
                                          chunks_read=3, scans_finished=0)
    counter.record({"event": "IO Task", "ir_type": "FusedScan", "actor_ir_type": "StreamingScan"})
    counter.record({"event": "Streaming Actor", "actor_ir_type": "StreamingScan"})
    counts = counter.counts()
    assert (counts.chunks_read, counts.scans_finished, counts.actors_done) == (4, 1, 2)
    # A plan whose scans' chunks are not all known: no chunk total rather than a wrong one.
    counter.record({"event": "Query Plan", "plan": {"nodes": {"1": _node("StreamingScan", scan_count=2), "2": _node("StreamingScan")}}})
    assert (counter.counts().plan_scans, counter.counts().scan_chunks) == (2, None)


def test_a_jobs_only_source_counts_its_chunks_read_and_is_full_only_once_its_scan_finished() -> None:
    plans = [("read source", 1), ("steps: groupby", None), ("write parquet", None)]
    shape = PlanShape(nodes=3, scans=1)
    reading = NodeCounts(nodes=0, scans=0, plan_nodes=3, actors_done=0, plan_scans=1, scan_chunks=4, chunks_read=2)
    assert stage_rows(plans, shape, reading, finished=False) == [
        ("read source", 2, 4, CHUNK_UNIT), ("steps: groupby", 0, 3, NODE_UNIT), ("write parquet", 0, 1, None)]
    # Every chunk of rank 0's share read, but its scan not yet finished (another rank may still read): one short.
    read_all = NodeCounts(nodes=0, scans=0, plan_nodes=3, actors_done=0, plan_scans=1, scan_chunks=4, chunks_read=4)
    assert stage_rows(plans, shape, read_all, finished=False)[0] == ("read source", 3, 4, CHUNK_UNIT)
    scanned = NodeCounts(nodes=0, scans=0, plan_nodes=3, actors_done=1, plan_scans=1, scan_chunks=4, chunks_read=3, scans_finished=1)
    assert stage_rows(plans, shape, scanned, finished=False)[0] == ("read source", 4, 4, CHUNK_UNIT)
    assert stage_rows(plans, shape, reading, finished=True)[0] == ("read source", 4, 4, CHUNK_UNIT)
    # With no steps the read stage still counts chunks (the plan's nodes are then shown nowhere).
    alone = stage_rows([("read source", 1), ("write parquet", None)], shape, reading, finished=False)
    assert alone == [("read source", 2, 4, CHUNK_UNIT), ("write parquet", 0, 1, None)]


def test_with_two_scans_no_source_counts_chunks_that_may_be_another_sources_and_reads_end_with_the_scans() -> None:
    # One read stage but two scans in the plan (a join's right side reads files too): chunks could not be told apart.
    plans = [("read source", 1), ("steps: join → groupby", None), ("write parquet", None)]
    counts = NodeCounts(nodes=0, scans=0, plan_nodes=6, actors_done=2, plan_scans=2, scan_chunks=8, chunks_read=8, scans_finished=1)
    assert stage_rows(plans, PlanShape(nodes=6, scans=2), counts, finished=False)[0] == ("read source", 0, 1, None)
    both = NodeCounts(nodes=0, scans=0, plan_nodes=6, actors_done=3, plan_scans=2, scan_chunks=8, chunks_read=8, scans_finished=2)
    assert stage_rows(plans, PlanShape(nodes=6, scans=2), both, finished=False)[0] == ("read source", 1, 1, None)


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


ACTOR_CONTEXT = """
import json, structlog
from spillway.jobs import gpu_trace_progress as t
t.install()
log = structlog.get_logger()
with structlog.contextvars.bound_contextvars(actor_ir_id=3, actor_ir_type="StreamingScan"):  # as cudf-polars binds an actor's node
    log.info("IO Task", ir_type="SplitScan", scope="io_task")
    log.info("Streaming Actor", scope="actor", chunk_count=1)
log.info("Streaming Actor", scope="actor", chunk_count=1)  # an actor of no scan
c = t.COUNTER.counts()
print(json.dumps({"chunks": c.chunks_read, "scans": c.scans_finished, "actors": c.actors_done}))
"""


def test_install_gives_the_counter_the_node_type_cudf_polars_binds_around_each_actor() -> None:
    assert _in_fresh_process(ACTOR_CONTEXT, "1") == {"chunks": 1, "scans": 1, "actors": 2}


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


STREAMING_QUERY = """
import json, sys
import polars as pl
from spillway.jobs import gpu_trace_progress as t
t.install()
frame = pl.scan_parquet(sys.argv[1]).group_by("k").agg(pl.col("v").sum())
rows = frame.collect(engine=pl.GPUEngine(executor="streaming", raise_on_fail=True)).height
c = t.COUNTER.counts()
print(json.dumps({"rows": rows, "plan_scans": c.plan_scans, "scan_chunks": c.scan_chunks, "chunks_read": c.chunks_read,
                  "scans_finished": c.scans_finished, "plan_nodes": c.plan_nodes, "actors_done": c.actors_done}))
"""


@pytest.mark.gpu
def test_cudf_polars_streaming_executor_logs_the_scans_chunks_the_counter_reads(tmp_path: Path) -> None:
    """The event and field names the chunk counts rest on, on the real cudf-polars: its plan's scan, each chunk read, the scan's end."""
    pytest.importorskip("cudf_polars")
    for part in range(6):
        pl.DataFrame({"k": [part % 3] * 1000, "v": list(range(1000))}).write_parquet(tmp_path / f"part{part}.parquet")
    env = {**os.environ, TRACES_ENV: "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", STREAMING_QUERY, str(tmp_path / "*.parquet")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts["rows"] == 3
    assert counts["plan_scans"] == 1 and counts["scan_chunks"] >= 1, counts
    assert counts["chunks_read"] == counts["scan_chunks"] and counts["scans_finished"] == 1, counts
    assert counts["plan_nodes"] >= 2 and counts["actors_done"] >= 1, counts
