"""The CPU Polars engine's filters before the read casts (jobs.polars_frame), on and off, side by side.

    .venv/bin/python bench/filters_before_casts.py --data /tmp/tpch/sf1      # tpchgen-cli parquet, one directory per table

Each of the 22 TPC-H example specs is built both ways from one plan and collected with Polars'
streaming engine in this process, alternating, best of ``--rounds``; the answers are compared
(sorted, 1e-9 relative). Set POLARS_MAX_THREADS to the cores the engine should have.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from polars.testing import assert_frame_equal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tpch_examples import QUERIES, load_spec  # noqa: E402
from spillway.jobs.polars_frame import build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="tpchgen-cli parquet: one directory per table.")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scratch = args.data.parent / "filters_before_casts"
    scratch.mkdir(exist_ok=True)
    totals = {False: 0.0, True: 0.0}
    for query in QUERIES:
        plan = plan_spec(JobSpec.model_validate(load_spec(query, args.data, scratch / query)))
        frames = {flag: build_lazyframe(plan, filters_before_casts=flag) for flag in (False, True)}
        best = {False: float("inf"), True: float("inf")}
        answers = {}
        for _ in range(args.rounds):
            for flag, frame in frames.items():
                started = time.perf_counter()
                answers[flag] = frame.collect(engine="streaming")
                best[flag] = min(best[flag], time.perf_counter() - started)
        columns = answers[False].columns
        assert_frame_equal(answers[False].sort(columns), answers[True].sort(columns), check_exact=False, rel_tol=1e-9)
        for flag in totals:
            totals[flag] += best[flag]
        print(f"{query}: casts first {best[False]:.3f} s, filters first {best[True]:.3f} s, same answer", flush=True)
    print(f"sum of 22: casts first {totals[False]:.2f} s, filters first {totals[True]:.2f} s")


if __name__ == "__main__":
    main()
