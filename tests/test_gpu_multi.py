"""A Polars job across every GPU worker (issue 19 item 1): cudf-polars' DaskEngine over the service's cluster.

What runs anywhere: when a job goes across the workers (jobs/gpu_placement.py ``across_gpus``),
the gate that gives it the workers alone (cluster/gpu_gate.py), and the renaming of the ranks'
files to the sink's part names (jobs/gpu_multi.py). The service tests, on two workers sharing
GPU 0 with ``gpu_multi_worker=always``, are marked ``gpu``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client

from spillway.cluster.gpu_gate import GpuGate
from spillway.jobs.gpu_multi import RANKS_FOLDER, MultiGpuEngines, name_rank_files, why_not_across_gpus, worker_ids
from spillway.jobs.gpu_placement import GpuPlacement, across_gpus
from spillway.jobs.gpu_trace_progress import installed
from spillway.jobs.polars_io import OutputTarget
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.service.launcher import ServiceProcess, launch_service
from tests.conftest import wait_for, wait_terminal
from tests.fault_jobs import check_slow_output, shared_gpu_env, slow_spec, worker_addresses

STREAMING = GpuPlacement("streaming", 30 << 30, 20 << 30, "streaming with spilling above 20.0 GiB: ...")
IN_MEMORY = GpuPlacement("in-memory", 1 << 30, 20 << 30, "in-memory: ...")


def _spec(**sink: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "source": {"format": "parquet", "path": "/data/a.parquet"}, "sink": {"path": "/data/out", **sink}})


def test_auto_goes_across_the_workers_only_for_a_job_that_does_not_fit_one_and_only_with_two_or_more() -> None:
    placed = across_gpus(STREAMING, _spec(), "auto", 2)
    assert placed.executor == "multi-gpu" and "across 2 GPU worker(s)" in placed.reason and "does not fit one worker" in placed.reason
    assert placed.spill_device_limit == 20 << 30  # each rank spills above the worker's limit
    assert across_gpus(STREAMING, _spec(), "auto", 1) is STREAMING
    assert across_gpus(IN_MEMORY, _spec(), "auto", 4) is IN_MEMORY
    assert across_gpus(STREAMING, _spec(), "off", 4) is STREAMING


def test_always_takes_every_job_whose_sink_allows_it_and_says_why_not_otherwise() -> None:
    assert across_gpus(IN_MEMORY, _spec(), "always", 1).executor == "multi-gpu"
    for sink, why in [({"format": "csv"}, "sink is csv"), ({"partition_on": ["a"]}, "partition_on"), ({"path": "s3://b/out"}, "object store")]:
        spec = _spec(**sink)
        assert why in (why_not_across_gpus(spec) or "")
        kept = across_gpus(IN_MEMORY, spec, "always", 2)
        assert kept.executor == "in-memory" and f"not across the GPU workers: {why_not_across_gpus(spec)}" in kept.reason
        assert across_gpus(STREAMING, spec, "auto", 2) is STREAMING  # auto: the usual placement, silently
    assert why_not_across_gpus(_spec()) is None


def test_the_ranks_files_get_the_sinks_part_names_in_rank_order(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    ranks = staging / RANKS_FOLDER
    ranks.mkdir(parents=True)
    for rank, rows in enumerate([3, 5]):
        pq.write_table(pa.table({"rank": pa.array([rank] * rows, pa.int64()), "name": pa.array(["x"] * rows, pa.string())}), ranks / f"part.{rank:06d}.parquet")
    target = OutputTarget(location=str(staging), stem="part.job1.{:06d}", sink=_spec().sink)
    schema = pa.schema([("rank", pa.int64()), ("name", pa.large_string())])  # strings: the same parquet column either way
    assert name_rank_files(ranks, target, schema) == (8, 2)
    assert sorted(p.name for p in staging.iterdir()) == ["part.job1.000000.parquet", "part.job1.000001.parquet"]
    assert pq.read_table(staging / "part.job1.000001.parquet").column("rank").to_pylist() == [1] * 5


@pytest.mark.parametrize(("wanted", "value"), [
    (pa.timestamp("us"), datetime(1995, 3, 15)),  # sources read dates as datetime[us]: TPC-H's o_orderdate in the job
    (pa.date32(), date(1995, 3, 15)),  # a date the job made (cast(x, 'date'))
])
def test_a_date_libcudf_wrote_as_a_utc_timestamp_gets_the_jobs_type_again(tmp_path: Path, wanted: pa.DataType, value: object) -> None:
    """Seen on the H200 (TPC-H q03, q18): the ranks wrote o_orderdate as a UTC timestamp, which pandas reads tz-aware."""
    ranks = tmp_path / "staging" / RANKS_FOLDER
    ranks.mkdir(parents=True)
    stamps = pa.array([datetime(1995, 3, 15, tzinfo=timezone.utc)], pa.timestamp("ms", tz="UTC"))
    pq.write_table(pa.table({"o_orderdate": stamps, "n": pa.array([1], pa.int64())}), ranks / "part.000000.parquet")
    target = OutputTarget(location=str(tmp_path / "staging"), stem="part.{:06d}", sink=_spec().sink)
    schema = pa.schema([("o_orderdate", wanted), ("n", pa.int64())])
    assert name_rank_files(ranks, target, schema) == (1, 1)
    written = pq.read_table(tmp_path / "staging" / "part.000000.parquet")
    assert written.schema == schema and written.column("o_orderdate").to_pylist() == [value]


def test_an_empty_output_gets_one_empty_file_with_the_jobs_columns(tmp_path: Path) -> None:
    ranks = tmp_path / "staging" / RANKS_FOLDER
    ranks.mkdir(parents=True)
    schema = pa.schema([("key", pa.int64()), ("value", pa.float64())])
    target = OutputTarget(location=str(tmp_path / "staging"), stem="part.{:06d}", sink=_spec().sink)
    assert name_rank_files(ranks, target, schema) == (0, 1)
    assert pq.read_table(tmp_path / "staging" / "part.000000.parquet").schema == schema and not ranks.exists()


def test_a_link_left_among_the_ranks_files_fails_the_rename(tmp_path: Path) -> None:
    ranks = tmp_path / "staging" / RANKS_FOLDER
    ranks.mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), ranks / "part.000000.parquet")
    (ranks / "evil").symlink_to("/etc")
    with pytest.raises(OSError):
        name_rank_files(ranks, OutputTarget(location=str(tmp_path / "staging"), stem="part.{:06d}", sink=_spec().sink), pa.schema([("a", pa.int64())]))


def test_the_gate_shares_the_workers_or_gives_them_to_one_job_alone() -> None:
    async def scenario() -> list[str]:
        gate, order = GpuGate(), []
        never = asyncio.Event()
        assert await gate.acquire_shared(never) and await gate.acquire_shared(never) and gate.sharing == 2

        async def alone() -> None:
            assert await gate.acquire_exclusive(never)
            order.append("alone")
            await gate.release_exclusive()

        async def later_shared() -> None:
            assert await gate.acquire_shared(never)
            order.append("later shared")
            await gate.release_shared()

        exclusive = asyncio.create_task(alone())
        await asyncio.sleep(0.01)
        later = asyncio.create_task(later_shared())  # behind the waiting exclusive: it must not starve it
        await asyncio.sleep(0.01)
        assert order == [] and not gate.exclusive
        await gate.release_shared()
        await asyncio.sleep(0.01)
        assert order == []  # one shared holder is left
        await gate.release_shared()
        await asyncio.gather(exclusive, later)
        return order

    assert asyncio.run(scenario()) == ["alone", "later shared"]


def test_a_cancel_ends_a_wait_at_the_gate_and_holds_nothing() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        gate, never, cancelled = GpuGate(), asyncio.Event(), asyncio.Event()
        assert await gate.acquire_shared(never)
        waiting = asyncio.create_task(gate.acquire_exclusive(cancelled))
        await asyncio.sleep(0.01)
        cancelled.set()
        await gate.wake()
        got = await asyncio.wait_for(waiting, 5)
        await gate.release_shared()
        # Nothing is held and nobody waits: a new job shares at once.
        shared_again = await asyncio.wait_for(gate.acquire_shared(never), 5)
        return got, shared_again, gate.sharing

    assert asyncio.run(scenario()) == (False, True, 1)


def _next_job_waits(engines: MultiGpuEngines) -> tuple[threading.Thread, list[object]]:
    """A thread asking ``engines`` for an engine, as the next job does; without cudf-polars its get ends at the import, after the wait."""
    outcome: list[object] = []

    def next_job() -> None:
        try:
            outcome.append(engines.get("tcp://127.0.0.1:1", ["tcp://127.0.0.1:2"], None))
        except BaseException as exc:  # noqa: BLE001 - the ImportError past the wait is the expected end here
            outcome.append(exc)

    waiter = threading.Thread(target=next_job, daemon=True)
    waiter.start()
    waiter.join(0.5)
    return waiter, outcome


def test_while_a_stop_restarts_the_workers_no_job_gets_an_engine_until_it_releases_its_hold() -> None:
    """The stop holds the kept engine before restarting its workers; the next job's get waits for the release. Other
    discards in between (the cancelled job's own failed query, the hung-worker watch) do not end the wait, nor does
    the end of one of two overlapping stops (a device run and a review found both)."""
    engines = MultiGpuEngines(settle_timeout_s=30)
    engines.hold()
    engines.hold()  # a second stop, overlapping
    waiter, outcome = _next_job_waits(engines)
    engines.discard()  # what run_across_gpus does when the restart kills its query
    engines.release()  # the first stop's end
    waiter.join(0.5)
    assert waiter.is_alive() and not outcome, "the next job got an engine while a stop was still restarting the workers"
    engines.release()
    waiter.join(30)
    assert not waiter.is_alive() and len(outcome) == 1


def test_a_hold_does_not_wait_for_an_engine_that_is_starting() -> None:
    """hold() runs on the service's event loop: it must not wait while another thread starts an engine (under the engine lock)."""
    engines = MultiGpuEngines(settle_timeout_s=30)
    done = threading.Event()
    with engines._lock:  # an engine start in progress, as get() holds it
        holder = threading.Thread(target=lambda: (engines.hold(), done.set()), daemon=True)
        holder.start()
        assert done.wait(10), "hold() waited for the engine lock"
    engines.release()


def test_a_worker_restarted_at_its_old_address_has_a_new_id_so_the_kept_engine_is_not_reused(tmp_path: Path) -> None:
    """The kept engine is keyed by the workers' addresses and their processes' ids: a nanny restart keeps the one, not the other."""
    from distributed import LocalCluster

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, worker_port=port, dashboard_address=":0",
                      local_directory=str(tmp_path)) as cluster, Client(cluster) as client:
        (address,) = client.scheduler_info()["workers"]
        before = worker_ids(client, [address])
        assert before is not None and before[0][1] is not None
        client.restart_workers([address])
        assert list(client.scheduler_info()["workers"]) == [address], "the worker came back at its old address"
        after = worker_ids(client, [address])
        assert after is not None and after != before
    assert worker_ids(client, [address]) is None, "a closed client: no ids, so no engine is reused"


@pytest.fixture(scope="module")
def across_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    pytest.importorskip("cudf_polars")
    service = launch_service(tmp_path_factory.mktemp("across_gpus"), shared_gpu_env(SPILLWAY_CLUSTER__GPU_MULTI_WORKER="always"), timeout=300)
    yield service
    service.stop()


@pytest.mark.gpu
def test_a_job_runs_across_both_workers_and_commits_the_ranks_files(across_service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    with across_service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
        job = wait_terminal(api, api.submit(slow_spec("polars", big_data, out)).id, timeout=300)
        log = "\n".join(api.logs(job.id))
        assert job.state == JobStatus.SUCCEEDED, (job.error, log)
        # The ranks count cudf-polars' trace events and drop them: printed, a long query's filled the workers' stdout.
        assert set(dask_client.run(installed).values()) == {True}
        # ... and publish them, read through their nannies while the query runs (cluster/rank_progress.py).
        assert "live progress: the ranks' trace counts read" in log, log
        assert job.progress.engine is not None and "across 2 GPU worker(s)" in job.progress.engine.reason, job.progress.engine
        assert "DaskEngine ran on 2 rank(s)" in log, log
        assert re.search(r"\(engine [\d.]+ s, query [\d.]+ s, files [\d.]+ s, statistics [\d.]+ s\)", log), log
        assert job.result is not None and all(f.path.startswith("part.") for f in job.result.files)
        assert job.result.total_rows == pq.read_table(out).num_rows
        check_slow_output("polars", big_data, out)
        # An append: the ranks' files take this job's own names beside the first job's.
        again = wait_terminal(api, api.submit(slow_spec("polars", big_data, out, sink={"path": str(out), "mode": "append"})).id, timeout=300)
        assert again.state == JobStatus.SUCCEEDED, again.error
        assert again.result is not None and again.result.total_rows == 2 * job.result.total_rows
        # A CSV sink cannot go across: it runs on one worker, and says why.
        csv = wait_terminal(api, api.submit(slow_spec("polars", big_data, tmp_path / "csv", sink={"path": str(tmp_path / "csv"), "format": "csv"})).id, timeout=300)
        assert csv.state == JobStatus.SUCCEEDED, csv.error
        assert csv.progress.engine is not None and "not across the GPU workers" in csv.progress.engine.reason


@pytest.mark.gpu
def test_a_cancel_across_the_workers_restarts_them_and_the_next_job_runs(across_service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cancelled"
    with across_service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
        job_id = api.submit(slow_spec("polars", big_data, out)).id
        wait_for(lambda: any("running across" in line for line in api.logs(job_id)), timeout=120, interval=0.05, what="the ranks to start")
        cancelled = api.cancel(job_id)
        assert cancelled.state == JobStatus.CANCELLED, cancelled.error
        wait_for(lambda: len(worker_addresses(dask_client)) == 2, timeout=180, what="both workers back")
        after = wait_terminal(api, api.submit(slow_spec("polars", big_data, tmp_path / "after")).id, timeout=300)
        assert after.state == JobStatus.SUCCEEDED, after.error
    assert not out.exists()
    check_slow_output("polars", big_data, tmp_path / "after")


def test_with_jobs_across_the_gpu_workers_possible_the_schedulers_worker_ttl_outlasts_a_long_query() -> None:
    """Their ranks hold the workers' event loops (no heartbeats): Dask's 5-minute ttl would remove them mid-query."""
    import dask
    from distributed import LocalCluster

    from spillway.cluster.local_process import MULTI_GPU_WORKER_TTL, scheduler_config
    from spillway.cluster.settings import ClusterSettings

    assert scheduler_config(ClusterSettings(), "cudf") == {"distributed.scheduler.worker-ttl": MULTI_GPU_WORKER_TTL}
    assert scheduler_config(ClusterSettings(gpu_multi_worker="off"), "cudf") == {}
    assert scheduler_config(ClusterSettings(), "pandas") == {}
    # The scheduler reads it when it starts, as the cluster's own process starts it.
    with dask.config.set(scheduler_config(ClusterSettings(), "cudf")), \
            LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        assert cluster.scheduler.worker_ttl == 24 * 3600


def test_a_job_waiting_for_a_stops_restart_ends_at_once_when_cancelled() -> None:
    """The wait for a stop's hold runs on the event loop before get(), so a cancel ends it (get() waits in a thread)."""
    engines = MultiGpuEngines(settle_timeout_s=60)

    async def scenario() -> tuple[bool, bool]:
        cancelled = asyncio.Event()
        engines.hold()
        waiting = asyncio.ensure_future(engines.settled(cancelled))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "the wait ended while the stop still held the engine"
        cancelled.set()
        first = await asyncio.wait_for(waiting, 10)  # well before the 60 s the hold could last
        engines.release()
        second = await asyncio.wait_for(engines.settled(asyncio.Event()), 10)  # nothing held: at once
        return first, second

    assert asyncio.run(scenario()) == (False, True)


@pytest.fixture(scope="module")
def across_watched_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """Jobs across both workers, with a rank stopped for 5 s (SPILLWAY_HUNG_WORKER_S) taken as hung."""
    pytest.importorskip("cudf_polars")
    env = shared_gpu_env(SPILLWAY_CLUSTER__GPU_MULTI_WORKER="always", SPILLWAY_HUNG_WORKER_S="5")
    service = launch_service(tmp_path_factory.mktemp("across_watched"), env, timeout=300)
    yield service
    service.stop()


@pytest.mark.gpu
def test_a_rank_stopped_mid_query_fails_the_job_as_worker_hung_and_the_next_job_runs(
    across_watched_service: ServiceProcess, big_data: dict[str, Path], tmp_path: Path,
) -> None:
    """Its ranks send no heartbeat, so silence says nothing; the stopped process does (issue 16 item 7, issue 19 item 6)."""
    import os
    import signal

    out = tmp_path / "stopped"
    with across_watched_service.client() as api, Client(api.cluster().scheduler_address, timeout=30) as dask_client:
        pids = dask_client.run(os.getpid)
        job_id = api.submit(slow_spec("polars", big_data, out)).id
        wait_for(lambda: any("running across" in line for line in api.logs(job_id)), timeout=120, interval=0.05, what="the ranks to start")
        stopped = sorted(pids)[0]
        os.kill(pids[stopped], signal.SIGSTOP)
        try:
            job = wait_terminal(api, job_id, timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):  # restarted: the stopped process is gone
                os.kill(pids[stopped], signal.SIGCONT)
        assert job.state == JobStatus.FAILED and job.error is not None and job.error.code == "worker_hung", job.error
        assert stopped in job.error.message and "SPILLWAY_HUNG_WORKER_S" in job.error.message
        wait_for(lambda: len(worker_addresses(dask_client)) == 2, timeout=180, what="both workers back")
        after = wait_terminal(api, api.submit(slow_spec("polars", big_data, tmp_path / "after")).id, timeout=300)
        assert after.state == JobStatus.SUCCEEDED, after.error
    assert not out.exists()
    check_slow_output("polars", big_data, tmp_path / "after")
