"""One job written by each engine's sink, for the differential tests of what the sinks write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask

from spillway.cluster.polars_job import output_columns
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.polars_io import write_output
from spillway.jobs.sink import SinkWriter
from spillway.jobs.spec import JobSpec, SinkSpec
from spillway.jobs.validate import plan_spec


def write_on_both_engines(spec_for: Callable[[dict[str, Any]], JobSpec], fmt: str, out: Path) -> tuple[Path, Path]:
    """The job ``spec_for(sink)`` committed by the Dask engine's sink (pandas, one file per partition) and by the Polars
    engine's (one file), into ``out/<fmt>_dask`` and ``out/<fmt>_polars``; those two folders."""
    written = []
    for engine in ("dask", "polars"):
        sink = SinkSpec(format=fmt, path=str(out / f"{fmt}_{engine}"))
        writer = SinkWriter(sink, engine)
        write_with(engine, spec_for(sink.model_dump()), writer)
        writer.commit()
        written.append(Path(sink.path))
    return written[0], written[1]


def write_with(engine: str, spec: JobSpec, writer: SinkWriter) -> None:
    """``spec`` written by ``writer`` (not committed) as the engine's worker task writes it (the Polars engine: :func:`write_output`)."""
    plan = plan_spec(spec)
    if engine == "dask":
        with backend_config("pandas"), dask.config.set(scheduler="sync"):
            dask.compute(writer.write_graph(build_frame(spec, plan)))
    else:
        frame = build_lazyframe(plan, filters_before_casts=True)
        write_output(frame, writer.polars_target(output_columns(frame)))
