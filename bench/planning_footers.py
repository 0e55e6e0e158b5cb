"""Time each step of a Polars job's planning thread (cluster.manager.JobManager._plan_query_listed), in process,
over a directory of N hard links to one large-footer parquet file (bench/long_query.py's spec).

    tpchgen-cli parquet -s 10 --tables=lineitem --output-dir $SPILLWAY_BENCH_WORK/sf10    # one file, a 1 MB footer
    .venv/bin/python bench/planning_footers.py --files 3251 --device gpu [--rounds 2] [--profile out.prof]

$SPILLWAY_BENCH_WORK (default /tmp/spw_planning) holds the file, the links and the sink. bench/RESULTS.md (eighth
session) has its figures before and after the footer fix.

Nothing is mocked: the same functions the manager calls, under enforce_roots and files_listed_once.
Round 1 = a fresh service process (cold lru caches); later rounds = the same job planned again.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.cluster import polars_job  # noqa: E402
from spillway.jobs.engine_choice import choose_engine
from spillway.jobs.gpu_placement import place_on_gpu
from spillway.jobs.gpu_support import settle_on_gpu, untrusted_on_gpu
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.read_progress import source_reads
from spillway.jobs.sandbox import check_paths, enforce_roots
from spillway.jobs.sink import SinkWriter
from spillway.jobs.sources import files_listed_once
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec

ROOT = Path(os.environ.get("SPILLWAY_BENCH_WORK", "/tmp/spw_planning"))
GPU_LIMIT = int(31.9 * 2**30)
AGGS = {"sum_qty": {"func": "sum", "column": "l_quantity"}, "sum_price": {"func": "sum", "column": "l_extendedprice"},
        "count_order": {"func": "size"}}

# Count footer reads (wrapping, not replacing, pyarrow's readers).
COUNTS: dict[str, int] = {}


def _counting(name, fn):
    def wrapped(*a, **k):
        COUNTS[name] = COUNTS.get(name, 0) + 1
        return fn(*a, **k)
    return wrapped


pq.read_schema = _counting("pq.read_schema", pq.read_schema)
pq.read_metadata = _counting("pq.read_metadata", pq.read_metadata)
_orig_init = pq.ParquetFile.__init__


def _pf_init(self, *a, **k):
    COUNTS["pq.ParquetFile"] = COUNTS.get("pq.ParquetFile", 0) + 1
    _orig_init(self, *a, **k)


pq.ParquetFile.__init__ = _pf_init


def links(source: Path, n: int) -> Path:
    folder = ROOT / "data" / f"n{n}"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        link = folder / f"copy{i:05d}_lineitem.parquet"
        if not link.exists():
            os.link(source, link)
    return folder


def plan_once(spec: JobSpec, device: str, roots: list[str]) -> dict[str, float]:
    marks = {"start": time.perf_counter()}
    writer = SinkWriter(spec.sink, "bench", allowed_roots=roots)
    with enforce_roots(roots), files_listed_once():
        check_paths(spec, roots)
        marks["check_paths"] = time.perf_counter()
        logical = plan_spec(spec)
        marks["plan_spec"] = time.perf_counter()
        choice = choose_engine(spec, "auto", "cudf" if device == "gpu" else "pandas")
        if choice.engine == "polars" and choice.device == "gpu":
            choice = settle_on_gpu(choice, spec.engine or "auto", untrusted_on_gpu(logical))
        marks["engine"] = time.perf_counter()
        assert choice.engine == "polars", choice
        on_cpu = choice.device == "cpu"
        frame = build_lazyframe(logical, filters_before_casts=on_cpu, ieee_comparisons=not on_cpu)
        marks["lazyframe"] = time.perf_counter()
        writer.polars_target(polars_job.output_columns(frame))
        marks["target"] = time.perf_counter()
        reads = source_reads(spec, frame)
        marks["reads"] = time.perf_counter()
        placement = place_on_gpu(spec, reads, GPU_LIMIT) if choice.device == "gpu" else None
        marks["placement"] = time.perf_counter()
        polars_job.empty_progress(spec, reads, choice.device)
        marks["progress"] = time.perf_counter()
    writer.abort()
    names = list(marks)
    steps = {n: marks[n] - marks[b] for b, n in zip(names, names[1:])}
    steps["_reason"] = (choice.reason if placement is None else placement.reason)
    steps["_working_set"] = sum(r.in_memory_bytes for r in reads)
    return steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--file", type=Path, default=ROOT / "sf10" / "lineitem.parquet")
    p.add_argument("--files", type=int, required=True)
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--profile", type=Path)
    p.add_argument("--distinct", action="store_true", help="(fixed tree) key the footer cache by path too: as if every link were its own file")
    a = p.parse_args()
    if a.distinct:
        import functools
        from spillway.jobs import parquet_footers as pf
        raw = pf._read_footer.__wrapped__

        @functools.lru_cache(maxsize=None)
        def by_path(identity, path):
            return raw(pf._FileVersion(identity, path))

        pf._read_footer = lambda version: by_path(version.identity, version.path)
    folder = links(a.file, a.files)
    spec = JobSpec.model_validate({
        "name": "long", "engine": "auto", "source": {"format": "parquet", "path": str(folder)},
        "steps": [{"op": "groupby", "by": ["l_returnflag", "l_linestatus"], "aggs": AGGS},
                  {"op": "sort", "by": ["l_returnflag", "l_linestatus"]}],
        "sink": {"path": str(ROOT / "sink"), "mode": "overwrite"}})
    roots = [str(ROOT)]
    for r in range(a.rounds):
        COUNTS.clear()
        prof = cProfile.Profile() if a.profile and r == 0 else None
        if prof:
            prof.enable()
        t = time.perf_counter()
        steps = plan_once(spec, a.device, roots)
        total = time.perf_counter() - t
        if prof:
            prof.disable()
            prof.dump_stats(str(a.profile))
        parts = ", ".join(f"{k} {v:.3f}" for k, v in steps.items() if not k.startswith("_"))
        print(f"files={a.files} device={a.device} round={r + 1}: total {total:.2f} s [{parts}] reads={dict(sorted(COUNTS.items()))} "
              f"working_set={steps['_working_set'] / 2**30:.1f} GiB", flush=True)
    print("  reason:", steps["_reason"])


if __name__ == "__main__":
    main()
