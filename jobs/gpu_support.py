"""Whether cudf-polars can run a job's query on the GPU, known before any work.

cudf-polars translates a Polars plan into its own before it runs anything; what it cannot
translate it collects as errors (and, with ``raise_on_fail=True``, refuses at ``collect``).
:func:`gpu_refusal` runs that translation alone, the way cudf-polars' own test helper
``assert_ir_translation_raises`` does: no file is read and no kernel runs. The service uses
it at submit (``engine: polars`` on a GPU cluster: a 422 saying why) and when a job starts
(``engine: auto``: dask-cudf from the start, with the reason recorded).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from jobs.engine_choice import EngineName, choose_engine
from jobs.errors import GpuUnsupported
from jobs.spec import JobSpec
from jobs.status import EngineChoice

#: What the GPU engine runs: cudf-polars' in-memory executor, never a silent CPU fallback.
GPU_EXECUTOR = "in-memory"


def gpu_engine() -> Any:
    """The Polars GPU engine Spillway runs jobs on (``raise_on_fail``: a refused query fails, it never runs on the CPU)."""
    return pl.GPUEngine(executor=GPU_EXECUTOR, raise_on_fail=True)


def gpu_refusal(frame: pl.LazyFrame) -> str | None:
    """Why cudf-polars cannot run ``frame`` on the GPU, or None when it can (translation only)."""
    from cudf_polars.dsl.translate import Translator  # the gpu extra; only called on a GPU cluster

    translator = Translator(frame._ldf.visit(), gpu_engine())
    translator.translate_ir()
    reasons = sorted({f"{type(error).__name__}: {error}" for error in translator.errors})
    return "; ".join(reasons)[:500] if reasons else None


def settle_on_gpu(choice: EngineChoice, asked: str, refusal: str | None) -> EngineChoice:
    """The engine once cudf-polars has said whether it can run the query.

    Under ``auto`` a refused query goes to the Dask engine (dask-cudf, still on the GPUs) with
    the reason; when the Polars engine was asked for, it is a :class:`GpuUnsupported` error.
    """
    if refusal is None:
        return choice
    if asked != "auto":
        raise GpuUnsupported(f"cudf-polars cannot run this job on the GPU ({refusal}); use engine: dask (dask-cudf) or engine: auto", field="engine")
    return EngineChoice(engine="dask", device="gpu", reason=f"engine: auto — cudf-polars cannot run it ({refusal[:300]}); dask-cudf does")


def check_gpu_submission(spec: JobSpec, default: EngineName, backend: str) -> None:
    """At submit: a job that must run on cudf-polars (``engine: polars`` on a GPU cluster) and cannot is a 422 now.

    Under ``auto`` nothing is refused: the job starts on dask-cudf instead (decided when it starts).
    """
    choice = choose_engine(spec, default, backend)
    asked = spec.engine or default
    if choice.engine != "polars" or choice.device != "gpu" or asked == "auto":
        return
    from jobs.polars_frame import build_lazyframe
    from jobs.validate import plan_spec

    settle_on_gpu(choice, asked, gpu_refusal(build_lazyframe(plan_spec(spec))))
