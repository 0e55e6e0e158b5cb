"""Running a Polars job on the Dask cluster: one task on one worker, stopped by restarting it.

The LazyFrame is built and checked on the service and travels to the worker pickled
(Polars serialises the plan, not data). The task (:func:`jobs.polars_run.run_polars_job`)
runs in a worker thread with the worker's threads and memory limit. A running Polars query
cannot be interrupted from outside, so cancelling one (or its timeout) restarts the worker
that runs it, once the task is cancelled: bounded, and nothing it was writing survives (the
staging directory is then removed). A worker that dies mid-query has the task run again
elsewhere, from an empty target (:func:`run_attempt`).
"""

from __future__ import annotations

import io
import logging
import shutil
from typing import Any

import polars as pl
from distributed import Client

from spillway.jobs.gpu_placement import GpuPlacement
from spillway.jobs.polars_io import OutputTarget
from spillway.jobs.polars_run import PolarsRunResult, StagePlan, run_polars_job
from spillway.jobs.read_progress import READ_UNIT, SourceRead, read_stage_name, to_mib
from spillway.jobs.sink import SinkWriter
from spillway.jobs.spec import DerivedSource, JobSpec, Step
from spillway.jobs.status import ColumnSchema, JobProgress, StageProgress
from spillway.jobs import storage
from spillway.jobs.storage import is_url

log = logging.getLogger(__name__)

#: What the stage counts mean, shown with a Polars job's progress.
POLARS_NOTE = (
    "Polars runs all of a job's steps as one query on one worker. Each 'read' stage counts the MiB of that "
    "source the query has read so far (the worker's memory maps of its files, measured by the OS) out of what "
    "it is expected to read (the column chunks of the columns the optimized query reads, from the parquet footers); it can "
    "stop short when row groups are skipped, and completes with the query. The other stages show 1 of 1 "
    "once the query is done and its output written; elapsed_s counts the seconds so far."
)
#: The same on the GPU, whose reads (libcudf) cannot be seen from outside.
POLARS_GPU_NOTE = (
    "cudf-polars runs all of a job's steps as one query on one GPU worker. Its reads happen inside libcudf, "
    "where they cannot be counted from outside, so each stage shows 0 of 1 while the query runs and 1 of 1 "
    "once its output is written; elapsed_s counts the seconds so far."
)


def task_key(job_id: str) -> str:
    return f"spillway-polars-{job_id}"


def stage_names(spec: JobSpec) -> list[str]:
    """The stages a Polars job shows, named after the spec: its sources, its derived and SQL sources, its steps, its sink."""
    def ops(steps: list[Step]) -> str:
        return " → ".join(step.op for step in steps) or "as is"

    names = [read_stage_name(field) for field, _ in spec.source_fields()]
    names += [f"derive {name}: {ops(source.steps)}" for name, source in spec.sources.items() if isinstance(source, DerivedSource)]
    names += [f"sql {name}" for name in spec.sql_sources()]
    if spec.steps:
        names.append(f"steps: {ops(spec.steps)}")
    names.append(f"write {spec.sink.format}")
    return names


def empty_progress(spec: JobSpec, reads: list[SourceRead], device: str) -> JobProgress:
    """Every stage at 0: read stages out of their MiB on the CPU, every stage out of 1 on the GPU."""
    totals = {read.stage: to_mib(read.total_bytes) for read in reads} if device == "cpu" else {}
    stages = [
        StageProgress(name=name, done=0, total=totals[name], unit=READ_UNIT) if name in totals else StageProgress(name=name, done=0, total=1)
        for name in stage_names(spec)
    ]
    return JobProgress(stages=stages, note=POLARS_NOTE if device == "cpu" else POLARS_GPU_NOTE)


def output_columns(frame: pl.LazyFrame) -> list[ColumnSchema]:
    """The Arrow types the output's files will carry, for the manifest of a CSV sink."""
    schema = pl.DataFrame(schema=frame.collect_schema()).to_arrow().schema
    return [ColumnSchema(name=field.name, type=str(field.type)) for field in schema]


def submit(
    client: Client, job_id: str, frame: pl.LazyFrame, target: OutputTarget, progress: JobProgress, reads: list[SourceRead], device: str,
    placement: GpuPlacement | None = None,
) -> Any:
    """Submit the job's one task; its future gives a :class:`PolarsRunResult`.

    On the GPU, ``placement`` picks cudf-polars' executor (jobs/gpu_placement.py).
    """
    # Dataclasses, not tuples: dask reads tuples in task arguments as keys of other tasks.
    read_stages = {read.stage for read in reads}
    stages = [StagePlan(stage.name, stage.total, stage.unit, reads=stage.name in read_stages) for stage in progress.stages]
    metered = reads if device == "cpu" else []
    # The plan travels as Polars' own bytes: the scheduler unpickles every task's arguments,
    # and bytes cost it nothing where a LazyFrame would be rebuilt there (and again on the worker).
    plan = frame.serialize()
    return client.submit(run_attempt, job_id, plan, target, device, stages, metered, placement, key=task_key(job_id), pure=False, retries=0)


def round_trip(result: PolarsRunResult, submitted_at: float, received_at: float) -> str:
    """How long the task took to start on its worker and its result to come back, as the service's and the worker's clocks read."""
    if result.began_at is None or result.returned_at is None:
        return "round trip not measured"
    to_worker = (result.began_at - submitted_at) * 1000
    back = (received_at - result.returned_at) * 1000
    return f"to the worker {to_worker:.1f} ms, back {back:.1f} ms"


def run_attempt(job_id: str, plan: bytes, target: OutputTarget, *args: Any) -> PolarsRunResult:
    """The job's task: :func:`jobs.polars_run.run_polars_job` of the serialized plan, from an empty target.

    An error in the query fails the job (``retries=0``). A worker that dies while running it
    is not an error of the query: Dask runs the task again on another worker, as it recomputes
    a lost partition (after ``distributed.scheduler.allowed-failures`` deaths the job fails
    with KilledWorker). Whatever the dead attempt had written is removed first, so none of it
    can be committed with the new attempt's files.
    """
    if target.storage is not None:  # the service's object-store settings, for this worker's reads and writes of the sink
        storage.configure(target.storage)
    if is_url(target.location):
        SinkWriter(target.sink, job_id).abort()  # this job's part files that no manifest lists
    else:
        shutil.rmtree(target.location, ignore_errors=True)  # the job's own staging directory
    return run_polars_job(job_id, pl.LazyFrame.deserialize(io.BytesIO(plan)), target, *args)


__all__ = ["POLARS_GPU_NOTE", "POLARS_NOTE", "PolarsRunResult", "empty_progress", "output_columns", "round_trip", "run_attempt", "stage_names", "submit", "task_key"]
