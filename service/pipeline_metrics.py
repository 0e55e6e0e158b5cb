"""Pipeline series read from the database at scrape time: runs by state, and how late each pipeline is.

A scheduled run is due when its data interval ends. Its lateness is how long after that it
started, or, while it is still QUEUED, how long it has waited so far: an alert on
``spillway_pipeline_lateness_seconds > 600`` fires for a run that is stuck behind
``max_active_runs`` or a stopped scheduler, not only after it finally starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import and_, func, or_, select

from spillway.service.pipelines.models import RunState, RunTrigger
from spillway.service.pipelines.tables import aware, pipelines_table, runs_table

if TYPE_CHECKING:
    from spillway.service.pipelines import PipelineStore

Clock = Callable[[], datetime]


class PipelineCollector(Collector):
    """``spillway_pipeline_runs{pipeline,state}`` and ``spillway_pipeline_lateness_seconds{pipeline}``."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.store: PipelineStore | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.store is None:
            return
        runs = GaugeMetricFamily(
            "spillway_pipeline_runs", "Runs in each pipeline's kept history, by state (FAILED, SUCCEEDED, ... are outcomes).", labels=["pipeline", "state"]
        )
        late = GaugeMetricFamily(
            "spillway_pipeline_lateness_seconds",
            "How long after its interval ended the latest scheduled run started (or, still QUEUED, has waited so far).",
            labels=["pipeline"],
        )
        now = self.clock()
        r, p = runs_table.c, pipelines_table.c
        counted = select(p.name, r.state, func.count()).join(runs_table, r.pipeline_id == p.id).group_by(p.name, r.state)
        # The latest scheduled run that started or still waits (a SKIPPED or unrenderable one never runs).
        waiting = or_(r.started_at.is_not(None), r.state == RunState.QUEUED.value)
        scheduled = and_(r.trigger == RunTrigger.SCHEDULED.value, r.state != RunState.SKIPPED.value, waiting)
        newest = select(r.pipeline_id, func.max(r.logical_date).label("latest")).where(scheduled).group_by(r.pipeline_id).subquery()
        latest = (
            select(p.name, r.data_interval_end, r.started_at)
            .join(runs_table, r.pipeline_id == p.id)
            .join(newest, and_(newest.c.pipeline_id == r.pipeline_id, newest.c.latest == r.logical_date))
        )
        with self.store.engine.connect() as conn:
            for name, state, count in conn.execute(counted):
                runs.add_metric([name, state], count)
            for name, due, started in conn.execute(latest):
                end = aware(started) or now
                late.add_metric([name], max((end - aware(due)).total_seconds(), 0.0))  # type: ignore[operator]
        yield runs
        yield late
