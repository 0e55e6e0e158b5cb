"""A multi-GPU job's live progress: its ranks publish their trace counts to a file, read through their nannies.

The ranks hold their workers' event loops for the whole query, so nothing can be asked of the
workers themselves; here two CPU workers of a real LocalCluster publish counts as ranks do, and
the service's follower (cluster/rank_progress.py) reads them through the nannies. The GPU run of
it is tests/test_gpu_multi.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from distributed import Client, LocalCluster

from spillway.cluster.rank_progress import RankFollower
from spillway.jobs.gpu_multi import start_rank_counts
from spillway.jobs import gpu_trace_progress
from spillway.jobs.gpu_trace_progress import COUNTS_FILE, NODE_UNIT, PlanNodeCounter, slowest_rank
from spillway.jobs.status import StageProgress


def test_a_counter_publishes_its_counts_at_once_and_then_at_most_every_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / COUNTS_FILE
    counter = PlanNodeCounter()
    counter.reset(publish_to=path)
    nothing = {"nodes": 0, "scans": 0, "plan_nodes": None, "actors_done": 0, "events": 0, "query": None,
               "plan_scans": None, "scan_chunks": None, "chunks_read": 0, "scans_finished": 0}
    assert json.loads(path.read_text()) == nothing
    counter.record({"event": "Execute IR", "type": "Scan"})
    assert json.loads(path.read_text())["events"] == 0  # within the interval: not written again
    monkeypatch.setattr(gpu_trace_progress, "PUBLISH_EVERY_S", 0.0)
    counter.record({"event": "Read Chunk"})  # an event it does not count as a node still moves the query
    assert json.loads(path.read_text()) == {**nothing, "nodes": 1, "scans": 1, "events": 2}
    counter.reset()  # the next query on this worker, on one GPU: nothing published any more
    counter.record({"event": "Execute IR", "type": "Scan"})
    assert json.loads(path.read_text())["events"] == 2


def test_the_slowest_rank_sets_each_figure_and_events_add_up() -> None:
    counts = slowest_rank([
        {"nodes": 7, "scans": 2, "plan_nodes": 9, "actors_done": 4, "events": 100},
        {"nodes": 5, "scans": 2, "plan_nodes": 9, "actors_done": 6, "events": 50},
    ])
    assert (counts.nodes, counts.scans, counts.plan_nodes, counts.actors_done, counts.events) == (5, 2, 9, 4, 150)
    assert slowest_rank([{"nodes": 1, "scans": 0, "plan_nodes": 9, "actors_done": 0, "events": 1},
                         {"nodes": 1, "scans": 0, "plan_nodes": 8, "actors_done": 0, "events": 1}]).plan_nodes is None


def test_the_plan_comes_from_the_rank_that_logged_it_and_chunks_from_the_slowest() -> None:
    """cudf-polars logs the plan on rank 0 only: the other ranks' counts have none, which is no disagreement.

    Seen on an H200 (a 432 s query across two ranks): the plan was dropped as "different", so the steps stage
    counted per-chunk node events against the Polars plan's 5 nodes, showing 4 of 5 for 391 s."""
    counts = slowest_rank([
        {"nodes": 40, "scans": 9, "plan_nodes": 6, "actors_done": 2, "events": 90, "plan_scans": 1, "scan_chunks": 3501,
         "chunks_read": 1200, "scans_finished": 0},
        {"nodes": 30, "scans": 7, "plan_nodes": None, "actors_done": 3, "events": 70, "chunks_read": 1100, "scans_finished": 0},
    ])
    assert (counts.plan_nodes, counts.plan_scans, counts.scan_chunks) == (6, 1, 3501)
    assert (counts.actors_done, counts.chunks_read, counts.scans_finished, counts.events) == (2, 1100, 0, 160)


def _publish(dask_worker: Any, nodes: dict[str, int], query: str = "job1") -> None:
    """On a worker: publish counts as a rank running ``query`` does after ``nodes[its address]`` evaluated nodes."""
    from spillway.jobs import gpu_trace_progress as traces

    traces.PUBLISH_EVERY_S = 0.0
    traces.COUNTER.reset(publish_to=Path(dask_worker.local_directory) / traces.COUNTS_FILE, query=query)
    for _ in range(nodes[dask_worker.address]):
        traces.COUNTER.record({"event": "Execute IR", "type": "Filter"})


def _traces_on() -> None:
    os.environ[gpu_trace_progress.TRACES_ENV] = "1"


def test_the_ranks_start_counting_for_the_job_before_its_query() -> None:
    """What a multi-GPU job runs on its ranks before the query: each counts from zero for the job, in its directory.

    On the GPU it had never run: Dask passes the worker by keyword, and the job's id given by position collided
    with it (a TypeError on every rank, so no live progress, and cudf-polars' traces printed to the workers' stdout).
    """
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
        ranks = sorted(client.run(lambda: None))
        client.run(_traces_on)
        assert start_rank_counts(client, ranks, "job7") == {rank: True for rank in ranks}
        published = client.run(lambda dask_worker: json.loads((Path(dask_worker.local_directory) / COUNTS_FILE).read_text()))
    assert {counts["query"] for counts in published.values()} == {"job7"}
    assert {counts["events"] for counts in published.values()} == {0}


def test_the_follower_reads_every_ranks_counts_through_its_nanny_and_shows_the_slowest() -> None:
    frame = pl.LazyFrame({"a": [1, 2, 3]}).filter(pl.col("a") > 1).with_columns(b=pl.col("a") * 2).select("b").sort("b")
    stages = [StageProgress(name="read sales", done=0, total=1), StageProgress(name="steps", done=0, total=1), StageProgress(name="write", done=0, total=1)]

    async def main() -> tuple[list[list[StageProgress]], RankFollower, int]:
        async with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, asynchronous=True) as cluster, \
                Client(cluster, asynchronous=True) as client:
            ranks = sorted(await client.run(lambda: None))
            updates: list[list[StageProgress]] = []
            follower = RankFollower(client, ranks, frame, stages, {"read sales"}, 0.05, lambda rows, _: updates.append(rows))
            following = asyncio.create_task(follower.run("job1"))
            await asyncio.sleep(0.5)
            assert updates == [] and follower.readings == 0  # no rank has published: the stages stay as they are
            await client.run(_publish, nodes={ranks[0]: 9, ranks[1]: 9}, query="job0")
            await asyncio.sleep(0.5)
            assert updates == []  # the job before's counts, still in the files: not this job's
            await client.run(_publish, nodes={ranks[0]: 2, ranks[1]: 1})
            for _ in range(100):  # a reading may land between two of a rank's records: wait for the last counts
                if follower.last is not None and follower.last.events == 3:
                    break
                await asyncio.sleep(0.05)
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            return updates, follower, follower.shape.nodes

    updates, follower, plan_nodes = asyncio.run(main())
    assert updates, "the follower never read both ranks' counts"
    read, steps, write = updates[-1]
    assert (read.name, read.done, read.total) == ("read sales", 0, 1)  # no scan evaluated yet on the slowest rank
    assert (steps.name, steps.done, steps.total, steps.unit) == ("steps", min(1, plan_nodes - 1), plan_nodes, NODE_UNIT)
    assert (write.done, write.total) == (0, 1)
    assert follower.last is not None and follower.last.events == 3
    assert "read" in follower.summary() and "3 trace events" in follower.summary()


def test_ranks_whose_events_stop_moving_are_reported_stalled_once() -> None:
    frame = pl.LazyFrame({"a": [1]}).select(pl.col("a") + 1)
    stages = [StageProgress(name="steps", done=0, total=1), StageProgress(name="write", done=0, total=1)]

    async def main() -> tuple[list[float], list[float]]:
        async with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, asynchronous=True) as cluster, \
                Client(cluster, asynchronous=True) as client:
            ranks = sorted(await client.run(lambda: None))
            stalls: list[float] = []
            follower = RankFollower(client, ranks, frame, stages, set(), 0.05, lambda *_: None, stall_s=0.6, stalled=stalls.append)
            following = asyncio.create_task(follower.run("job1"))
            for round_ in range(1, 6):  # events moving every 0.2 s: never stalled
                await client.run(_publish, nodes={ranks[0]: round_, ranks[1]: round_})
                await asyncio.sleep(0.2)
            moving = list(stalls)
            await asyncio.sleep(1.0)  # then nothing moves: told once in 1.0 s (again only after 1.2 s)
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            return moving, stalls

    moving, stalls = asyncio.run(main())
    assert moving == []
    assert len(stalls) == 1 and stalls[0] >= 0.6
