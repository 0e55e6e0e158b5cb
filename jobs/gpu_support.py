"""Whether cudf-polars can run a job's query on the GPU, known before any work.

cudf-polars translates a Polars plan into its own before it runs anything; what it cannot
translate it collects as errors (and, with ``raise_on_fail=True``, refuses at ``collect``).
:func:`gpu_refusal` runs that translation alone, the way cudf-polars' own test helper
``assert_ir_translation_raises`` does: no file is read and no kernel runs. The service uses
it at submit, where a refusal is a 422 saying why (``engine: polars`` on a GPU cluster, or a
SQL source), and in ``POST /jobs:validate``. Under ``engine: auto`` the service does not
translate: the worker's cudf-polars does so anyway before it runs anything, and its refusal
moves the job to dask-cudf with the reason recorded (one translation a job instead of two).
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from spillway.jobs import ir
from spillway.jobs.engine_choice import EngineName, choose_engine
from spillway.jobs.errors import GpuUnsupported
from spillway.jobs.logical import LogicalPlan
from spillway.jobs.status import EngineChoice

#: What the GPU engine runs: cudf-polars' in-memory executor, never a silent CPU fallback.
GPU_EXECUTOR = "in-memory"


def gpu_engine() -> Any:
    """The Polars GPU engine Spillway runs jobs on (``raise_on_fail``: a refused query fails, it never runs on the CPU).

    On a worker whose RMM allocator was configured (``rmm_pool_size``, ``rmm_async``), cudf-polars
    allocates from it. Otherwise it would make its own beside it, and the worker's pool would hold
    device memory that the query then lacks (TPC-H SF 100 q01: 24.3 s beside a 32 GB pool against
    4.2 s direct; bench/RESULTS.md).
    """
    return pl.GPUEngine(executor=GPU_EXECUTOR, raise_on_fail=True, memory_resource=configured_memory_resource())


def configured_memory_resource() -> Any:
    """This process's RMM resource if someone set one, else None (cudf-polars then picks its default)."""
    try:
        import rmm
    except ImportError:  # no GPU stack, no allocator to share
        return None
    current = rmm.mr.get_current_device_resource()
    return None if type(current) is rmm.mr.CudaMemoryResource else current


#: Functions cudf-polars 26.10 runs but answers wrongly, measured on the H200 (bench/RESULTS.md): Spillway
#: refuses them on cudf-polars itself, so under ``auto`` such a job runs on dask-cudf, which computes them in Polars on the host.
WRONG_ON_CUDF_POLARS = {
    "convert_tz": "convert_tz: cudf-polars 26.10 applies today's daylight-saving rules to past years "
                  "(1998-10-30 00:00 UTC in America/New_York: 20:00, where the time-zone database says 19:00)",
}


def untrusted_on_gpu(plan: LogicalPlan) -> str | None:
    """Why Spillway does not run ``plan`` on cudf-polars although cudf-polars would take it, or None."""
    found = sorted({node.name for expression in plan.expressions.values() for node in ir.walk(expression.node)
                    if isinstance(node, ir.Call) and node.name in WRONG_ON_CUDF_POLARS})
    return "; ".join(WRONG_ON_CUDF_POLARS[name] for name in found) or None


def plan_gpu_refusal(plan: LogicalPlan) -> str | None:
    """Why ``plan`` does not run on cudf-polars: Spillway's own reason (:func:`untrusted_on_gpu`), else cudf-polars' translation's."""
    from spillway.jobs.polars_frame import build_lazyframe

    # One file a source: cudf-polars' verdict depends on the plan and the types, not on how many files are scanned.
    # (Its 26.10 translation reads no footer: 1 ms for 2300 files on an H100, bench/gpu_refusal_cost.py.)
    return untrusted_on_gpu(plan) or gpu_refusal(build_lazyframe(plan, first_file_only=True))


#: Plan nodes cudf-polars 26.10 translates but fails on while running, as Polars' plan names them, with why.
FAILS_ON_CUDF_POLARS = {
    # A sided join on a condition other than key equalities (ON r.k = l.k AND r.b < l.a): cudf-polars takes it as a
    # hash join on no keys, which fails, "Hash join right table is empty" (an H100, 2026-12-06). Inner ones it refuses.
    re.compile(r"\b(LEFT|RIGHT|FULL) NESTED LOOP JOIN\b"): "a LEFT, RIGHT or FULL JOIN whose ON compares the two tables other "
    "than by key equalities (a nested loop join), which cudf-polars 26.10 fails on as it runs; join on the keys and filter after",
}


def fails_on_cudf_polars(frame: pl.LazyFrame) -> str | None:
    """Why cudf-polars, which would translate ``frame``, fails on it as it runs (:data:`FAILS_ON_CUDF_POLARS`), or None."""
    plan = frame.explain()
    return "; ".join(reason for pattern, reason in FAILS_ON_CUDF_POLARS.items() if pattern.search(plan)) or None


def gpu_refusal(frame: pl.LazyFrame) -> str | None:
    """Why cudf-polars cannot run ``frame`` on the GPU, or None when it can (translation, and what fails after it)."""
    if (failure := fails_on_cudf_polars(frame)) is not None:
        return failure
    from cudf_polars.dsl.translate import Translator  # the gpu extra; only called on a GPU cluster

    # No allocator here: translating needs none, and asking RMM for one could start a CUDA context in the service.
    translator = Translator(frame._ldf.visit(), pl.GPUEngine(executor=GPU_EXECUTOR, raise_on_fail=True))
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


def check_gpu_submission(plan: LogicalPlan, default: EngineName, backend: str) -> None:
    """At submit: a job that must run on cudf-polars (``engine: polars`` on a GPU cluster) and cannot is a 422 now.

    Under ``auto`` nothing is refused: the worker's cudf-polars refuses it before running anything
    and the job moves to dask-cudf (``JobManager._gpu_fallback``),
    unless only Polars can run it (a SQL source, exact decimals): then a refusal is a 422 under ``auto`` too.
    """
    choice = choose_engine(plan.spec, default, backend)
    asked = plan.spec.engine or default
    only = plan.spec.polars_only()
    if choice.engine != "polars" or choice.device != "gpu" or (asked == "auto" and only is None):
        return
    refusal = plan_gpu_refusal(plan)
    if only is not None and refusal is not None:  # no dask-cudf to move to: the Dask engine cannot run it
        raise GpuUnsupported(f"cudf-polars cannot run this job on the GPU ({refusal}), and {only[1]}: change the job, or run it "
                             "on a CPU cluster", field=only[0])
    settle_on_gpu(choice, asked, refusal)
