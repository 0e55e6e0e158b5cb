"""What asking cudf-polars about a job costs at submit, by the number of files a source has.

Under ``engine: polars`` on a GPU cluster the submit asks cudf-polars whether it can run the job
(jobs/gpu_support.py), for a 422 before any work. On an H100 a job over 2298 parquet files took
35 s to submit. This times, for a source of N hard links of one parquet file (a TPC-H-like
lineitem slice with decimal and date columns), each step of that check on its own::

    python3 bench/gpu_refusal_cost.py --files 10,300,2300 --out $OUT   # on the GPU machine
    .venv/bin/python bench/gpu_refusal_cost.py --files 10,300          # here: the CPU steps only

Steps: ``plan`` (the spec checked against its files, as every submit does), ``frame`` (the Polars
LazyFrame over every file), ``translate_all_files`` (cudf-polars' translation of that frame, the
check before 2026-12-05's seventh session) and ``asked`` (:func:`plan_gpu_refusal`, the check now:
the frame over each source's first file, then its translation). Two specs: Q1's groupby without a
filter, and with Q1's date filter and a filter on a decimal column (where cudf-polars reads the
footers' physical types).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.gpu_support import gpu_refusal, plan_gpu_refusal  # noqa: E402
from spillway.jobs.polars_frame import build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402

STEPS = {
    "groupby": [{"op": "groupby", "by": ["l_returnflag"], "aggs": {"qty": {"func": "sum", "column": "l_quantity"}}}],
    "filtered": [{"op": "filter", "expr": "l_shipdate <= timestamp('1998-09-02') and l_quantity < 30"},
                 {"op": "groupby", "by": ["l_returnflag"], "aggs": {"qty": {"func": "sum", "column": "l_quantity"}}}],
}


def one_file(path: Path, rows: int = 10_000) -> None:
    rng = np.random.default_rng(0)
    pl.DataFrame({
        "l_quantity": pl.Series(rng.integers(1, 50, rows).astype(str), dtype=pl.String).cast(pl.Decimal(15, 2)),
        "l_returnflag": rng.choice(["A", "N", "R"], rows),
        "l_shipdate": [dt.date(1992, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 2500, rows)],
    }).write_parquet(path)


def linked(folder: Path, original: Path, files: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(files):
        os.link(original, folder / f"part{number:05d}.parquet")
    return folder


def seconds(step: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    answer = step()
    return round(time.perf_counter() - started, 4), answer


def measure(folder: Path, steps: list[dict[str, Any]], sink: Path, gpu: bool) -> dict[str, Any]:
    spec = JobSpec.model_validate({"name": "refusal_cost", "engine": "polars", "source": {"format": "parquet", "path": str(folder)},
                                   "steps": steps, "sink": {"path": str(sink)}})
    row: dict[str, Any] = {}
    row["plan_s"], plan = seconds(lambda: plan_spec(spec))
    row["frame_s"], frame = seconds(lambda: build_lazyframe(plan))
    if gpu:
        row["translate_all_files_s"], whole = seconds(lambda: gpu_refusal(frame))
        row["asked_s"], asked = seconds(lambda: plan_gpu_refusal(plan))
        row["same_answer"] = whole == asked
        row["refusal"] = asked
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default="10,300,2300", help="comma-separated file counts")
    parser.add_argument("--out", type=Path, default=None, help="folder for gpu_refusal_cost.json")
    args = parser.parse_args()
    try:
        import cudf_polars  # noqa: F401
        gpu = True
    except ImportError:
        gpu = False
    results: dict[str, Any] = {"machine": platform.node(), "python": platform.python_version(), "polars": pl.__version__, "gpu": gpu, "rows": []}
    with tempfile.TemporaryDirectory() as temp:
        original = Path(temp) / "one.parquet"
        one_file(original)
        for count in [int(n) for n in args.files.split(",")]:
            folder = linked(Path(temp) / f"files_{count}", original, count)
            for name, steps in STEPS.items():
                row = {"files": count, "spec": name, **measure(folder, steps, Path(temp) / "out", gpu)}
                print(json.dumps(row), flush=True)
                results["rows"].append(row)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_refusal_cost.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
