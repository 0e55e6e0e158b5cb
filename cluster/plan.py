"""A job's materialised task graph: its keys, their stages and the output keys."""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from dask.typing import Key
from distributed import Client

from spillway.cluster.planning import ConcurrentBuilds
from spillway.cluster.stages import DASK_NOTE, LabelledFrames, StageLabels, recording, sink_stage_name, stage_order, stages_of_keys
from spillway.jobs.pipeline import Backend, backend_config
from spillway.jobs.sink import SinkWriter
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobProgress, StageProgress


# Graphs are built in several threads at once, one job's planning beside another's:
# see ConcurrentBuilds for the Python 3.11 lock that had them built one at a time.
_PLANNING = ConcurrentBuilds()


@dataclass(frozen=True)
class JobPlan:
    """Everything needed to submit a job and count its progress.

    The graph is built and optimised here, on the service, so the exact keys the
    scheduler will run are known before submission.
    """

    graph: dict[Key, Any]
    result_keys: list[Key]
    stage_of_key: dict[Key, tuple[str, ...]]
    stages: list[str]

    @property
    def stage_totals(self) -> Counter[str]:
        return Counter(stage for stages in self.stage_of_key.values() for stage in stages)

    def empty_progress(self) -> JobProgress:
        """Zero done out of each stage's partition count, in the spec's order."""
        totals = self.stage_totals
        return JobProgress(
            stages=[StageProgress(name=s, done=0, total=totals[s]) for s in self.stages if totals[s]],
            tasks_done=0,
            tasks_total=len(self.stage_of_key),
            note=DASK_NOTE,
        )


def plan_job(
    spec: JobSpec, backend: Backend, writer: SinkWriter, planner: Client | None = None, logical: LogicalPlan | None = None
) -> JobPlan:
    """Build, optimise and materialise the graph that runs ``spec`` into ``writer``'s staging directory.

    Runs in a worker thread; whatever dask computes eagerly while building (a
    sort's partition boundaries) runs on the cluster through ``planner`` (or on
    dask's default scheduler without one).
    """
    labels, sink = StageLabels(), sink_stage_name(spec)
    with _PLANNING, planner.as_current() if planner is not None else nullcontext(), backend_config(backend), recording(labels):
        # Optimised before the writer sees it: a sort's boundaries are computed eagerly, and on
        # the raw frame (the writer asks for its divisions) and again on the optimised one
        # (lowering) they cost two passes over the input instead of one.
        frame = LabelledFrames(spec, logical, labels).output()
        write = labels.mark_sink(writer.write_graph(frame.optimize(fuse=False)), sink).optimize()
        graph = dict(write.__dask_graph__())
    result_keys = list(write.__dask_keys__())
    return JobPlan(graph=graph, result_keys=result_keys, stage_of_key=stages_of_keys(graph, labels, sink), stages=stage_order(labels, sink))
