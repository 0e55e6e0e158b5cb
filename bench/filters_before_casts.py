"""The CPU Polars engine's filters and joins before the read casts (jobs.polars_frame), on and off, side by side.

    .venv/bin/python bench/filters_before_casts.py --data /tmp/tpch/sf1      # tpchgen-cli parquet, one directory per table

Each of the 22 TPC-H example specs is built three ways from one plan: the read casts first; the
filters first; the filters first and the joins with a filtered side before the other side's casts
(the CPU engine's plan). Each is collected with Polars' streaming engine in this process, in
turn, best of ``--rounds``; the answers are compared (sorted, 1e-9 relative). Set
POLARS_MAX_THREADS to the cores the engine should have.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

from polars.testing import assert_frame_equal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tpch_examples import QUERIES, load_spec  # noqa: E402
from spillway.jobs.polars_frame import PolarsFrames, build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="tpchgen-cli parquet: one directory per table.")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scratch = args.data.parent / "filters_before_casts"
    scratch.mkdir(exist_ok=True)
    variants = ("casts first", "filters first", "filters and joins first")
    totals = dict.fromkeys(variants, 0.0)
    for query in QUERIES:
        plan = plan_spec(JobSpec.model_validate(load_spec(query, args.data, scratch / query)))
        with mock.patch.object(PolarsFrames, "_join_before_casts", lambda *_: None):
            frames = {variants[0]: build_lazyframe(plan), variants[1]: build_lazyframe(plan, filters_before_casts=True)}
        frames[variants[2]] = build_lazyframe(plan, filters_before_casts=True)
        best = dict.fromkeys(variants, float("inf"))
        answers = {}
        for _ in range(args.rounds):
            for variant, frame in frames.items():
                started = time.perf_counter()
                answers[variant] = frame.collect(engine="streaming")
                best[variant] = min(best[variant], time.perf_counter() - started)
        columns = answers[variants[0]].columns
        for variant in variants[1:]:
            assert_frame_equal(answers[variants[0]].sort(columns), answers[variant].sort(columns), check_exact=False, rel_tol=1e-9)
        for variant in variants:
            totals[variant] += best[variant]
        print(f"{query}: " + ", ".join(f"{variant} {best[variant]:.3f} s" for variant in variants) + ", same answers", flush=True)
    print("sum of 22: " + ", ".join(f"{variant} {totals[variant]:.2f} s" for variant in variants))


if __name__ == "__main__":
    main()
