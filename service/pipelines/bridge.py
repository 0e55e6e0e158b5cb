"""How pipeline runs become ordinary jobs: the ``submit`` and ``get_job`` callbacks over the job store.

A run's job is validated, persisted and queued exactly like a ``POST /jobs``, and
carries an idempotency key, so a scheduler that dies between creating the job and
recording it finds the same job when it (or another instance) submits again. The job
is owned by the pipeline's owner, who sees it as if it had submitted it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from spillway.jobs.errors import JobNotFound
from spillway.jobs.spec import JobSpec
from spillway.service.pipelines.scheduler import GetJob, SubmitJob
from spillway.service.schemas import JobView
from spillway.service.store import JobStore


def job_callbacks(
    store: JobStore,
    enqueue: Callable[[str], None],
    *,
    backend: str,
    validate: Callable[[JobSpec], None],
) -> tuple[SubmitJob, GetJob]:
    """``submit`` and ``get_job`` for :class:`~service.pipelines.scheduler.PipelineScheduler`.

    Parameters
    ----------
    store
        The job store.
    enqueue
        Queues a PENDING job id (``JobManager.enqueue``).
    backend
        The cluster's backend, recorded on each job.
    validate
        Raises a :class:`jobs.errors.SpillwayError` for a job that cannot run, e.g.
        ``functools.partial(validate_submission, allowed_roots=settings.allowed_roots)``.
    """

    async def submit(spec: JobSpec, key: str, *, owner: str | None = None) -> str:
        try:
            # Submitted before (we crashed before recording it): the same job, unvalidated,
            # since a finished one has committed its sink and would fail the free-sink check.
            return (await asyncio.to_thread(store.get_by_idempotency_key, key, owner=owner)).id
        except JobNotFound:
            pass
        await asyncio.to_thread(validate, spec)
        # The pipeline's owner owns the job, so it sees its pipeline's runs in /jobs.
        job, created = await asyncio.to_thread(store.create, spec, backend, idempotency_key=key, owner=owner)
        if created:
            enqueue(job.id)
        return job.id

    async def get_job(job_id: str) -> JobView:
        return await asyncio.to_thread(store.get, job_id)

    return submit, get_job
