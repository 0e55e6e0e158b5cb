"""What the SQL unlike-key pass (jobs/sql_key_types.py) costs each run of a SQL source, on the 22 TPC-H queries.

    .venv/bin/python bench/sql_key_casts.py [--sf 0.01] [--repeat 20]

Each query is planned as a submit plans it (tpchgen-cli parquet, the sources' real types), then the pass runs on
the planned text over the frames' real types, ``--repeat`` times: the median, and beside it the median time to
build the query's LazyFrame (``run_sql``, pass included, nothing collected), which is what a job pays before
Polars starts. Prints one row per query and the sums. No TPC-H query compares unlike types, so none is cast;
all but q15 (an aggregate's alias compared with a subquery's) are judged by their columns' names, untyped.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlglot  # noqa: E402

from bench.tpch_examples import QUERIES, TABLES, tpchgen, write_tables  # noqa: E402
from spillway.jobs.polars_frame import PolarsFrames, build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.sql_check import DIALECT  # noqa: E402
from spillway.jobs.sql_key_types import cast_unlike_keys  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402


def median_ms(work, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    binary = tpchgen()
    if binary is None:
        raise SystemExit("tpchgen-cli not found: pip install tpchgen-cli")
    with tempfile.TemporaryDirectory() as root:
        data = Path(root)
        write_tables(binary, data, args.sf, 1)
        print(f"{'query':6} {'pass ms':>8} {'cast':>5} {'build ms':>9}")
        total_pass = total_build = 0.0
        for name in sorted(QUERIES):
            sources = {table: {"format": "parquet", "path": str(data / table)} for table in TABLES}
            spec = {"sources": {**sources, "answer": {"sql": QUERIES[name]}}, "source": "answer", "sink": {"path": str(data / "out")}}
            plan = plan_spec(JobSpec.model_validate(spec))
            query = plan.queries["sources.answer"]
            sources_of = PolarsFrames(plan)
            schemas = {table: dict(sources_of.frame_of(table, "sources.answer.sql").collect_schema()) for table in query.tables}
            cast = cast_unlike_keys(sqlglot.parse_one(query.sql, dialect=DIALECT), schemas)
            pass_ms = median_ms(lambda: cast_unlike_keys(sqlglot.parse_one(query.sql, dialect=DIALECT), schemas), args.repeat)
            build_ms = median_ms(lambda: build_lazyframe(plan), args.repeat)
            total_pass += pass_ms
            total_build += build_ms
            print(f"{name:6} {pass_ms:8.1f} {'yes' if cast else 'no':>5} {build_ms:9.1f}")
        print(f"{'sum':6} {total_pass:8.1f} {'':>5} {total_build:9.1f}")


if __name__ == "__main__":
    main()
