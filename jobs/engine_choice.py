"""Which engine runs a job: the spec's ``engine``, else the service's default; ``auto`` decides.

``auto`` picks Polars whenever its lowering covers the spec, which is the whole language
today, object-store sources included (Polars reads them with the service's endpoint and region,
jobs/polars_io.py; the worker that writes takes on the same settings). A spec with a SQL source
runs on Polars whatever the default, and so does one with a source that keeps its decimals exact
(a spec asking for ``engine: dask`` with either is refused by JobSpec). On a GPU cluster the Polars job runs on cudf-polars;
where cudf-polars cannot run a query, the worker says so before doing any work and the job
moves to the Dask engine (dask-cudf), recorded with that reason (:mod:`cluster.polars_job`).
"""

from __future__ import annotations

from typing import Literal

from spillway.jobs.spec import JobSpec
from spillway.jobs.status import EngineChoice

EngineName = Literal["auto", "polars", "dask"]


def choose_engine(spec: JobSpec, default: EngineName, backend: str) -> EngineChoice:
    """The engine for ``spec`` on a cluster whose dataframe backend is ``backend`` (pandas or cudf)."""
    device = "gpu" if backend == "cudf" else "cpu"
    asked = spec.engine or default
    source = "the spec asks for it" if spec.engine else "the service default (SPILLWAY_DEFAULT_ENGINE)"
    only = spec.polars_only()
    if asked == "dask" and only is None:
        return EngineChoice(engine="dask", device=device, reason=f"engine: dask — {source}")
    if asked == "polars":
        return EngineChoice(engine="polars", device=device, reason=f"engine: polars — {source}")
    if only is not None:  # the spec cannot ask for dask then (JobSpec refuses it), so this is a default
        return EngineChoice(engine="polars", device=device, reason=f"engine: {asked} ({source}) — {only[1]}")
    return EngineChoice(engine="polars", device=device, reason=f"engine: auto ({source}) — Polars runs every step of this spec")
