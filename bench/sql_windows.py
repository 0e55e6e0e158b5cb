"""Ordered windows, side by side in one run: a SQL source (split by jobs/sql_window_run.py), the same
as a ``window`` step, and DuckDB on the same parquet file (2 M rows, in process).

    .venv/bin/python bench/sql_windows.py --work /tmp/sqlwin --rounds 3
    python3 bench/sql_windows.py --gpu --rows 20000000      # on the GPU machine: cudf-polars too

Prints each case's planning and run time per round (bench/RESULTS.md, "CPU: ordered windows").
With ``--gpu`` each case is also collected by cudf-polars' in-memory executor (``raise_on_fail``:
nothing falls back to the CPU), and its answer is checked against the CPU's once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
from polars.testing import assert_frame_equal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.polars_frame import build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402

SQL_ROWS = ("SELECT g, id, v, row_number() OVER (PARTITION BY g ORDER BY id) AS rn, "
            "sum(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS s FROM t")
SQL_RANGE = "SELECT g, id, v, rank() OVER (PARTITION BY g ORDER BY x) AS r, sum(v) OVER (PARTITION BY g ORDER BY x) AS s FROM t"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sqlwin"), help="Where the input file is written (kept between runs).")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="Also collect each case on cudf-polars (the GPU machine).")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.work / f"t_{args.rows}.parquet"
    if not path.exists():
        rng = np.random.default_rng(0)
        n = args.rows
        pd.DataFrame({"g": rng.integers(0, 1000, n), "x": rng.integers(0, 100, n), "v": rng.normal(size=n), "id": rng.permutation(n)}).to_parquet(path)
    source = {"format": "parquet", "path": str(path)}
    sink = {"path": str(args.work / "unused")}
    cases = {
        "sql_source_rows": {"sources": {"t": source, "q": {"sql": SQL_ROWS}}, "source": "q", "sink": sink},
        "window_step_rows": {"source": source, "steps": [{"op": "window", "partition_by": ["g"], "order_by": [{"column": "id"}],
                             "columns": {"rn": {"func": "row_number"}, "s": {"func": "sum", "column": "v", "frame": "running"}}}], "sink": sink},
        "sql_source_range_ties": {"sources": {"t": source, "q": {"sql": SQL_RANGE}}, "source": "q", "sink": sink},
    }
    con = duckdb.connect()
    con.execute(f"create view t as select * from read_parquet('{path}')")
    engines: dict[str, object] = {"cpu": "streaming"}
    if args.gpu:
        engines["gpu"] = pl.GPUEngine(executor="in-memory", raise_on_fail=True)
    for round_ in range(args.rounds):
        for name, spec in cases.items():
            started = time.perf_counter()
            plan = plan_spec(JobSpec.model_validate(spec))
            planned = time.perf_counter()
            answers = {}
            for engine_name, engine in engines.items():
                began = time.perf_counter()
                answers[engine_name] = build_lazyframe(plan).collect(engine=engine)  # type: ignore[call-overload]
                print(f"{round_} {name:24s} {engine_name} plan {planned - started:.3f} s run {time.perf_counter() - began:.3f} s "
                      f"rows {answers[engine_name].height}", flush=True)
            if round_ == 0 and "gpu" in answers:
                cpu, gpu = (answers[key].sort(["g", "id"]) for key in ("cpu", "gpu"))
                try:
                    assert_frame_equal(cpu, gpu, rel_tol=1e-9, check_dtypes=False)
                    print(f"  {name}: cudf-polars' answer equals the CPU's", flush=True)
                except AssertionError as error:
                    print(f"  {name}: cudf-polars' answer DIFFERS from the CPU's: {error}", flush=True)
        for name, sql in (("duckdb_rows", SQL_ROWS), ("duckdb_range_ties", SQL_RANGE)):
            started = time.perf_counter()
            rows = con.sql(sql).to_arrow_table().num_rows
            print(f"{round_} {name:24s} run {time.perf_counter() - started:.3f} s rows {rows}", flush=True)


if __name__ == "__main__":
    main()
