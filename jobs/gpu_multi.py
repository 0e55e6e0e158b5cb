"""A Polars job across every GPU worker: cudf-polars' ``DaskEngine`` over the service's own cluster.

A job whose working set does not fit one worker runs on all of them as ranks of one streaming
query (rapidsmpf shuffles between them, spilling to host above the device limit), and each rank
writes its share of the output straight into the job's staging directory: nothing is collected
on one worker or on the service. What the probe found (../shared/gpu/README.md §7) shapes it:

* The engine drives the workers through ``client.run``: the scheduler sees no task, and each
  worker's event loop is busy for the query. So such a job has the GPU workers to itself
  (:class:`cluster.gpu_gate.GpuGate`), and it is stopped (cancel, timeout) by restarting them.
* Hardware binding off (dask-cuda binds the workers already); ``raise_on_fail``: a query
  cudf-polars cannot run is refused, never run on the CPU.
* One engine, on a client of its own, is kept between jobs while the workers stay the same
  (:class:`MultiGpuEngines`): its bootstrap takes ~2.5 s on an H200.

The ranks name their files themselves (``part.000000.parquet`` per rank); they are written in a
hidden folder of the staging directory and renamed to the sink's own part names afterwards, so
an ``append`` never collides with the files already there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from spillway.jobs.gpu_streaming import spilled_device_to_host
from spillway.jobs.polars_io import OutputTarget, verify_checked
from spillway.jobs.spec import JobSpec
from spillway.jobs.storage import is_url

#: How long a job waits for a stop's restart of the workers (bounded at 60 s) and the engine's shutdown (30 s).
SETTLE_TIMEOUT_S = 100.0

log = logging.getLogger(__name__)

#: What a multi-GPU job's stage counts mean, shown with its progress.
MULTI_GPU_NOTE = (
    "cudf-polars runs all of this job's steps as one query across every GPU worker (its DaskEngine, one rank per worker). "
    "The ranks keep their workers busy and report nothing until the query ends, so each stage shows 0 of 1 while it runs "
    "and 1 of 1 once every rank has written its files; elapsed_s counts the seconds so far."
)
#: The same, with cudf-polars' traces on (``cluster.gpu_trace_progress``): what the live counts mean.
MULTI_GPU_TRACE_NOTE = (
    "cudf-polars runs all of this job's steps as one query across every GPU worker (its DaskEngine, one rank per worker). "
    "Each rank counts its trace events and writes the counts in its worker's directory, which the service reads through "
    "the worker's nanny every progress interval (the ranks keep their workers' event loops busy). The steps stage counts "
    "the plan's nodes streamed through, the lowest count over the ranks; each source's read shows 1 of 1 once every rank "
    "has run every scan, except a job's only source, which counts the chunks read by the slowest rank out of rank 0's "
    "share (a rank reads at most that many); the write completes with the query. elapsed_s counts the seconds so far."
)
#: Where the ranks write, inside the staging directory; hidden, so no commit could list it.
RANKS_FOLDER = ".spillway-ranks"


@dataclass(frozen=True)
class MultiGpuResult:
    """What a run across the GPU workers did: rows and files written, its timings, and what it spilled."""

    rows: int
    files: int
    ranks: int
    seconds: float
    bootstrap_s: float
    #: Set (and nothing run) when cudf-polars cannot run the query on the GPU: why not.
    unsupported: str | None = None
    spilled_bytes: int | None = None
    #: Seconds of each step of the run, in order: the engine got (checked or started), the query, the ranks'
    #: files named (and rewritten where their types differ), the ranks' statistics read.
    steps: dict[str, float] | None = None

    def steps_text(self) -> str:
        """The steps' seconds as the job's log shows them ("engine 0.002 s, query 0.180 s, …")."""
        return ", ".join(f"{name} {seconds:.3f} s" for name, seconds in (self.steps or {}).items())


def why_not_across_gpus(spec: JobSpec) -> str | None:
    """Why ``spec`` cannot run across the GPU workers (None: it can).

    The ranks write parquet files by path, each its own: a CSV sink (one file), partition
    directories (``partition_by`` sinks are not on the GPU in cudf-polars 26.10) and object
    stores (the rename of the ranks' files is local) stay on one worker.
    """
    sink = spec.sink
    if sink.format != "parquet":
        return f"its sink is {sink.format}, and the ranks write parquet files"
    if sink.partition_on:
        return "its sink has partition_on, which cudf-polars' multi-GPU engine does not write"
    if is_url(sink.path):
        return "its sink is in an object store"
    return None


class MultiGpuEngines:
    """The service's one ``DaskEngine``, kept between jobs while the cluster's workers stay the same.

    Its bootstrap (~2.5 s on an H200) would otherwise come with every job. One engine runs one
    query at a time (cudf-polars' collective ids come from one pool), which the gate ensures. A
    different set of workers (one restarted, added, gone), another spill limit, or an error in a
    query builds a new one; :meth:`discard` drops it (cancel, timeout, stop).

    A stop restarts the workers in the background, and they may come back at the addresses they
    had. So the stop calls :meth:`hold` before the restart and :meth:`release` after it and the
    engine's :meth:`discard`: in between no job gets the old engine, and the next one waits (on the
    GPU machine a job submitted as soon as both workers were back failed with "CommClosedError …
    Stream is closed"). Holds are counted: another discard (the cancelled job's own failed query,
    the hung-worker watch) or the end of an overlapping stop does not end this one.
    """

    def __init__(self, settle_timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        self._lock = threading.Lock()  # held while an engine starts: never taken on the service's event loop
        self._key: tuple[str, tuple[str, ...], int | None, bool] | None = None
        self._client: Any = None
        self._engine: Any = None
        self._worker_ids: tuple[tuple[str, str | None], ...] | None = None
        self._holds_lock = threading.Lock()  # only ever held for a counter's update
        self._holds = 0
        self._generation = 0  # moved by every hold: an engine started before it is never handed out again
        self._engine_generation = -1
        self._settled = threading.Event()
        self._settled.set()
        self.settle_timeout_s = settle_timeout_s

    def hold(self) -> None:
        """The engine's workers are about to restart: it is never handed out again, and :meth:`get` waits until
        every hold is released. Cheap and lock-free of the engine's start, so the event loop may call it."""
        with self._holds_lock:
            self._holds += 1
            self._generation += 1
            self._settled.clear()

    def release(self) -> None:
        """One :meth:`hold` is over (its stop restarted the workers and discarded the engine)."""
        with self._holds_lock:
            self._holds = max(0, self._holds - 1)
            if self._holds == 0:
                self._settled.set()

    async def settled(self, cancelled: asyncio.Event, poll_s: float = 0.1) -> bool:
        """On the event loop, before :meth:`get`: wait until no stop holds the engine (at most the settle
        timeout). False when ``cancelled`` was set first: a job cancelled while a stop restarts the workers
        ends now, not when :meth:`get`'s own wait would have (in a thread, which a cancel cannot interrupt)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_timeout_s
        while not self._settled.is_set() and loop.time() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancelled.wait(), poll_s)  # a threading.Event cannot be awaited: look again soon
            if cancelled.is_set():
                return False
        return not cancelled.is_set()

    def get(self, scheduler_address: str, workers: list[str], spill_device_limit: int | None, gpu_sharing: bool = False) -> tuple[Any, float]:
        """The engine over ``workers`` and the seconds spent starting it now (0: it was running).

        ``gpu_sharing``: several workers on one GPU (``cluster.allow_gpu_sharing``), which the
        engine refuses unless told ("Multiple ranks share the same GPU").
        """
        if not self._settled.wait(self.settle_timeout_s):
            log.warning("the multi-GPU engine's workers were still restarting after %.0f s; starting a new engine anyway", self.settle_timeout_s)
        from cudf_polars.engine.dask import DaskEngine
        from cudf_polars.engine.hardware_binding import HardwareBindingPolicy
        from cudf_polars.engine.options import StreamingOptions
        from distributed import Client

        key = (scheduler_address, tuple(sorted(workers)), spill_device_limit, gpu_sharing)
        with self._lock:
            generation = self._generation
            if (self._key == key and self._engine is not None and self._engine_generation == generation
                    and (now := worker_ids(self._client, workers)) and now == self._worker_ids):
                return self._engine, 0.0  # the same worker processes (one restarted at its old address has a new id)
            self._close()
            started = time.perf_counter()
            limit = {"spill_device_limit": f"{spill_device_limit // 2**20}MiB"} if spill_device_limit else {}
            options = StreamingOptions(
                hardware_binding=HardwareBindingPolicy(enabled=False), raise_on_fail=True, statistics=True, allow_gpu_sharing=gpu_sharing, **limit,
            )
            self._client = Client(scheduler_address, set_as_default=False, timeout=60)
            try:
                self._engine = DaskEngine.from_options(options, dask_client=self._client)
            except BaseException:
                self._close()
                raise
            self._key, self._worker_ids, self._engine_generation = key, worker_ids(self._client, workers), generation
            return self._engine, time.perf_counter() - started

    def count_traces(self, workers: list[str], query: str) -> None:
        """Before ``query`` (a job's id): its ranks count cudf-polars' trace events from zero and publish them (:func:`_count_traces`)."""
        with self._lock:
            client = self._client
        if client is not None:
            start_rank_counts(client, workers, query)

    def discard(self) -> None:
        """Shut the engine down (and its client); the next job starts a new one."""
        with self._lock:
            engine, client = self._take()
        _shut(engine, client)  # outside the lock: it may wait on workers that are restarting

    def _close(self) -> None:
        _shut(*self._take())

    def _take(self) -> tuple[Any, Any]:
        engine, client = self._engine, self._client
        self._key = self._engine = self._client = self._worker_ids = None
        return engine, client


def start_rank_counts(client: Any, workers: list[str], query: str) -> dict[str, bool]:
    """On each of ``workers`` (the ranks), before ``query``: :func:`_count_traces`; each rank's answer (none if it failed).

    A rank that cannot count still runs the query: progress is a report, so a failure is logged, not raised.
    """
    try:
        # By keyword: Dask passes the worker as ``dask_worker=``, so a positional ``query`` would fill that parameter.
        return client.run(_count_traces, query=query, workers=list(workers))
    except Exception as exc:  # noqa: BLE001 - see above
        log.warning("the ranks' trace counts could not be started: %s: %s", type(exc).__name__, exc)
        return {}


def _count_traces(dask_worker: Any, query: str) -> bool:
    """On a rank, before its query: count cudf-polars' trace events (and drop them) from zero, publishing the counts in
    the worker's directory for its nanny to read; whether traces are on.

    Not counted, cudf-polars would print an event per chunk to the worker's stdout: megabytes a query.
    """
    from spillway.jobs.gpu_trace_progress import COUNTER, COUNTS_FILE, install

    if not install():
        return False
    COUNTER.reset(publish_to=Path(dask_worker.local_directory) / COUNTS_FILE, query=query)
    return True


def worker_ids(client: Any, workers: list[str]) -> tuple[tuple[str, str | None], ...] | None:
    """Each of ``workers``' server id as the scheduler knows it now (None: not there); None if it cannot be asked.

    A worker restarted by its nanny may come back at the address it had, with a new id: the kept
    engine's ranks were on the old process, so the engine is started again.
    """
    try:
        return tuple(client.run_on_scheduler(_ids_on_scheduler, workers=sorted(workers)))
    except Exception as exc:  # noqa: BLE001 - a scheduler or client gone: the caller starts a new engine
        log.info("could not read the GPU workers' ids: %s: %s", type(exc).__name__, exc)
        return None


def _ids_on_scheduler(dask_scheduler: Any, workers: list[str]) -> list[tuple[str, str | None]]:
    known = dask_scheduler.workers
    return [(address, known[address].server_id if address in known else None) for address in workers]


def _shut(engine: Any, client: Any) -> None:
    for close in (getattr(engine, "shutdown", None), getattr(client, "close", None)):
        if close is None:
            continue
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - its workers may be restarting or gone
            log.warning("closing the multi-GPU engine: %s: %s", type(exc).__name__, exc)


def run_across_gpus(
    engines: MultiGpuEngines, scheduler_address: str, workers: list[str], frame: pl.LazyFrame, target: OutputTarget,
    spill_device_limit: int | None, gpu_sharing: bool = False, query: str = "",
) -> MultiGpuResult:
    """Run ``frame`` on ``workers`` (every GPU worker of the cluster), into ``target``'s staging directory.

    Blocking: call it in a thread. ``spill_device_limit`` (bytes per worker) is where rapidsmpf
    starts spilling to host; None keeps its default (80 % of the device). ``query`` (the job's id) marks
    the trace counts the ranks publish while it runs (cluster/rank_progress.py).

    Raises
    ------
    PathNotAllowed, SourceChanged
        A checked source file was swapped before or during the query (nothing is committed).
    """
    from spillway.jobs.polars_run import cannot_run_on_gpu

    started = time.perf_counter()
    ranks_dir = Path(target.location) / RANKS_FOLDER
    sink = target.sink
    engine, bootstrap_s = engines.get(scheduler_address, workers, spill_device_limit, gpu_sharing)
    engines.count_traces(workers, query)
    got = time.perf_counter()
    try:
        verify_checked(target.checked)
        try:
            frame.sink_parquet(f"{ranks_dir}/", engine=engine, compression=sink.codec or "uncompressed", row_group_size=sink.row_group_size)
        except Exception as exc:
            if cannot_run_on_gpu(exc):  # refused while translating, before any work: the engine is fine
                return MultiGpuResult(0, 0, engine.nranks, time.perf_counter() - started, bootstrap_s,
                                      unsupported=f"{type(exc).__name__}: {str(exc)[:500]}")
            engines.discard()  # a rank may have failed mid-collective: start clean next time
            raise
        verify_checked(target.checked)
    except BaseException:
        shutil.rmtree(ranks_dir, ignore_errors=True)
        raise
    queried = time.perf_counter()
    rows, files = name_rank_files(ranks_dir, target, pl.DataFrame(schema=frame.collect_schema()).to_arrow().schema)
    named = time.perf_counter()
    spilled = _spilled(engine)
    ended = time.perf_counter()
    steps = {"engine": got - started, "query": queried - got, "files": named - queried, "statistics": ended - named}
    return MultiGpuResult(rows, files, engine.nranks, ended - started, bootstrap_s, spilled_bytes=spilled, steps=steps)


def name_rank_files(ranks_dir: Path, target: OutputTarget, schema: pa.Schema) -> tuple[int, int]:
    """Give the ranks' files the sink's part names (rank order) and the job's ``schema``; the rows and files written.

    libcudf writes a datetime (sources read dates as datetime[us]) as a UTC timestamp, where the
    one-worker path (Polars' writer) writes it naive: a file whose types differ from ``schema`` is
    rewritten cast to it, so the output's types do not depend on how many workers ran the job. An empty output (no rank
    wrote a file) gets one empty file with the schema, as on one worker.
    """
    written = sorted(path for path in ranks_dir.rglob("*") if path.is_file() and not path.is_symlink())
    rows = 0
    for number, path in enumerate(written):
        final = Path(target.location) / f"{target.stem.format(number)}.parquet"
        found = pq.read_schema(path)
        if _same_types(found, schema):
            rows += pq.read_metadata(path).num_rows
            os.rename(path, final)
            continue
        table = pq.read_table(path)
        rows += table.num_rows
        cast = pa.schema([schema.field(name) if not _same_type(field.type, schema.field(name).type) else field
                          for name, field in zip(found.names, found)])
        pq.write_table(table.cast(cast), final, compression=target.sink.codec or "none", row_group_size=target.sink.row_group_size)
        path.unlink()
    if not written:
        pq.write_table(schema.empty_table(), Path(target.location) / f"{target.stem.format(0)}.parquet")
    for folder in sorted((p for p in ranks_dir.rglob("*") if p.is_dir()), reverse=True):
        folder.rmdir()
    if ranks_dir.exists():
        ranks_dir.rmdir()  # anything else left in it (a link) makes this fail: nothing is committed
    return rows, max(len(written), 1)


def _same_types(found: pa.Schema, wanted: pa.Schema) -> bool:
    return found.names == wanted.names and all(_same_type(a.type, b.type) for a, b in zip(found, wanted))


def _same_type(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Equal, or both strings (libcudf writes ``string``, Polars ``large_string``/``string_view``: the same parquet column)."""
    def text(kind: pa.DataType) -> bool:
        return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)

    return found == wanted or (text(found) and text(wanted))


def _spilled(engine: Any) -> int | None:
    """Bytes the ranks spilled device → host in the query just run, clearing their counts (None: they could not be read)."""
    try:
        return sum(spilled_device_to_host(stats.to_dict()) for stats in engine.gather_statistics(clear=True))
    except Exception as exc:  # noqa: BLE001 - statistics are a report, not the job
        log.warning("the multi-GPU engine's statistics could not be read: %s: %s", type(exc).__name__, exc)
        return None
