"""One engine of bench/dbbench.py, in a process of its own (thread limits, memory, isolation).

Started by the harness as ``python bench/dbbench_worker.py '<engine config JSON>'`` with the
thread limits already in its environment (``POLARS_MAX_THREADS`` must be set before Polars
is imported). It sets its engine up once, says it is ready, then answers requests read from
stdin, one JSON object a line: run ``question`` on ``tables`` and write the answer under
``out``; the reply has the time and the answer's checksum. Library chatter on stdout is
sent to stderr, so the reply channel carries only replies.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dbbench_questions import QUESTIONS, Question, dask_queries, polars_queries, spillway_spec  # noqa: E402

_NUMERIC_PREFIXES = ("int", "uint", "float", "double", "decimal")
_DIAGNOSE_S = 15.0  # seconds kept, before the harness's run timeout, to diagnose a hung job
_PHASES = re.compile(r"plan ([\d.]+) s, compute ([\d.]+) s, commit ([\d.]+) s")


def checksum(path: Path) -> dict[str, Any]:
    """Rows, columns, and per numeric column the sum (as float64) and nulls; NaN counts as null.

    Read column by column, so a large answer is never whole in memory.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(path), format="parquet")  # _SUCCESS, _manifest.json and .hidden files are skipped
    sums: dict[str, dict[str, float | int]] = {}
    for schema_field in dataset.schema:
        if not str(schema_field.type).startswith(_NUMERIC_PREFIXES):
            continue
        column = pc.cast(dataset.to_table(columns=[schema_field.name]).column(0), pa.float64())
        nan = pc.fill_null(pc.is_nan(column), False)
        clean = pc.if_else(nan, pa.scalar(None, pa.float64()), column)
        total = pc.sum(clean).as_py()
        sums[schema_field.name] = {"sum": float(total or 0.0), "nulls": clean.null_count}
    return {"rows": dataset.count_rows(), "columns": dataset.schema.names, "sums": sums}


class Runner(Protocol):
    """An engine set up once in this process; ``run`` times one question, reading and writing parquet."""

    versions: dict[str, Any]

    def run(self, question: Question, tables: dict[str, Path], out: Path) -> dict[str, Any]: ...

    def close(self) -> None: ...


class DuckDBEngine:
    """DuckDB in-process: views over the parquet files, ``COPY (question) TO`` parquet."""

    def __init__(self, config: dict[str, Any]) -> None:
        import duckdb

        self.con = duckdb.connect()
        self.con.execute(f"SET threads = {int(config['threads'])}")
        spill = Path(config["work"]) / "scratch" / "duckdb"
        spill.mkdir(parents=True, exist_ok=True)
        self.con.execute(f"SET temp_directory = '{spill}'")
        self.versions = {"duckdb": duckdb.__version__}

    def run(self, question: Question, tables: dict[str, Path], out: Path) -> dict[str, Any]:
        for name, path in tables.items():  # views: the files are read by each query, inside the timing
            self.con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{path}/*.parquet')")
        start = time.perf_counter()
        out.mkdir(parents=True)
        self.con.execute(f"COPY ({question.sql}) TO '{out / 'part-0.parquet'}' (FORMAT parquet)")
        return {"seconds": time.perf_counter() - start}

    def close(self) -> None:
        self.con.close()


class PolarsEngine:
    """Polars lazy: ``scan_parquet``, the query, ``sink_parquet``."""

    def __init__(self, config: dict[str, Any]) -> None:
        import polars as pl

        self.pl = pl
        self.queries = polars_queries(pl)
        self.versions = {"polars": pl.__version__, "polars_threads": pl.thread_pool_size()}

    def run(self, question: Question, tables: dict[str, Path], out: Path) -> dict[str, Any]:
        start = time.perf_counter()
        frames = {name: self.pl.scan_parquet(f"{path}/*.parquet") for name, path in tables.items()}
        out.mkdir(parents=True)
        self.queries[question.key](frames).sink_parquet(out / "part-0.parquet")
        return {"seconds": time.perf_counter() - start}

    def close(self) -> None:
        pass


class DaskEngine:
    """Dask on its own cluster: a CPU LocalCluster (pandas) or a LocalCUDACluster (cudf)."""

    def __init__(self, config: dict[str, Any]) -> None:
        import dask
        import distributed
        import pandas
        import pyarrow
        from distributed import Client

        self.backend = config["backend"]
        scratch = str(Path(config["work"]) / "scratch" / config["name"])
        if self.backend == "cudf":
            from dask_cuda import LocalCUDACluster

            self.cluster = LocalCUDACluster(
                CUDA_VISIBLE_DEVICES=config["devices"],
                protocol=config["protocol"],
                rmm_pool_size=config["rmm_pool_size"],
                enable_cudf_spill=True,
                dashboard_address=":0",
                local_directory=scratch,
            )
            # As Spillway and bench/gpu_groupby.py: p2p measured 3.5-4x slower than tasks on dask-cudf.
            self.settings = {"dataframe.backend": "cudf", "dataframe.shuffle.method": "tasks"}
        else:
            from distributed import LocalCluster

            self.cluster = LocalCluster(
                n_workers=int(config["threads"]), threads_per_worker=1, dashboard_address=":0", local_directory=scratch
            )
            self.settings = {"dataframe.backend": "pandas"}
        self.client = Client(self.cluster)
        self.queries = dask_queries()
        self.versions = {"dask": dask.__version__, "distributed": distributed.__version__, "pandas": pandas.__version__,
                         "pyarrow": pyarrow.__version__, "workers": len(self.client.scheduler_info()["workers"])}
        if self.backend == "cudf":
            self.versions.update(_gpu_versions())

    def run(self, question: Question, tables: dict[str, Path], out: Path) -> dict[str, Any]:
        import dask
        import dask.dataframe as dd

        start = time.perf_counter()
        with dask.config.set(self.settings):
            frames = {name: dd.read_parquet(str(path), columns=question.columns if name == "x" else None)
                      for name, path in tables.items()}
            self.queries[question.key](frames).to_parquet(str(out), write_index=False)
        return {"seconds": time.perf_counter() - start}

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


class SpillwayEngine:
    """The real service (``spillway serve``) on its own cluster; jobs go over REST."""

    def __init__(self, config: dict[str, Any]) -> None:
        import dask
        import pandas

        from spillway.service.launcher import launch_service

        from bench.common import service_env

        work = Path(config["work"])
        gpu = config["backend"] == "cudf"
        env = service_env(
            work,
            config["backend"],
            gpus=config["devices"] if gpu else "0",
            protocol=config["protocol"] if gpu else "tcp",
            rmm_pool=config["rmm_pool_size"] if gpu else None,
            cpu_workers=config["threads"],
            SPILLWAY_CLUSTER__LOCAL_DIRECTORY=str(work / "scratch" / config["name"]),
            SPILLWAY_MAX_CONCURRENT_JOBS="1",
            SPILLWAY_LOG_LEVEL="INFO",
        )
        self.service = launch_service(work / "services" / config["name"], env, timeout=300)
        # A job still running this close to the harness's kill is diagnosed first (see _diagnose).
        run_timeout = config.get("run_timeout")
        self.wait_limit = None if run_timeout is None else max(run_timeout - _DIAGNOSE_S, run_timeout / 2)
        self.waiter = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        with self.service.client() as client:
            info = client.cluster()
        self.versions = {"dask": dask.__version__, "pandas": pandas.__version__, "cluster_backend": info.backend,
                         "cluster_kind": info.kind}
        if config["backend"] == "cudf":
            self.versions.update(_gpu_versions())

    def run(self, question: Question, tables: dict[str, Path], out: Path) -> dict[str, Any]:
        spec = spillway_spec(question, tables, out)
        with self.service.client() as client:
            start = time.perf_counter()
            job_id = client.submit(spec).id
            # Waited for in a thread: a hung job sends no events, so a timeout inside wait() would never fire.
            waiting = self.waiter.submit(client.wait, job_id)
            try:
                job = waiting.result(timeout=self.wait_limit)
            except concurrent.futures.TimeoutError:
                raise RuntimeError(f"job {job_id} unfinished after {self.wait_limit:.0f} s; {self._diagnose(job_id)}") from None
            wall = time.perf_counter() - start
        if job.state.value != "SUCCEEDED":
            detail = job.error.message if job.error else "no error recorded"
            raise RuntimeError(f"job {job_id} {job.state.value}: {detail}\nspec: {json.dumps(spec)}")
        assert job.started_at is not None and job.finished_at is not None
        return {"seconds": (job.finished_at - job.started_at).total_seconds(), "submit_to_end_s": wall, "job_id": job_id,
                "phases_s": self._phases(job_id), "tasks_per_worker": job.progress.tasks_per_worker}

    def _phases(self, job_id: str) -> dict[str, float]:
        """plan / compute / commit seconds, from the job's own log line."""
        import httpx

        lines = httpx.get(f"{self.service.url}/jobs/{job_id}/logs", timeout=30).json().get("lines", [])
        for line in lines:
            if found := _PHASES.search(line):
                return {name: float(value) for name, value in zip(("plan", "compute", "commit"), found.groups(), strict=True)}
        return {}

    def _diagnose(self, job_id: str) -> str:
        """What a hung job's cluster is doing: its progress, tasks per worker, the workers' stacks; then cancel it."""
        from distributed import Client

        parts: list[str] = []
        try:
            with self.service.client() as api:
                view, info = api.get(job_id), api.cluster()
                parts.append(f"progress: {view.progress.model_dump_json()[:2000]}")
                with Client(info.scheduler_address, timeout=20) as dask_client:
                    parts.append("processing: " + json.dumps({w: len(t) for w, t in dask_client.processing().items()}))
                    parts.append("call stacks: " + json.dumps(dask_client.call_stack(), default=str)[:8000])
                api.cancel(job_id)
                parts.append("job cancelled")
        except Exception as exc:  # noqa: BLE001 - a diagnosis that fails must not hide the hang
            parts.append(f"diagnosis failed: {type(exc).__name__}: {exc}")
        return "\n".join(parts)

    def close(self) -> None:
        self.waiter.shutdown(wait=False, cancel_futures=True)
        self.service.stop()


ENGINES: dict[str, type[Runner]] = {"duckdb": DuckDBEngine, "polars": PolarsEngine, "dask": DaskEngine, "spillway": SpillwayEngine}


def _gpu_versions() -> dict[str, str]:
    import importlib

    found = {}
    for name in ("cudf", "dask_cudf", "dask_cuda", "rmm"):
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception as exc:  # noqa: BLE001 - report, do not fail
            found[name] = f"unavailable: {exc}"
    return found


def serve(config: dict[str, Any], requests: Any, replies: Any) -> None:
    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message, default=str) + "\n")
        replies.flush()

    start = time.perf_counter()
    try:
        engine = ENGINES[config["kind"]](config)
    except Exception as exc:  # noqa: BLE001 - the harness records it
        reply({"ready": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]})
        return
    reply({"ready": True, "setup_s": round(time.perf_counter() - start, 2), "versions": engine.versions})
    try:
        for line in requests:
            request = json.loads(line)
            question, out = QUESTIONS[request["question"]], Path(request["out"])
            shutil.rmtree(out, ignore_errors=True)
            try:
                timing = engine.run(question, {name: Path(p) for name, p in request["tables"].items()}, out)
                reply({"ok": True, **timing, "check": checksum(out)})
            except Exception as exc:  # noqa: BLE001 - one failed question does not end the engine
                reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]})
            finally:
                shutil.rmtree(out, ignore_errors=True)
    finally:
        engine.close()


def main() -> None:
    # Replies go to the real stdout; everything else written to fd 1 goes to stderr (the log).
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # SIGTERM from the harness (deadline): unwind, so the service and clusters are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    serve(json.loads(sys.argv[1]), sys.stdin, replies)


if __name__ == "__main__":
    main()
