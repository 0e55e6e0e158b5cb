"""What the NaN terms of a SQL source's comparisons (jobs/sql_nan.py) cost on Polars' CPU engine.

TPC-H's official SQL as SQL sources over a copy of the tables with every decimal column a float
(written beside ``--data`` once: with decimals, which a SQL source keeps exact, no comparison may meet
a NaN and nothing is rewritten), so that every comparison of a price, a discount or a quantity gets
its terms. Each query's LazyFrame is built twice, as for cudf-polars (``ieee_comparisons``) and as for Polars' CPU engine, and
collected alternately on the CPU (streaming engine), best of ``--repeat``; both answers must be
equal. Prints one JSON line per query and the sums.

    PYTHONPATH=. python bench/sql_nan_cost.py --data /tmp/tpch_sf1 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

from bench.tpch_examples import QUERIES, TABLES
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec


def _frame(data: Path, name: str, *, terms: bool) -> pl.LazyFrame:
    sources: dict[str, Any] = {table: {"format": "parquet", "path": str(data / table)} for table in TABLES}
    sources["answer"] = {"sql": QUERIES[name]}
    spec = JobSpec.model_validate({"sources": sources, "source": "answer", "sink": {"path": "/tmp/unused"}})
    return build_lazyframe(plan_spec(spec), ieee_comparisons=terms)


def _float_copy(data: Path) -> Path:
    """``data``'s tables with decimal columns cast to Float64, written once to ``<data>_floats``."""
    out = data.with_name(data.name + "_floats")
    for table in TABLES:
        if not (out / table / "data.parquet").exists():
            frame = pl.scan_parquet(data / table)
            decimals = [name for name, dtype in frame.collect_schema().items() if dtype.is_decimal()]
            (out / table).mkdir(parents=True, exist_ok=True)
            frame.with_columns(pl.col(decimals).cast(pl.Float64)).sink_parquet(out / table / "data.parquet")
    return out


def _seconds(collect: Callable[[], pl.DataFrame]) -> tuple[float, pl.DataFrame]:
    start = time.perf_counter()
    frame = collect()
    return time.perf_counter() - start, frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="tpchgen-cli parquet output (a directory per table)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--queries", default="", help="comma-separated, e.g. q06,q19 (default all)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    data = _float_copy(args.data)
    totals = {"with_terms_s": 0.0, "without_s": 0.0}
    for name in [n for n in sorted(QUERIES) if not args.queries or n in args.queries.split(",")]:
        frames = {"with_terms_s": _frame(data, name, terms=True), "without_s": _frame(data, name, terms=False)}
        best = dict.fromkeys(frames, float("inf"))
        answers: dict[str, pl.DataFrame] = {}
        for _ in range(args.repeat + 1):  # the first round warms the page cache
            for key, frame in frames.items():
                seconds, answers[key] = _seconds(lambda f=frame: f.collect(engine="streaming"))
                best[key] = min(best[key], seconds)
        assert_frame_equal(answers["with_terms_s"], answers["without_s"])
        # Polars writes ``x <> x`` as ``(x == x).not()``
        terms = len(re.findall(r'(col\("\w+"\)) == \1', frames["with_terms_s"].explain(optimizations=pl.QueryOptFlags.none())))
        print(json.dumps({"query": name, **{k: round(v, 4) for k, v in best.items()}, "not_equal_terms": terms}), flush=True)
        for key in totals:
            totals[key] += best[key]
    print(json.dumps({"sum": {k: round(v, 3) for k, v in totals.items()},
                      "ratio": round(totals["with_terms_s"] / totals["without_s"], 3)}), flush=True)


if __name__ == "__main__":
    main()
