"""What a Polars job's planning thread spends on each of its steps, over the 22 TPC-H example specs, in process.

    PYTHONPATH=$TREE .venv/bin/python bench/plan_steps.py --data /tmp/spw_tpch_sf1/sf1 --device cpu

The steps are those of ``cluster.manager.JobManager._plan_query_listed``: the spec checked and planned, the engine
chosen, the LazyFrame built, the output target, the reads' totals, (GPU) the placement, the empty progress. Prints
each step's milliseconds summed over the 22 plans, the mean of ``--rounds`` rounds after one warm-up round. Run it
once per tree, alternating trees, to compare them (the data: ``bench.gpu_tpch.generate``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.tpch_examples import QUERIES, load_spec  # noqa: E402
from spillway.cluster import polars_job  # noqa: E402
from spillway.jobs.engine_choice import choose_engine  # noqa: E402
from spillway.jobs.gpu_placement import place_on_gpu  # noqa: E402
from spillway.jobs.gpu_support import settle_on_gpu, untrusted_on_gpu  # noqa: E402
from spillway.jobs.polars_frame import build_lazyframe  # noqa: E402
from spillway.jobs.read_progress import source_reads  # noqa: E402
from spillway.jobs.sink import SinkWriter  # noqa: E402
from spillway.jobs.sources import files_listed_once  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402

#: A device limit for the GPU placement step (an H200's 80 %).
GPU_LIMIT = 112 * 2**30


def plan_once(spec: JobSpec, device: str) -> dict[str, float]:
    """One plan of ``spec`` for ``device``: each step's seconds, in order."""
    marks = {"start": time.perf_counter()}
    with files_listed_once():
        logical = plan_spec(spec)
        marks["plan_spec"] = time.perf_counter()
        choice = choose_engine(spec, "auto", "cudf" if device == "gpu" else "pandas")
        if device == "gpu":
            settle_on_gpu(choice, "auto", untrusted_on_gpu(logical))
        marks["engine"] = time.perf_counter()
        frame = build_lazyframe(logical, filters_before_casts=device == "cpu", ieee_comparisons=device == "gpu")
        marks["lazyframe"] = time.perf_counter()
        SinkWriter(spec.sink, "bench").polars_target(polars_job.output_columns(frame))
        marks["target"] = time.perf_counter()
        reads = source_reads(spec, frame)
        marks["reads"] = time.perf_counter()
        if device == "gpu":
            place_on_gpu(spec, reads, GPU_LIMIT)
        marks["placement"] = time.perf_counter()
        polars_job.empty_progress(spec, reads, device)
        marks["progress"] = time.perf_counter()
    names = list(marks)
    return {name: marks[name] - marks[before] for before, name in zip(names, names[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a TPC-H folder of tpchgen-cli parquet (one folder per table)")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="whose plan: the CPU's or the GPU's (no GPU needed)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sinks", type=Path, default=Path("/tmp/spillway_plan_steps"), help="where the specs' (unused) sinks point")
    args = parser.parse_args()
    args.sinks.mkdir(parents=True, exist_ok=True)
    specs = [JobSpec.model_validate(load_spec(query, args.data, args.sinks / query)) for query in QUERIES]
    totals: dict[str, float] = {}
    for round_ in range(args.rounds + 1):
        for spec in specs:
            steps = plan_once(spec, args.device)
            if round_:  # the first round warms the caches, as a service that has planned before
                for name, seconds in steps.items():
                    totals[name] = totals.get(name, 0.0) + seconds / args.rounds
    parts = ", ".join(f"{name} {seconds * 1000:.1f}" for name, seconds in totals.items())
    print(f"{args.device}: {parts} ms summed over {len(specs)} plans; total {sum(totals.values()) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
