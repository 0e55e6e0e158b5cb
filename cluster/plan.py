"""A job's materialised task graph: its keys, their stages and the output keys."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from dask.core import toposort
from dask.typing import Key
from dask.utils import key_split
from distributed import Client

from jobs.pipeline import Backend, backend_config, build_frame
from jobs.sink import SinkWriter
from jobs.logical import LogicalPlan
from jobs.spec import JobSpec
from jobs.status import JobProgress, StageProgress


# One graph is built at a time. On Python 3.11, functools.cached_property holds one
# lock per attribute for all instances, and dask-expr nests them in different orders
# on different graphs, so two graphs built at once in two threads can deadlock.
_PLANNING = threading.Lock()


@dataclass(frozen=True)
class JobPlan:
    """Everything needed to submit a job and count its progress.

    The graph is built and optimised here, on the service, so the exact keys the
    scheduler will run are known before submission.
    """

    graph: dict[Key, Any]
    result_keys: list[Key]
    stage_of_key: dict[Key, str]

    @property
    def stage_totals(self) -> Counter[str]:
        return Counter(self.stage_of_key.values())

    def empty_progress(self) -> JobProgress:
        """Zero done out of each stage's partition count, in graph order."""
        totals = self.stage_totals
        return JobProgress(stages=[StageProgress(name=s, done=0, total=totals[s]) for s in dict.fromkeys(self.stage_of_key.values())])


def plan_job(
    spec: JobSpec, backend: Backend, writer: SinkWriter, planner: Client | None = None, logical: LogicalPlan | None = None
) -> JobPlan:
    """Build, optimise and materialise the graph that runs ``spec`` into ``writer``'s staging directory.

    Runs in a worker thread; whatever dask computes eagerly while building (a
    sort's partition boundaries) runs on the cluster through ``planner`` (or on
    dask's default scheduler without one).
    """
    with _PLANNING, planner.as_current() if planner is not None else nullcontext(), backend_config(backend):
        # Optimised before the writer sees it: a sort's boundaries are computed eagerly, and on
        # the raw frame (the writer asks for its divisions) and again on the optimised one
        # (lowering) they cost two passes over the input instead of one.
        write = writer.write_graph(build_frame(spec, logical).optimize(fuse=False)).optimize()
        graph = dict(write.__dask_graph__())
    result_keys = list(write.__dask_keys__())
    # Topological order, so stages are listed the way data flows (read first, write last).
    return JobPlan(graph=graph, result_keys=result_keys, stage_of_key={key: key_split(key) for key in toposort(graph)})
