"""Scheduled ETL pipelines: a JobSpec template run on a cron schedule, with catch-up,
backfill, manual triggers and retries. Each run is an ordinary job.

The service builds one :class:`PipelineServices` in its lifespan and puts it on
``app.state.pipelines``; the routes in :mod:`service.routes.pipelines` read it there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spillway.jobs.spec import JobSpec
from spillway.service.pipelines.scheduler import PipelineScheduler
from spillway.service.pipelines.store import PipelineStore

__all__ = ["PipelineScheduler", "PipelineServices", "PipelineStore"]


@dataclass
class PipelineServices:
    """What the pipeline routes need.

    Parameters
    ----------
    store
        Pipelines and their runs.
    scheduler
        Fires, triggers and backfills runs.
    check_job
        Extra checks of a pipeline's spec rendered for a sample date when it is saved,
        e.g. the data roots (``jobs.sandbox.check_paths``); sources are not read then,
        since a future date's input need not exist yet.
    """

    store: PipelineStore
    scheduler: PipelineScheduler
    check_job: Callable[[JobSpec], None] | None = None
