"""TPC-H through Spillway's specs, side by side with cudf-polars, Polars CPU and DuckDB.

Every engine reads the same tpchgen-cli parquet files in every query (nothing is held in
memory between queries). Spillway runs the specs of ``examples/tpch`` as jobs over REST
on its own cluster and writes each answer as parquet; the others return theirs in memory.
Every answer is checked against DuckDB's answer to the official SQL
(``examples/tpch/sql``): same rows, same order, numbers within ``--rtol``.

On the GPU machine (see bench/RESULTS.md for the staging)::

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site \\
        python3 bench/gpu_tpch.py --out $OUT --sf 10 --gpus 0 --gpus 0,1

On a CPU (a smoke test of the harness; Spillway on pandas)::

    .venv/bin/python bench/gpu_tpch.py --out /tmp/tpch-out --sf 0.1 --backend pandas --engines spillway,duckdb

The Polars engines take their queries from cudf-polars' own PDS-H harness
(``cudf_polars.streaming.benchmarks.pdsh``), so they are the queries cudf-polars is
published with, not ours.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import log, service_env  # noqa: E402
from bench.tpch_examples import QUERIES, SPECS, TABLES, load_spec, plain_column, tpchgen, write_tables  # noqa: E402
from spillway.jobs.sink import read_manifest  # noqa: E402
from spillway.service.launcher import ServiceProcess, launch_service  # noqa: E402

ENGINES = ("spillway", "spillway-plan", "spillway-plan-filters", "cudf-polars", "cudf-polars-dask", "polars-cpu", "duckdb")
# Where the GPU machine's wheelhouse installs console scripts (see ../shared/gpu/README.md).
_STAGED_TPCHGEN = Path("/tmp/site/bin/tpchgen-cli")


def tpchgen_binary() -> str:
    found = tpchgen()
    if found is None and _STAGED_TPCHGEN.exists():
        _STAGED_TPCHGEN.chmod(0o755)  # an install with --target does not keep the executable bit
        found = str(_STAGED_TPCHGEN)
    if found is None:
        raise SystemExit("tpchgen-cli not found: pip install tpchgen-cli")
    return found


def generate(work: Path, sf: float, parts: int) -> Path:
    """``tpchgen-cli`` parquet, each table a directory of ``parts`` files (dask partitions)."""
    data = work / f"sf{sf:g}"
    if not (data / "lineitem").is_dir():
        shutil.rmtree(data, ignore_errors=True)
        started = time.perf_counter()
        write_tables(tpchgen_binary(), data, sf, parts)
        log(f"generated SF {sf:g} in {time.perf_counter() - started:.1f} s")
    return data


def same_answer(actual: pd.DataFrame, expected: pd.DataFrame, rtol: float) -> str | None:
    """None when equal (by position: names differ between engines), else why not."""
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != DuckDB's {expected.shape}"
    for position, name in enumerate(expected.columns):
        got, want = plain_column(actual.iloc[:, position].reset_index(drop=True)), plain_column(expected[name].reset_index(drop=True))
        if pd.api.types.is_float_dtype(want):
            if not np.allclose(got.astype("float64"), want, rtol=rtol, atol=0, equal_nan=True):
                worst = float(((got.astype("float64") - want).abs() / want.abs()).max())
                return f"column {name}: max relative difference {worst:.3g} > {rtol}"
        elif list(got.astype(str)) != list(want.astype(str)):
            return f"column {name}: values differ"
    return None


def committed(sink: Path) -> pd.DataFrame:
    """The sink's part files in manifest (= partition) order."""
    frames = [pd.read_parquet(sink / entry["path"]) for entry in read_manifest(sink)["files"]]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


class Run:
    """Results of one benchmark run, saved after every measurement."""

    def __init__(self, out: Path, args: argparse.Namespace) -> None:
        self.path = out / f"tpch_sf{args.sf:g}.json"
        self.data: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "queries": {}, "errors": {}}
        self.started = time.perf_counter()
        self.deadline = args.deadline

    def left(self) -> float:
        return self.deadline - (time.perf_counter() - self.started)

    def record(self, engine: str, query: str, entry: dict[str, Any]) -> None:
        self.data["queries"].setdefault(query, {})[engine] = entry
        self.save()

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=2, default=str))


def time_engine(run: Run, engine: str, queries: list[str], iterations: int, execute: Callable[[str], pd.DataFrame], expected: dict[str, pd.DataFrame], rtol: float) -> None:
    for query in queries:
        if run.left() < 20:
            run.data["errors"][f"{engine}/{query}"] = "skipped: deadline"
            continue
        times, problem = [], None
        try:
            for _ in range(iterations):
                started = time.perf_counter()
                answer = execute(query)
                times.append(round(time.perf_counter() - started, 4))
            if query in expected:
                problem = same_answer(answer, expected[query], rtol)
        except Exception as exc:  # noqa: BLE001 - record and go on
            problem = f"{type(exc).__name__}: {str(exc)[:500]}"
        run.record(engine, query, {"times_s": times, "warm_s": times[-1] if times else None, "check": problem or "equal to DuckDB"})
        log(f"{engine} {query}: {times} {problem or 'ok'}")


def duckdb_engine(data: Path, threads: int | None) -> Callable[[str], pd.DataFrame]:
    import duckdb

    con = duckdb.connect()
    if threads:
        con.execute(f"set threads = {threads}")
    for table in TABLES:
        con.execute(f"create view {table} as select * from read_parquet('{data / table}/*.parquet')")
    return lambda query: con.execute(QUERIES[query]).df()


def polars_engine(data: Path, sf: float, engine: Any) -> Callable[[str], pd.DataFrame]:
    from cudf_polars.streaming.benchmarks.pdsh import PDSHQueries

    config = SimpleNamespace(dataset_path=str(data), suffix="", scale_factor=sf)

    def execute(query: str) -> pd.DataFrame:
        result = getattr(PDSHQueries, f"q{int(query[1:])}")(config)
        return result.frame.collect(engine=engine).to_pandas()

    return execute


def time_dask_engine(run: Run, data: Path, args: argparse.Namespace, queries: list[str], expected: dict[str, pd.DataFrame]) -> None:
    """cudf-polars' own DaskEngine on a LocalCUDACluster with a worker per entry of ``--gpus`` (the first), one engine for all queries: the peer of a Spillway job across the GPU workers."""
    from cudf_polars.engine.dask import DaskEngine
    from cudf_polars.engine.hardware_binding import HardwareBindingPolicy
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from spillway.cluster.gpu import add_shared_workers

    devices = (args.gpus or ["0"])[0].split(",")
    distinct = list(dict.fromkeys(devices))
    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(distinct), n_workers=len(distinct), threads_per_worker=1,
                          protocol=args.protocol, dashboard_address=":0", silence_logs=40) as cluster:
        if len(distinct) < len(devices):
            add_shared_workers(cluster, devices)
        with Client(cluster) as client:
            client.wait_for_workers(len(devices), timeout=120)
            started = time.perf_counter()
            engine = DaskEngine(dask_client=client, engine_options={
                "hardware_binding": HardwareBindingPolicy(enabled=False), "raise_on_fail": True, "allow_gpu_sharing": len(distinct) < len(devices),
            })
            run.data["cudf_polars_dask"] = {"workers": len(devices), "bootstrap_s": round(time.perf_counter() - started, 3)}
            try:
                time_engine(run, f"cudf-polars-dask-{len(devices)}w", queries, args.iterations, polars_engine(data, args.sf, engine), expected, args.rtol)
            finally:
                engine.shutdown()


def spillway_engine(service: ServiceProcess, data: Path, scratch: Path, timeout: float, engine: str) -> Callable[[str], pd.DataFrame]:
    """Each query as a job over REST, its committed parquet read back, through one SDK client.

    One client for the whole run, as a user's program holds one; each job's record keeps
    where its time went: the POST, the wait for its end event, the read of its output, and
    the service's own created → started → finished times.
    """
    counter = iter(range(10_000))
    client = service.client()

    def execute(query: str) -> pd.DataFrame:
        sink = scratch / f"{query}_{next(counter)}"
        spec = {**load_spec(query, data, sink), "engine": engine}
        start = time.perf_counter()
        accepted = client.submit(spec)
        submitted = time.perf_counter()
        job = client.wait(accepted.id, timeout=timeout)
        ended = time.perf_counter()
        if job.state.value != "SUCCEEDED":
            raise RuntimeError(f"job {job.id} {job.state.value}: {job.error.message if job.error else ''}")
        answer = committed(sink)
        read_s = time.perf_counter() - ended
        # Not timed: the service's own split of the run (plan, compute, commit), from the job's log.
        lines = client.logs(job.id)
        phases = next((line.split(" ", 1)[1] for line in lines if ", compute " in line), None)
        trip = next((line.rsplit("; ", 1)[1] for line in lines if "to the worker " in line), None)
        # Across the GPU workers: the run's own steps (engine, query, files, statistics).
        steps = next((line.split(" s (", 1)[1].split("), of which", 1)[0] for line in lines if "DaskEngine ran on" in line and " s (" in line), None)
        execute.jobs.append({  # type: ignore[attr-defined]
            "query": query, "run_s": (job.finished_at - job.started_at).total_seconds(),
            "queue_s": (job.started_at - job.created_at).total_seconds(),
            "submit_s": round(submitted - start, 4), "wait_s": round(ended - submitted, 4), "read_s": round(read_s, 4), "phases": phases, "trip": trip, "multi_gpu_steps": steps,
            "tasks_per_worker": job.progress.tasks_per_worker,
            "engine": job.progress.engine.model_dump() if job.progress.engine else None, "engine_s": job.progress.elapsed_s,
        })
        return answer

    execute.jobs = []  # type: ignore[attr-defined]
    return execute


def plan_engine(data: Path, scratch: Path, device: str, filters_first: bool | None = None) -> Callable[[str], pd.DataFrame]:
    """Spillway's own LazyFrame for each spec, collected in this process: the Polars engine without the service.

    ``filters_first``: a source's first filters before its read casts (None: as the service plans on that device).
    """
    import polars as pl

    from spillway.jobs.polars_frame import build_lazyframe
    from spillway.jobs.spec import JobSpec
    from spillway.jobs.validate import plan_spec

    engine: Any = pl.GPUEngine(executor="in-memory", raise_on_fail=True) if device == "gpu" else "streaming"

    def execute(query: str) -> pd.DataFrame:
        plan = plan_spec(JobSpec.model_validate(load_spec(query, data, scratch / query)))
        frame = build_lazyframe(plan, filters_before_casts=device == "cpu" if filters_first is None else filters_first)
        return frame.collect(engine=engine).to_pandas()

    return execute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Where tpch_sf<SF>.json and service logs go.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw_tpch"), help="Scratch: data, stores, outputs.")
    parser.add_argument("--sf", type=float, default=10, help="TPC-H scale factor.")
    parser.add_argument("--parts", type=int, default=16, help="Files per table (dask partitions per table).")
    parser.add_argument("--queries", default=",".join(sorted(p.stem for p in SPECS.glob("q*.yaml"))), help="Comma-separated, e.g. q01,q06.")
    parser.add_argument("--engines", default=",".join(e for e in ENGINES if e != "spillway-plan-filters"),
                        help=f"Comma-separated subset of {', '.join(ENGINES)} (default: all but spillway-plan-filters, the plan "
                             "with a source's filters and read casts in the other order than the service's on that device).")
    parser.add_argument("--backend", choices=("cudf", "pandas"), default="cudf", help="Spillway's backend.")
    parser.add_argument("--gpus", action="append", help="CUDA_VISIBLE_DEVICES of one Spillway run; repeat for 1 and 2 GPUs (default: 0).")
    parser.add_argument("--protocol", default="tcp", choices=("tcp", "ucx"))
    parser.add_argument("--rmm-pool", default=None, help="RMM pool per worker, e.g. 32GB (default: none, the service's default)")
    parser.add_argument("--cpu-workers", type=int, default=2, help="Spillway workers on the pandas backend.")
    parser.add_argument("--cpu-threads", type=int, default=1, help="Threads per Spillway worker on the pandas backend.")
    parser.add_argument("--spillway-engines", default="auto,dask",
                        help="Spillway's engines to run (the spec's engine field), comma-separated: auto (a user's default), polars, dask.")
    parser.add_argument("--gpu-trace-progress", default="on", help="on, off or on,off: Spillway's GPU runs with cudf-polars' traces (live progress) on, off, or both.")
    parser.add_argument("--gpu-multi-worker", default="auto", choices=("auto", "off", "always"),
                        help="Spillway's cluster.gpu_multi_worker: 'always' runs every query across all GPU workers (cudf-polars' DaskEngine).")
    parser.add_argument("--iterations", type=int, default=2, help="Runs per query; the last is reported as warm.")
    parser.add_argument("--rtol", type=float, default=1e-6, help="Relative tolerance against DuckDB.")
    parser.add_argument("--deadline", type=float, default=1e9, help="Seconds; what would start later is skipped.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    engines = args.engines.split(",")
    queries = args.queries.split(",")
    run = Run(args.out, args)

    started = time.perf_counter()
    data = generate(args.work, args.sf, args.parts)
    run.data["data"] = {"path": str(data), "bytes": sum(f.stat().st_size for f in data.rglob("*.parquet")), "generate_s": round(time.perf_counter() - started, 2)}

    log("DuckDB: the referee's answers (and its times)")
    referee = duckdb_engine(data, None)
    expected = {query: referee(query) for query in queries}
    if "duckdb" in engines:
        time_engine(run, "duckdb", queries, args.iterations, referee, {}, args.rtol)

    if "cudf-polars" in engines or "polars-cpu" in engines:
        try:
            import polars as pl

            run.data["polars_version"] = pl.__version__
            if "polars-cpu" in engines:
                time_engine(run, "polars-cpu", queries, args.iterations, polars_engine(data, args.sf, "streaming"), expected, args.rtol)
            if "cudf-polars" in engines:
                gpu = pl.GPUEngine(executor="in-memory", raise_on_fail=True)
                time_engine(run, "cudf-polars", queries, args.iterations, polars_engine(data, args.sf, gpu), expected, args.rtol)
            if "cudf-polars-dask" in engines:
                time_dask_engine(run, data, args, queries, expected)
        except ImportError as exc:
            run.data["errors"]["polars"] = f"skipped: {exc}"
            log(f"polars engines skipped: {exc}")

    if "spillway-plan" in engines:
        device = "gpu" if args.backend == "cudf" else "cpu"
        time_engine(run, f"spillway-plan-{device}", queries, args.iterations, plan_engine(data, args.work, device), expected, args.rtol)
    if "spillway-plan-filters" in engines:  # the other order of a source's filters and read casts, side by side
        device = "gpu" if args.backend == "cudf" else "cpu"
        time_engine(run, f"spillway-plan-{device}-filters-{'last' if device == 'cpu' else 'first'}", queries, args.iterations,
                    plan_engine(data, args.work, device, filters_first=device != "cpu"), expected, args.rtol)

    traces = args.gpu_trace_progress.split(",") if args.backend == "cudf" else ["on"]
    spillway_runs = [(gpus, engine, trace) for gpus in args.gpus or ["0"] for engine in args.spillway_engines.split(",") for trace in traces]
    if "spillway" in engines:
        for gpus, engine, trace in spillway_runs:
            name = f"spillway-{engine}-{args.backend}" + (f"-{len(gpus.split(','))}gpu" if args.backend == "cudf" else "")
            name += "-notrace" if trace == "off" else ""
            name += "-multi" if args.gpu_multi_worker == "always" else ""
            if run.left() < 60:
                run.data["errors"][name] = "skipped: deadline"
                continue
            scratch = args.work / f"out_{name}"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            env = service_env(args.work, args.backend, gpus=gpus, protocol=args.protocol, rmm_pool=args.rmm_pool, cpu_workers=args.cpu_workers,
                              cpu_threads=args.cpu_threads, SPILLWAY_CLUSTER__GPU_TRACE_PROGRESS="false" if trace == "off" else "true",
                              SPILLWAY_CLUSTER__GPU_MULTI_WORKER=args.gpu_multi_worker)
            service = launch_service(args.work / f"svc_{name}", env, timeout=300)
            try:
                execute = spillway_engine(service, data, scratch, timeout=max(60.0, run.left()), engine=engine)
                time_engine(run, name, queries, args.iterations, execute, expected, args.rtol)
                run.data.setdefault("spillway_jobs", {})[name] = execute.jobs  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001
                run.data["errors"][name] = traceback.format_exc()[-3000:]
            finally:
                service.stop()
                (args.out / f"service_{name}.log").write_text(service.log()[-200_000:])
    run.save()
    table(run.data, args.out)


def table(data: dict[str, Any], out: Path) -> None:
    """A markdown table: warm seconds per query and engine, with the sum."""
    engines = sorted({engine for per in data["queries"].values() for engine in per})
    lines = ["| query | " + " | ".join(engines) + " |", "|---" * (len(engines) + 1) + "|"]
    sums = dict.fromkeys(engines, 0.0)
    for query, per in sorted(data["queries"].items()):
        cells = []
        for engine in engines:
            entry = per.get(engine)
            if not entry or entry["warm_s"] is None:
                cells.append("—")
                continue
            sums[engine] += entry["warm_s"]
            mark = "" if entry["check"] == "equal to DuckDB" else " ✗"
            cells.append(f"{entry['warm_s']:.3f}{mark}")
        lines.append(f"| {query} | " + " | ".join(cells) + " |")
    lines.append("| **sum** | " + " | ".join(f"**{sums[e]:.2f}**" for e in engines) + " |")
    text = "\n".join(lines)
    (out / "tpch_table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("KVIKIO_COMPAT_MODE", "on")
    main()
