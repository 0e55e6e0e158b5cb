"""TPC-H's official SQL as SQL sources on cudf-polars, Polars' CPU engine and DuckDB: time and answer.

For each query, the LazyFrame the service builds for the spec ``{answer: {sql: <qNN.sql>}}``
(plan_spec + build_lazyframe: checked, rewritten, regenerated SQL over the tables' scans) is
collected on the GPU (cudf-polars, Spillway's engine settings) and on the CPU (Polars' streaming
engine), and DuckDB runs the same text over the same files; every answer is compared with
DuckDB's (same columns, rows and order, numbers within 1e-9 relative). Times are the best of
``--repeat`` runs after one warm-up, in-process (no service, no Dask). Prints one JSON line per
query and writes them all to ``--out``.

    python bench/sql_tpch_gpu.py --sf 10 --data /tmp/tpch-sf10 --out /tmp/sql_tpch.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.tpch_examples import QUERIES, TABLES, plain_column, tpchgen, write_tables
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec


def same_answer(actual: pd.DataFrame, expected: pd.DataFrame) -> str | None:
    """None when ``actual`` is DuckDB's ``expected``, else what differs."""
    if list(actual.columns) != list(expected.columns):
        return f"columns {list(actual.columns)} != {list(expected.columns)}"
    if len(actual) != len(expected):
        return f"{len(actual)} rows, DuckDB {len(expected)}"
    for name in expected.columns:
        got, want = plain_column(actual[name].reset_index(drop=True)), plain_column(expected[name].reset_index(drop=True))
        if pd.api.types.is_float_dtype(want) or pd.api.types.is_integer_dtype(want):
            if not np.allclose(got.astype("float64"), want.astype("float64"), rtol=1e-9, atol=0, equal_nan=True):
                return f"column {name} differs"
        elif list(got.astype(str)) != list(want.astype(str)):
            return f"column {name} differs"
    return None


def best(run: Any, repeat: int) -> tuple[float, Any]:
    result = run()  # warm-up: file caches, GPU context, kernels
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--data", type=Path, required=True, help="tpchgen-cli output; generated there when missing")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--queries", default="", help="comma-separated, e.g. q02,q21 (default all)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    if not (args.data / "lineitem").exists():
        binary = tpchgen()
        assert binary is not None, "tpchgen-cli is not installed"
        write_tables(binary, args.data, args.sf, 16)
    import duckdb

    from spillway.jobs.gpu_support import gpu_engine, gpu_refusal

    con = duckdb.connect()
    for table in TABLES:
        con.execute(f"create view {table} as select * from read_parquet('{args.data / table}/*.parquet')")
    names = [n for n in sorted(QUERIES) if not args.queries or n in args.queries.split(",")]
    rows = []
    for name in names:
        sources: dict[str, Any] = {table: {"format": "parquet", "path": str(args.data / table)} for table in TABLES}
        sources["answer"] = {"sql": QUERIES[name]}
        spec = JobSpec.model_validate({"sources": sources, "source": "answer", "sink": {"path": "/tmp/unused"}})
        start = time.perf_counter()
        frame = build_lazyframe(plan_spec(spec))
        row: dict[str, Any] = {"query": name, "sf": args.sf, "plan_s": round(time.perf_counter() - start, 4)}
        duck_s, expected = best(lambda: con.execute(QUERIES[name]).df(), args.repeat)
        cpu_s, cpu = best(lambda: frame.collect(engine="streaming").to_pandas(), args.repeat)
        row |= {"duckdb_s": round(duck_s, 4), "cpu_s": round(cpu_s, 4), "cpu_vs_duckdb": same_answer(cpu, expected) or "same"}
        refusal = gpu_refusal(frame)
        if refusal is not None:
            row["gpu"] = f"refused: {refusal}"
        else:
            try:
                gpu_s, gpu = best(lambda: frame.collect(engine=gpu_engine()).to_pandas(), args.repeat)
                row |= {"gpu_s": round(gpu_s, 4), "gpu_vs_duckdb": same_answer(gpu, expected) or "same"}
            except Exception as exc:  # noqa: BLE001 - a benchmark reports a query cudf-polars fails on, and goes on
                row["gpu"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
