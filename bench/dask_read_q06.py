"""TPC-H q06 on the Dask engine's pandas path: the parquet read before and after the Arrow fix.

``old`` is the read as it was (``dd.read_parquet`` with dask's own engine, then one
``astype`` per decimal and date column, which pandas does through ``decimal.Decimal`` and
``datetime.date`` objects), reproduced inline below; ``new`` is ``jobs.dask_read`` as it
is (decimals and dates converted in each partition's Arrow table). Both build the frame
of ``examples/tpch/q06.yaml`` with ``spillway.jobs.pipeline.build_frame`` under
``backend_config("pandas")`` and compute its one-row answer on the same ``LocalCluster``
(``--workers`` single-thread worker processes, as the service's CPU cluster), one run of
each read after the other in every round; the first round is cold and left out of the
median. The answers of both reads are checked against DuckDB's answer to the official SQL.

    .venv/bin/python bench/dask_read_q06.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dask.dataframe as dd  # noqa: E402

import spillway.jobs.pipeline  # noqa: E402
from bench.common import build_once, log  # noqa: E402
from bench.tpch_examples import QUERIES, load_spec, tpchgen, write_tables  # noqa: E402
from spillway.jobs.dask_read import _read_parquet, read_source  # noqa: E402
from spillway.jobs.sources import parquet_schema, plain_types, resolve_files  # noqa: E402
from spillway.jobs.spec import JobSpec, SourceSpec  # noqa: E402
from spillway.jobs.storage import storage_options  # noqa: E402

READS = ("old", "new")


def old_read_source(source: SourceSpec, *, field: str = "source") -> dd.DataFrame:
    """The parquet read of ``jobs.dask_read.read_source`` before the fix (commit 813637c)."""
    assert source.format == "parquet", "q06 reads parquet only"
    files = resolve_files(source, field=field)
    options = storage_options(files[0]) or None
    frame = _read_parquet(files, columns=source.columns, blocksize=source.blocksize or "default", storage_options=options)
    casts = {column: dtype for column, dtype in plain_types(*parquet_schema(files)).items() if column in frame.columns}
    return frame.assign(**{column: frame[column].astype(dtype) for column, dtype in casts.items()}) if casts else frame


@contextmanager
def reading(read: str) -> Iterator[None]:
    """``jobs.pipeline`` reading its sources the ``read`` way."""
    saved = spillway.jobs.pipeline.read_source
    spillway.jobs.pipeline.read_source = old_read_source if read == "old" else read_source
    try:
        yield
    finally:
        spillway.jobs.pipeline.read_source = saved


def run_once(spec: JobSpec, read: str) -> tuple[float, float, float]:
    """(seconds to build the frame, seconds to compute it, revenue) for one read."""
    with reading(read), spillway.jobs.pipeline.backend_config("pandas"):
        start = time.perf_counter()
        frame = spillway.jobs.pipeline.build_frame(spec)
        built = time.perf_counter()
        answer = frame.compute()
        done = time.perf_counter()
    return built - start, done - built, float(answer["revenue"].iloc[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("var/bench/dask_read_q06"), help="Data (made once) and scratch.")
    parser.add_argument("--out", type=Path, default=None, help="Directory for dask_read_q06_sf{SF}.json.")
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--parts", type=int, default=16, help="Files per table, as bench/gpu_tpch.py.")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes, one thread each.")
    parser.add_argument("--runs", type=int, default=3, help="Warm runs per read (after one cold round).")
    parser.add_argument("--read", default=",".join(READS), help="Reads to time, comma-separated: old, new or both.")
    args = parser.parse_args()
    reads = [read for read in args.read.split(",") if read]
    if not reads or set(reads) - set(READS):
        parser.error(f"--read takes {', '.join(READS)}")

    binary = tpchgen()
    if binary is None:
        raise SystemExit("tpchgen-cli not found: pip install tpchgen-cli")
    data = build_once(
        args.work.resolve() / f"tpch_sf{args.sf:g}_{args.parts}",
        lambda staging: write_tables(binary, staging, args.sf, args.parts) or {"sf": args.sf, "parts": args.parts},
    )
    (args.work / "out").mkdir(exist_ok=True)  # load_spec writes the filled-in spec there; nothing is sunk
    spec = JobSpec.model_validate(load_spec("q06", data, args.work.resolve() / "out" / "q06"))

    import duckdb
    from distributed import Client, LocalCluster

    con = duckdb.connect()
    con.execute(f"create view lineitem as select * from read_parquet('{data / 'lineitem'}/*.parquet')")
    expected = float(con.execute(QUERIES["q06"]).fetchone()[0])
    log(f"DuckDB q06 revenue {expected!r}")

    load_before = os.getloadavg()  # the machine may be shared: say how busy it was
    times: dict[str, list[dict[str, float]]] = {read: [] for read in reads}
    checks: dict[str, str] = {}
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0", local_directory=str(args.work / "dask")) as cluster, Client(cluster):
        for round_ in range(args.runs + 1):
            for read in reads:
                build_s, compute_s, revenue = run_once(spec, read)
                error = abs(revenue - expected) / abs(expected)
                checks[read] = f"revenue {revenue!r}, relative difference to DuckDB {error:.2g}"
                if error > 1e-9:
                    raise SystemExit(f"{read}: {checks[read]}")
                if round_:  # the first round is cold
                    times[read].append({"build_s": round(build_s, 3), "compute_s": round(compute_s, 3), "total_s": round(build_s + compute_s, 3)})
                log(f"{'cold' if not round_ else f'run {round_}'} {read}: build {build_s:.3f} s, compute {compute_s:.3f} s ({checks[read]})")

    summary = {read: {key: statistics.median(run[key] for run in runs) for key in ("build_s", "compute_s", "total_s")} for read, runs in times.items()}
    for read, median in summary.items():
        log(f"median of {args.runs} warm runs, {read}: total {median['total_s']:.3f} s (build {median['build_s']:.3f}, compute {median['compute_s']:.3f})")
    if len(summary) == 2:
        log(f"old / new: {summary['old']['total_s'] / summary['new']['total_s']:.1f}×")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {
            "args": {key: str(value) for key, value in vars(args).items()},
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()},
            "scheduler": f"distributed LocalCluster, {args.workers} worker processes × 1 thread",
            "duckdb_revenue": expected,
            "checks": checks,
            "runs": times,
            "median": summary,
        }
        path = args.out / f"dask_read_q06_sf{args.sf:g}.json"
        path.write_text(json.dumps(record, indent=1))
        log(f"wrote {path}")


if __name__ == "__main__":
    main()
