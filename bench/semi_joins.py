"""Semi and anti joins on Polars and cudf-polars: the lowering's join against an inner (or left) join on the right side's distinct keys.

    .venv/bin/python bench/semi_joins.py --data /tmp/spw_tpch_sf1/sf1                 # CPU, Polars' streaming engine
    python3 bench/semi_joins.py --data /tmp/spw_tpch/sf10 --device gpu --out $OUT     # the GPU machine, cudf-polars in memory

Every TPC-H spec of ``examples/tpch`` with a semi or anti join is planned as the service plans it
on that device (``build_lazyframe``), then again with each such join rewritten, and each plan is
collected ``--rounds`` times in this process, alternating. The answers must be equal (sorted);
the table gives the best time of each. Why: on the H200 q04 (an EXISTS as a semi join) took
0.25 s through Spillway against 0.12 s for cudf-polars' own PDS-H q04, which joins inner and
takes distinct rows (bench/RESULTS.md, "Ordered windows on cudf-polars").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tpch_examples import SPECS, load_spec  # noqa: E402
from spillway.jobs import polars_frame  # noqa: E402
from spillway.jobs.polars_frame import build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec, JoinStep  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402

_MATCHED = "__spillway_matched"


def distinct_key_pairs(original: Any) -> Any:
    """``PolarsFrames.pairs`` with semi and anti joins against the right side's distinct keys (inner; left then no match)."""

    def pairs(self: Any, frame: pl.LazyFrame, right: pl.LazyFrame, step: JoinStep, field: str, columns: list[str]) -> pl.LazyFrame:
        if step.how not in ("semi", "anti"):
            return original(self, frame, right, step, field, columns)
        left_columns = frame.collect_schema().names()
        keys = right.select(step.right_keys).unique()
        if step.how == "semi":
            joined = frame.join(keys, left_on=step.left_keys, right_on=step.right_keys, how="inner", coalesce=True)
            return joined.select(left_columns)
        marked = keys.with_columns(pl.lit(True).alias(_MATCHED))
        joined = frame.join(marked, left_on=step.left_keys, right_on=step.right_keys, how="left", coalesce=True)
        return joined.filter(pl.col(_MATCHED).is_null()).select(left_columns)

    return pairs


@contextlib.contextmanager
def rewritten() -> Iterator[None]:
    original = polars_frame.PolarsFrames.pairs
    polars_frame.PolarsFrames.pairs = distinct_key_pairs(original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        polars_frame.PolarsFrames.pairs = original  # type: ignore[method-assign]


def _close(one: pl.DataFrame, other: pl.DataFrame) -> bool:
    """Same rows, sorted, numbers within 1e-9 relative (a sum in another order differs in its last bits)."""
    from polars.testing import assert_frame_equal

    try:
        assert_frame_equal(one.sort(one.columns), other.sort(other.columns), check_exact=False, rel_tol=1e-9)
    except AssertionError:
        return False
    return True


def has_semi_or_anti(raw: dict[str, Any]) -> bool:
    text = json.dumps(raw)
    return '"how": "semi"' in text or '"how": "anti"' in text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="A tpchgen-cli parquet directory (one folder per table).")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Where semi_joins_<device>.json goes.")
    args = parser.parse_args()
    engine: Any = pl.GPUEngine(executor="in-memory", raise_on_fail=True) if args.device == "gpu" else "streaming"
    scratch = Path("/tmp/spillway_semi_joins")
    scratch.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"device": args.device, "data": str(args.data), "polars": pl.__version__, "queries": {}}
    for path in sorted(SPECS.glob("q*.yaml")):
        raw = load_spec(path.stem, args.data, scratch / path.stem)
        if not has_semi_or_anti(raw):
            continue
        plan = plan_spec(JobSpec.model_validate(raw))
        frames = {"as planned": build_lazyframe(plan, filters_before_casts=args.device == "cpu")}
        with rewritten():
            frames["distinct keys"] = build_lazyframe(plan, filters_before_casts=args.device == "cpu")
        times: dict[str, list[float]] = {name: [] for name in frames}
        answers: dict[str, pl.DataFrame] = {}
        for _ in range(args.rounds):
            for name, frame in frames.items():
                started = time.perf_counter()
                answers[name] = frame.collect(engine=engine)
                times[name].append(round(time.perf_counter() - started, 4))
        first, *others = answers.values()
        same = all(_close(first, other) for other in others)
        results["queries"][path.stem] = {"times_s": times, "same_answer": same, "rows": first.height}
        print(f"{path.stem}: " + ", ".join(f"{name} {min(t):.4f} s" for name, t in times.items()) + f"; same answer: {same}", flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"semi_joins_{args.device}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
