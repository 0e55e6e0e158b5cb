"""A Polars job as one Dask task: run the LazyFrame on the worker and write its output.

The service builds and checks the LazyFrame, then submits :func:`run_polars_job` to the
cluster; the task runs in a worker thread, so placement, the dashboard's task stream,
worker restarts and memory limits stay Dask's. While it runs, a heartbeat publishes the
phase and elapsed time on the progress topic (Polars' engine exposes no partition counter).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import polars as pl
from polars.exceptions import PanicException

from spillway.jobs import gpu_trace_progress
from spillway.jobs.gpu_placement import GpuPlacement
from spillway.jobs.gpu_support import gpu_engine
from spillway.jobs.gpu_streaming import streaming_gpu_engine, take_spilled_bytes
from spillway.jobs.polars_io import OutputTarget, write_output
from spillway.jobs.read_progress import ReadMeter, SourceRead, to_mib
from spillway.jobs.status import PROGRESS_TOPIC



class PolarsPanicked(RuntimeError):
    """Polars panicked while running a job's query (a bug or a limit of Polars, reported as the job's failure)."""


@dataclass(frozen=True)
class PolarsRunResult:
    """What the task reports back: rows written, seconds spent, and where it ran."""

    rows: int
    seconds: float
    worker: str
    threads: int
    engine: str
    #: Set (and nothing run) when cudf-polars cannot run the query on the GPU: why not.
    unsupported: str | None = None
    #: On the GPU: the executor that ran it, and (streaming) the bytes it spilled device → host.
    executor: str | None = None
    spilled_bytes: int | None = None
    #: The worker's clock (epoch seconds) when the task began and when it returned: with the
    #: service's own clock, how long the task took to reach the worker and its result to come back.
    began_at: float | None = None
    returned_at: float | None = None
    #: Every stage as it ended, ``(name, done, total, unit)``: the job's final progress, with
    #: ``seconds`` as its elapsed time. It comes with the result, not as a last progress event: such an event
    #: goes out on the worker's batched stream just before the task's end and holds the end back
    #: by the stream's interval (2 ms), and then again on the scheduler's stream to the service.
    stages: list[tuple[str, int, int, str | None]] | None = None
    #: What the counts mean, where the worker's own note replaces the service's (cudf-polars' traces).
    note: str | None = None


def _engine(device: str, placement: GpuPlacement | None) -> Any:
    if device == "cpu":
        return "streaming"  # Polars' streaming engine: faster than in-memory on scans (TPC-H q01 0.9 s vs 3.9 s at SF 10)
    if placement is not None and placement.spill_device_limit is not None:
        return streaming_gpu_engine(placement.spill_device_limit)
    return gpu_engine()


def cannot_run_on_gpu(exc: BaseException) -> bool:
    """Whether ``exc`` is cudf-polars refusing a query (raise_on_fail), not a failure while running it."""
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, NotImplementedError) or "NotImplementedError" in text or "not supported" in text.lower()


@dataclass(frozen=True)
class StagePlan:
    """One stage a job shows: its name, its total and unit (None: the stage counts 1), and whether it reads a source."""

    name: str
    total: int
    unit: str | None = None
    reads: bool = False


def run_polars_job(
    job_id: str, frame: pl.LazyFrame, target: OutputTarget, device: str = "cpu", stages: list[StagePlan] | None = None,
    reads: list[SourceRead] | None = None, placement: GpuPlacement | None = None,
) -> PolarsRunResult:
    """Run ``frame`` into ``target`` on this worker; ``device`` is ``cpu`` or ``gpu``.

    On the GPU, ``placement`` says which cudf-polars executor runs it (jobs/gpu_placement.py;
    in-memory when None). While it runs, a heartbeat publishes each stage every 0.5 s: the MiB
    read so far of each source in ``reads`` (jobs/read_progress.py), 0 for the others; the
    result carries them all done (:attr:`PolarsRunResult.stages`).
    """
    from distributed import get_worker

    began_at = time.time()
    worker = get_worker()
    plans = stages or [StagePlan("query", 1), StagePlan("write", 1)]
    meter = ReadMeter(reads or [])
    # On the GPU, cudf-polars' own trace events count the plan's nodes as they run (jobs/gpu_trace_progress.py).
    shape = None
    if device == "gpu" and gpu_trace_progress.install():
        shape = gpu_trace_progress.plan_shape(frame)
        gpu_trace_progress.COUNTER.reset()
    started = time.perf_counter()
    done = threading.Event()

    def stages_now(finished: bool) -> list[tuple[str, int, int, str | None]]:
        if shape is not None:
            planned = [(p.name, 1 if p.reads else None) for p in plans]
            return gpu_trace_progress.stage_rows(planned, shape, gpu_trace_progress.COUNTER.counts(), finished)
        read = {} if finished else meter.sample()
        return [(p.name, p.total if finished else min(to_mib(read.get(p.name, 0)), p.total), p.total, p.unit) for p in plans]

    def publish() -> None:
        message = {
            "job_id": job_id, "stages": stages_now(False), "workers": {worker.address: 0},
            "elapsed_s": round(time.perf_counter() - started, 3), "ended": False, "engine": "polars",
        }
        if shape is not None:
            message["note"] = gpu_trace_progress.TRACE_NOTE
        worker.log_event(PROGRESS_TOPIC, message)

    def heartbeat() -> None:
        while not done.wait(0.5):
            publish()

    beat = threading.Thread(target=heartbeat, name=f"spillway-heartbeat-{job_id}", daemon=True)
    beat.start()
    try:
        rows = write_output(frame, target, engine=_engine(device, placement))
    except Exception as exc:
        if device == "gpu" and cannot_run_on_gpu(exc):  # found while translating, before any work
            return PolarsRunResult(rows=0, seconds=time.perf_counter() - started, worker=worker.address,
                                   threads=pl.thread_pool_size(), engine=device, unsupported=f"{type(exc).__name__}: {str(exc)[:500]}",
                                   began_at=began_at, returned_at=time.time())
        raise
    except PanicException as exc:
        # A panic in Polars' Rust code is a BaseException, which a Dask task does not report: its future never
        # resolved and the job waited until its timeout (a date past Datetime's range read as one did that).
        raise PolarsPanicked(f"Polars stopped on an internal error: {str(exc)[:500]}") from None
    finally:
        done.set()
        beat.join()
    executor = None if device == "cpu" else (placement.executor if placement is not None else "in-memory")
    return PolarsRunResult(
        rows=rows, seconds=time.perf_counter() - started, worker=worker.address, threads=pl.thread_pool_size(), engine=device,
        executor=executor, spilled_bytes=take_spilled_bytes() if executor == "streaming" else None,
        began_at=began_at, returned_at=time.time(), stages=stages_now(True),
        note=gpu_trace_progress.TRACE_NOTE if shape is not None else None,
    )
