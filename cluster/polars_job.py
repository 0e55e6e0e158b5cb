"""Running a Polars job on the Dask cluster: one task on one worker, stopped by restarting it.

The LazyFrame is built and checked on the service and travels to the worker pickled
(Polars serialises the plan, not data). The task (:func:`jobs.polars_run.run_polars_job`)
runs in a worker thread with the worker's threads and memory limit. A running Polars query
cannot be interrupted from outside, so cancelling one restarts the worker that runs it:
bounded, and nothing it was writing survives (the staging directory is then removed).
"""

from __future__ import annotations

import logging
from typing import Any

import polars as pl
from distributed import Client

from jobs.polars_io import OutputTarget
from jobs.polars_run import PolarsRunResult, run_polars_job
from jobs.spec import DerivedSource, JobSpec, Step
from jobs.status import ColumnSchema, JobProgress, StageProgress

log = logging.getLogger(__name__)

#: What the stage counts mean, shown with a Polars job's progress.
POLARS_NOTE = (
    "Polars runs all of a job's steps as one query on one worker: each stage shows 0 of 1 while the query "
    "runs and 1 of 1 when its output is written; elapsed_s counts the seconds so far."
)


def task_key(job_id: str) -> str:
    return f"spillway-polars-{job_id}"


def stage_names(spec: JobSpec) -> list[str]:
    """The stages a Polars job shows, named after the spec: its sources, its steps, its sink."""
    def ops(steps: list[Step]) -> str:
        return " → ".join(step.op for step in steps) or "as is"

    names = ["read source"] if not isinstance(spec.source, str) else []
    for name, source in spec.sources.items():
        names.append(f"derive {name}: {ops(source.steps)}" if isinstance(source, DerivedSource) else f"read {name}")
    for field, source in spec.source_fields():
        if ".right" in field:
            names.append(f"read {field}")
    if spec.steps:
        names.append(f"steps: {ops(spec.steps)}")
    names.append(f"write {spec.sink.format}")
    return names


def empty_progress(spec: JobSpec) -> JobProgress:
    return JobProgress(stages=[StageProgress(name=name, done=0, total=1) for name in stage_names(spec)], note=POLARS_NOTE)


def output_columns(frame: pl.LazyFrame) -> list[ColumnSchema]:
    """The Arrow types the output's files will carry, for the manifest of a CSV sink."""
    schema = pl.DataFrame(schema=frame.collect_schema()).to_arrow().schema
    return [ColumnSchema(name=field.name, type=str(field.type)) for field in schema]


def submit(client: Client, job_id: str, frame: pl.LazyFrame, target: OutputTarget, device: str, spec: JobSpec) -> Any:
    """Submit the job's one task; its future gives a :class:`PolarsRunResult`."""
    return client.submit(
        run_polars_job, job_id, frame, target, device, stage_names(spec), key=task_key(job_id), pure=False, retries=0
    )


async def stop(client: Client, job_id: str) -> None:
    """Stop a running Polars task by restarting the worker that runs it (if any does)."""
    address = await client.run_on_scheduler(_processing_on, key=task_key(job_id))
    if address is None:
        return
    log.info("job %s: restarting worker %s to stop its Polars query", job_id, address)
    await client.restart_workers([address], raise_for_error=False)


def _processing_on(dask_scheduler: Any, key: str) -> str | None:
    task = dask_scheduler.tasks.get(key)
    worker = getattr(task, "processing_on", None) if task is not None else None
    return worker.address if worker is not None else None


__all__ = ["POLARS_NOTE", "PolarsRunResult", "empty_progress", "output_columns", "stage_names", "stop", "submit", "task_key"]
