"""What a CSV row count costs on the Polars engine now that it parses a column (jobs.polars_io.counted_by_a_column).

A query that reads no column of a CSV file makes Polars count line ends outside quotes, which is one row short
after a stray quote; Spillway's Polars engine now parses the file's first column for such a query. This times,
in one process and interleaved, Polars' own count and the count through a column, on a generated file::

    .venv/bin/python bench/csv_row_count.py --rows 5000000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.polars_io import counted_by_a_column  # noqa: E402


def seconds(frame: pl.LazyFrame) -> tuple[float, int]:
    started = time.perf_counter()
    rows = frame.select(pl.len()).collect().item()
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.csv"
        pl.DataFrame({"id": np.arange(args.rows), "amount": rng.random(args.rows).round(4),
                      "name": rng.choice(["alpha", "beta", "gamma, with a comma"], args.rows)}).write_csv(path)
        scan = pl.scan_csv(path, infer_schema=False)
        own, by_column = [], []
        for _ in range(args.rounds):
            own.append(seconds(scan))
            by_column.append(seconds(counted_by_a_column(scan)))
        assert {rows for _, rows in own + by_column} == {args.rows}
        result = {
            "machine": platform.node(), "python": platform.python_version(), "polars": pl.__version__, "rows": args.rows,
            "file_mib": round(path.stat().st_size / 2**20, 1),
            "polars_count_s": [round(s, 4) for s, _ in own], "count_through_a_column_s": [round(s, 4) for s, _ in by_column],
            "median_ratio": round(statistics.median(s for s, _ in by_column) / statistics.median(s for s, _ in own), 2),
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
