"""db-benchmark's groupby (10 questions) and join (5 questions), side by side in one run.

Spillway (the real service, jobs over REST) against Dask directly, DuckDB and Polars, on
data from a port of db-benchmark's generators (bench/dbbench_data.py); the questions, in
each engine's own idiom, are in bench/dbbench_questions.py.

CPU (pandas), every engine limited to 2 threads:

    .venv/bin/python bench/dbbench.py --rows 1e7 --threads 2 --deadline 2400

GPU machine (cudf): Spillway on 1 and on 2 GPUs, dask-cudf directly on 1 and 2 GPUs, and
Dask, DuckDB and Polars on all the host's cores:

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site python3 bench/dbbench.py \\
        --backend cudf --gpus 1,2 --rows 1e8 --out $OUT --work /tmp/dbbench --deadline 1500

Fairness: every engine reads the parquet inputs and writes its answer as parquet inside
every timed run (Spillway must: it is a service), nothing is cached between runs, and each
engine runs in a process of its own with its thread limit (DuckDB ``SET threads``, Polars
``POLARS_MAX_THREADS``, Dask and Spillway a cluster of --threads single-threaded workers;
on GPUs one worker per GPU). Spillway's time is the job's run time from its own
timestamps (RUNNING → SUCCEEDED: planning, execution, commit); submit→end (REST submit,
validation against the parquet schemas, queue, run) is recorded beside it. Each question
runs --runs times; tables show the best run after the first, and the first in parentheses.
Answers are checked across engines: same row count, and per numeric column the same sum
(relative tolerance --rel-tol) and null count; a difference shows as MISMATCH.

Engines run one at a time (--order engine, the default): all questions on one engine,
then the next, so no other engine's idle cluster shares the machine and, on GPUs, one
memory pool at a time. Each run also records the share of the machine's CPU that other
processes used meanwhile; tables mark a shown time with ⚠ when that was 10 % or more.
On a shared machine, --quiet-wait makes each run first wait for the others to calm down.

Deadline: --deadline counts from the start (data generation included); in engine order
each engine gets an equal share of the time left, and what it leaves unused passes on.
A run still going when time is up is killed; later runs and questions are skipped, and a
further run is skipped when the first took longer than the time left. Tables and JSON say
which.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log  # noqa: E402
from bench.dbbench_data import DataSet, ensure_data, pretty_rows  # noqa: E402
from bench.dbbench_process import CpuMeter, Engine, EngineProcess, machine_info  # noqa: E402
from bench.dbbench_questions import WORKLOADS, Question, select_questions  # noqa: E402
from bench.dbbench_report import CONTENDED, check_answers, workload_tables  # noqa: E402

DEFAULT_ENGINES = {"pandas": "spillway,dask,duckdb,polars", "cudf": "spillway,dask-cudf,dask-cpu,duckdb,polars"}
FAIRNESS = (
    "Every engine reads the parquet inputs and writes its answer as parquet in each timed run; nothing is cached "
    "between runs. Each engine runs in its own process with its thread limit. Spillway time = job run time from its "
    "own timestamps; submit→end recorded beside it. Answers compared by row count and per-column sums and null counts."
)


def expand_engines(names: str, backend: str, gpus: list[int], threads: int) -> list[Engine]:
    """Engine names → engines; on cudf, spillway and dask-cudf become one engine per GPU count.

    Raises
    ------
    ValueError
        For an unknown name, or a GPU engine on the pandas backend.
    """
    engines: list[Engine] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name in ("duckdb", "polars"):
            engines.append(Engine(name, name, "pandas", threads))
        elif name == "dask-cpu" or (name == "dask" and backend == "pandas"):
            engines.append(Engine(name, "dask", "pandas", threads))
        elif name in ("spillway", "dask", "dask-cudf") and backend == "cudf":
            kind = "spillway" if name == "spillway" else "dask"
            label = "spillway" if name == "spillway" else "dask-cudf"
            engines += [Engine(f"{label}-{n}gpu", kind, "cudf", threads, ",".join(map(str, range(n)))) for n in gpus]
        elif name == "spillway":
            engines.append(Engine(name, name, "pandas", threads))
        elif name == "dask-cudf":
            raise ValueError("dask-cudf needs --backend cudf")
        else:
            raise ValueError(f"unknown engine '{name}': use spillway, dask, dask-cudf, dask-cpu, duckdb, polars")
    return engines


class Harness:
    """Runs the selected questions on the engines within the deadline and records everything."""

    def __init__(self, args: argparse.Namespace, engines: list[Engine], questions: list[Question], data: DataSet, started: float) -> None:
        self.args, self.engines, self.questions, self.data = args, engines, questions, data
        self.end = started + args.deadline if args.deadline else math.inf
        self.share_end = math.inf  # --order engine: the end of the current engine's share of the time
        self.config = {"work": str(args.work), "protocol": args.protocol, "rmm_pool_size": args.rmm_pool_size,
                       "run_timeout": args.run_timeout}
        self.processes: dict[str, EngineProcess] = {}
        self.broken: dict[str, str] = {}
        self.results: dict[str, Any] = {}
        self.versions: dict[str, Any] = {}
        self.meter = CpuMeter()
        self.counter = 0

    def remaining(self) -> float:
        return min(self.end, self.share_end) - time.monotonic()

    def _out_of_time(self) -> str:
        return "deadline reached" if self.end <= self.share_end else "this engine's share of the deadline is used"

    def process(self, engine: Engine) -> EngineProcess:
        """The engine's running process, started (and waited for) if need be.

        Raises
        ------
        RuntimeError
            If it could not start; the engine is then marked broken.
        """
        if engine.name in self.processes:
            return self.processes[engine.name]
        if engine.name in self.broken:
            raise RuntimeError(self.broken[engine.name])
        log(f"starting {engine.name}")
        proc = EngineProcess(engine, self.config, self.args.work / "logs" / f"{engine.name}.log")
        ready = proc.receive(min(self.remaining(), 900.0))
        if not ready or not ready.get("ready"):
            proc.kill()
            reason = (ready or {}).get("error") or ("timed out" if ready else f"exited:\n{proc.log_tail()}")
            self.broken[engine.name] = f"{engine.name} did not start: {reason}"
            raise RuntimeError(self.broken[engine.name])
        log(f"{engine.name} ready in {ready['setup_s']} s: {ready['versions']}")
        self.versions[engine.name] = {**ready["versions"], "setup_s": ready["setup_s"]}
        self.processes[engine.name] = proc
        return proc

    def retire(self, engine: Engine) -> None:
        proc = self.processes.pop(engine.name, None)
        if proc is not None:
            proc.stop()

    def run_question(self, engine: Engine, question: Question) -> dict[str, Any]:
        """Up to --runs runs of ``question`` on ``engine``: times, the answer's checksum, or why not."""
        entry: dict[str, Any] = {"runs": []}
        for run in range(1, self.args.runs + 1):
            left = self.remaining()
            if left <= 0:
                entry["skipped"] = f"run {run}: {self._out_of_time()}"
            elif entry["runs"] and left < entry["runs"][0]["seconds"]:
                entry["skipped"] = f"run {run}: would not fit (first run {entry['runs'][0]['seconds']:.1f} s, {left:.0f} s left)"
            else:
                try:
                    outcome = self._one_run(engine, question, run)
                except RuntimeError as exc:
                    outcome = {"error": str(exc)}
                if "seconds" not in outcome:
                    entry.update(outcome)
                else:
                    entry["check"] = outcome.pop("check")
                    entry["runs"].append(outcome)
            if len(entry["runs"]) < run:
                log(f"{question.key} {engine.name}: {next(entry[k] for k in ('killed', 'error', 'skipped') if k in entry)[:500]}")
                break
        return entry

    def _one_run(self, engine: Engine, question: Question, run: int) -> dict[str, Any]:
        proc = self.process(engine)
        limit = min(self.remaining(), self.args.run_timeout or math.inf)
        cause = "run timeout" if limit == self.args.run_timeout else self._out_of_time()
        self.counter += 1
        out = self.args.work / "out" / f"{engine.name}-{question.workload}-{question.name}-{run}-{self.counter}"
        tables = {name: str(path) for name, path in self.data.tables(question.workload).items()}
        waited = self._wait_quiet(proc)
        wall, busy, ours = time.monotonic(), self.meter.machine_busy_s(), self.meter.tree_s(proc.process.pid)
        reply = proc.request({"question": question.key, "tables": tables, "out": str(out)}, limit)
        if reply is None or reply.get("timeout"):
            proc.kill()
            self.processes.pop(engine.name, None)
            if reply is None:
                return {"error": f"run {run}: the worker exited\n{proc.log_tail()}"}
            return {"killed": f"run {run}: killed after {limit:.0f} s ({cause})"}
        if not reply.pop("ok"):
            return {"error": f"run {run}: {reply['error']}", "traceback": reply.get("traceback")}
        wall = time.monotonic() - wall
        others = self.meter.machine_busy_s() - busy - (self.meter.tree_s(proc.process.pid) - ours)
        # CPU seconds other processes used while this ran (timing plus checksum), as a share of the machine.
        reply["others_cpu_share"] = round(max(others, 0.0) / (wall * (os.cpu_count() or 1)), 3)
        if waited:
            reply["waited_for_quiet_s"] = waited
        extra = f" (submit→end {reply['submit_to_end_s']:.2f} s)" if "submit_to_end_s" in reply else ""
        log(f"{question.key} {engine.name} run {run}/{self.args.runs}: {reply['seconds']:.2f} s{extra}, "
            f"{reply['check']['rows']} rows, others used {reply['others_cpu_share']:.0%} of the CPU")
        return reply

    def _wait_quiet(self, proc: EngineProcess) -> float:
        """Wait (up to --quiet-wait s) until other processes use under 10 % of the CPU; the seconds waited."""
        start = time.monotonic()
        limit = min(self.args.quiet_wait, max(self.remaining(), 0.0))
        while time.monotonic() - start < limit:
            busy, ours = self.meter.machine_busy_s(), self.meter.tree_s(proc.process.pid)
            time.sleep(1.0)
            others = self.meter.machine_busy_s() - busy - (self.meter.tree_s(proc.process.pid) - ours)
            if others / (os.cpu_count() or 1) < CONTENDED:
                break
        else:
            if limit > 0:
                log(f"the machine is still busy after waiting {limit:.0f} s; running anyway")
        return round(time.monotonic() - start, 1) if limit > 0 else 0.0

    def record(self, question: Question, engine: Engine, entry: dict[str, Any]) -> None:
        result = self.results.setdefault(question.key, {"title": question.title, "notes": question.notes, "engines": {}})
        result["engines"][engine.name] = entry
        result["check"] = check_answers(result["engines"], self.args.rel_tol)

    def run(self, save: Any) -> None:
        try:
            if self.args.order == "question":
                for question in self.questions:
                    log(f"--- {question.key}: {question.title}")
                    for engine in self.engines:
                        self.record(question, engine, self.run_question(engine, question))
                    self._verdict(question)
                    save()
                return
            for index, engine in enumerate(self.engines):
                # An equal share of the time left; what an engine leaves unused passes on to the next.
                self.share_end = time.monotonic() + max(self.end - time.monotonic(), 0.0) / (len(self.engines) - index)
                log(f"--- {engine.name}" + ("" if math.isinf(self.end) else f" ({self.remaining():.0f} s of the deadline)"))
                for question in self.questions:
                    self.record(question, engine, self.run_question(engine, question))
                    save()
                self.retire(engine)
            for question in self.questions:
                self._verdict(question)
        finally:
            # Side by side: seven engines each taking their grace period in turn outlived a caller's timeout.
            with ThreadPoolExecutor(max_workers=max(len(self.processes), 1)) as pool:
                list(pool.map(self.retire, list(self.engines)))

    def _verdict(self, question: Question) -> None:
        check = self.results[question.key]["check"]
        detail = f": {check['problems']}" if check.get("problems") else ""
        log(f"{question.key} answers: {check['status']} (reference {check.get('reference')}, rows {check.get('rows')}){detail}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=lambda s: int(float(s)), default=10**7, help="Rows of the groupby table and of join's x (1e7, 1e8). Default 1e7.")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="Threads (and Dask/Spillway CPU workers) per CPU engine. Default: all cores.")
    parser.add_argument("--engines", help=f"Comma-separated. Default on pandas: {DEFAULT_ENGINES['pandas']}; on cudf: {DEFAULT_ENGINES['cudf']}. "
                        "'dask' is Dask on the --backend; dask-cpu is Dask on pandas whatever the backend.")
    parser.add_argument("--questions", default="all", help="all, groupby, join, or keys like groupby.q1,join.q5 (comma-separated).")
    parser.add_argument("--runs", type=int, default=2, help="Runs of each question per engine; the first is reported apart. Default 2.")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="Where dbbench_<backend>_<rows>.json goes.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/dbbench"), help="Data (cached by rows and seed), outputs, logs, scratch.")
    parser.add_argument("--deadline", type=float, help="Seconds for the whole run from its start; what does not fit is skipped and said so.")
    parser.add_argument("--run-timeout", type=float, help="Kill a run (with the check of its answer) after this many seconds; it is reported as killed.")
    parser.add_argument("--order", choices=["engine", "question"], default="engine",
                        help="engine (default): one engine alive at a time, all its questions, then the next; with --deadline each "
                        "engine gets an equal share of the time left. question: each question on every engine in turn, all "
                        "engines kept running side by side (their idle clusters cost a little CPU).")
    parser.add_argument("--backend", choices=["pandas", "cudf"], default="pandas", help="Dataframe backend of Spillway and 'dask'.")
    parser.add_argument("--gpus", default="1,2", help="cudf: run Spillway and dask-cudf on each of these GPU counts. Default 1,2.")
    parser.add_argument("--protocol", choices=["ucx", "tcp"], default="ucx", help="cudf: comms of the GPU clusters (as bench/gpu_groupby.py).")
    parser.add_argument("--rmm-pool-size", default="16GB", help="cudf: RMM pool per GPU worker (as bench/gpu_groupby.py).")
    parser.add_argument("--quiet-wait", type=float, default=0.0,
                        help="On a shared machine: before each run, wait up to this many seconds for other processes to use "
                        "under 10%% of the CPU. Default 0 (do not wait).")
    parser.add_argument("--seed", type=int, default=108, help="Data seed (db-benchmark's set.seed(108)).")
    parser.add_argument("--rel-tol", type=float, default=1e-6, help="Relative tolerance of the per-column sums in the answer check.")
    args = parser.parse_args(argv)
    args.engines = args.engines or DEFAULT_ENGINES[args.backend]
    args.work = args.work.absolute()
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns what it writes to the JSON file."""
    args = parse_args(argv)
    started = time.monotonic()
    engines = expand_engines(args.engines, args.backend, [int(g) for g in args.gpus.split(",")], args.threads)
    questions = select_questions(args.questions)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"dbbench_{args.backend}_{pretty_rows(args.rows)}.json"
    log(f"db-benchmark groupby/join at {pretty_rows(args.rows)} rows, {args.threads} threads, engines "
        f"{', '.join(e.name for e in engines)}; {len(questions)} questions × {args.runs} runs -> {path}")
    log(f"fairness: {FAIRNESS}")
    data = ensure_data(args.work, args.rows, args.seed, workloads={q.workload for q in questions}, log=log)
    harness = Harness(args, engines, questions, data, started)
    report: dict[str, Any] = {
        "benchmark": "db-benchmark groupby + join (port: bench/dbbench_data.py)",
        "rows": args.rows, "backend": args.backend, "fairness": FAIRNESS,
        "args": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info(args.backend),
        "engines": [asdict(e) for e in engines], "versions": harness.versions, "results": harness.results,
    }

    def save() -> None:
        report["elapsed_s"] = round(time.monotonic() - started, 1)
        path.write_text(json.dumps(report, indent=1, default=str))

    harness.run(save)
    engine_rows = [{"name": e.name, "kind": e.kind} for e in engines]
    report["broken_engines"] = harness.broken
    report["tables_markdown"] = "\n".join(
        workload_tables(w, questions, engine_rows, harness.results) for w in WORKLOADS
    )
    save()
    print("\n" + report["tables_markdown"], flush=True)
    log(f"done in {report['elapsed_s']} s; JSON in {path}")
    return report


if __name__ == "__main__":
    main()
