"""A query longer than Dask's worker-ttl (5 minutes) across the GPU workers, through the service.

cudf-polars' DaskEngine runs a query in ``client.run``, which holds each worker's event loop:
no heartbeat reaches the scheduler while it runs. With Dask's default ``worker-ttl`` the
scheduler would remove both workers 5 minutes into such a query. This benchmark runs one,
with the service's default settings, and shows what happened:

* the longest heartbeat silence the scheduler saw per worker while the job ran (sampled
  every ``--sample-s``; over 300 s means the default ttl would have removed the worker),
* the workers' process ids before and after (the same: nothing was restarted),
* the answer, against ``--copies`` times the answer of one copy computed by Polars on the CPU.

The data is TPC-H ``lineitem`` at ``--sf``, linked ``--copies`` times into one directory
(hard links: no disk, one page cache). Calibration jobs over ``--calibrate`` and twice as many copies
first set the copy count for ``--target-s`` seconds (``--copies`` overrides it)::

    source /tmp/site/gpu-env.sh && PYTHONPATH=$PWD:/tmp/site python3 bench/long_query.py --out $OUT
    .venv/bin/python bench/long_query.py --backend pandas --sf 0.1 --copies 3 --out /tmp/lq   # the mechanics, on the CPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl  # noqa: E402
from distributed import Client  # noqa: E402

from bench.common import log, run_job, service_env  # noqa: E402
from bench.gpu_tpch import generate  # noqa: E402
from spillway.cluster.hung_workers import heartbeat_silences  # noqa: E402
from spillway.jobs.status import JobStatus  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402

AGGS = {
    "sum_qty": {"func": "sum", "column": "l_quantity"},
    "sum_price": {"func": "sum", "column": "l_extendedprice"},
    "count_order": {"func": "size"},
}


def linked_copies(lineitem: Path, folder: Path, copies: int) -> Path:
    """``folder`` holding ``copies`` hard links of each parquet file of ``lineitem``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted(lineitem.glob("*.parquet"))
    for copy in range(copies):
        for file in files:
            link = folder / f"copy{copy:05d}_{file.name}"
            if not link.exists():
                os.link(file, link)
    return folder


def spec(path: Path, sink: Path) -> dict[str, Any]:
    """Q1's scan and groupby over every copy, sorted by its keys.

    ``engine: auto``, not ``polars``: under ``polars`` the submit translates the query with cudf-polars
    for its 422, which took ~15 ms a file on the H100 (2298 files: 35 s); under ``auto`` the worker's
    translation alone decides, and the job's engine and placement are recorded as usual.
    """
    return {
        "name": f"long_{path.name}",
        "engine": "auto",
        "source": {"format": "parquet", "path": str(path)},
        "steps": [
            {"op": "groupby", "by": ["l_returnflag", "l_linestatus"], "aggs": AGGS},
            {"op": "sort", "by": ["l_returnflag", "l_linestatus"]},
        ],
        "sink": {"path": str(sink), "mode": "overwrite"},
    }


def one_copy_answer(lineitem: Path) -> pl.DataFrame:
    """The groupby over one copy, by Polars on the CPU: ``copies`` times it is the expected answer."""
    return (
        pl.scan_parquet(lineitem)
        .group_by("l_returnflag", "l_linestatus")
        .agg(pl.col("l_quantity").sum().alias("sum_qty"), pl.col("l_extendedprice").sum().alias("sum_price"), pl.len().alias("count_order"))
        .sort("l_returnflag", "l_linestatus")
        .collect()
    )


def answer_problem(sink: Path, one: pl.DataFrame, copies: int) -> str | None:
    """None when the committed answer is ``copies`` times ``one``: counts exact, sums within 1e-9 relative.

    Sources read parquet decimals as float64 (docs/spec.md), so the sums are float sums in another order.
    """
    got = pl.read_parquet(sink / "*.parquet").sort("l_returnflag", "l_linestatus")
    if got.height != one.height:
        return f"{got.height} groups, expected {one.height}"
    for name in AGGS:
        want = [float(value) * copies for value in one[name].to_list()]
        for value, expected in zip(got[name].to_list(), want, strict=True):
            if not math.isclose(float(value), expected, rel_tol=1e-9):
                return f"{name}: {got[name].to_list()} != {want}"
    return None


class HeartbeatWatch:
    """Samples, on the scheduler, each worker's seconds since its last heartbeat; keeps the longest."""

    def __init__(self, scheduler_address: str, every_s: float) -> None:
        self.client = Client(scheduler_address, timeout=30)
        self.every_s = every_s
        self.longest: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def worker_pids(self) -> dict[str, int]:
        return self.client.run(os.getpid)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {address: round(seconds, 1) for address, seconds in sorted(self.longest.items())}

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            silence = self.client.run_on_scheduler(heartbeat_silences)
            self.samples += 1
            for address, seconds in silence.items():
                self.longest[address] = max(self.longest.get(address, 0.0), seconds)


class ProgressWatch:
    """Samples the running job's stages through REST (what a user watching it sees): when they last moved, and the
    longest time they stood still while it ran (how long a stall check must wait before it may call a query stuck)."""

    def __init__(self, service: Any, every_s: float) -> None:
        self.service = service
        self.every_s = every_s
        self.samples: list[dict[str, Any]] = []
        self.note: str | None = None  # what the counts mean, as the job view says
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        moving = [sample for sample in self.samples if sample["stages"]]
        changes = [sample["t"] for before, sample in zip(moving, moving[1:], strict=False) if sample["stages"] != before["stages"]]
        edges = [moving[0]["t"], *changes, moving[-1]["t"]] if moving else []
        return {
            "samples": len(self.samples), "samples_with_stages": len(moving), "changes": len(changes),
            "longest_unchanged_s": round(max((b - a for a, b in zip(edges, edges[1:], strict=False)), default=0.0), 1),
            "first": moving[0] if moving else None, "last": moving[-1] if moving else None, "note": self.note,
        }

    def _run(self) -> None:
        started = time.monotonic()
        with self.service.client() as api:
            while not self._stop.wait(self.every_s):
                try:
                    running = api.list(state=JobStatus.RUNNING).items
                except Exception:  # noqa: BLE001 - a slow answer is a missed sample, not the bench's end
                    continue
                if running:
                    progress = running[0].progress
                    self.note = progress.note
                    self.samples.append({"t": round(time.monotonic() - started, 1),
                                         "stages": [[stage.name, stage.done, stage.total] for stage in progress.stages]})


def _jobs_now(service: Any) -> list[dict[str, Any]]:
    """Every job's state, and the log of any still running (how a hang looked from the service)."""
    with service.client() as api:
        jobs = [{"id": job.id, "state": job.state.value} for job in api.list().items]
        for job in jobs:
            if job["state"] == "RUNNING":
                job["log"] = api.logs(job["id"])[-20:]
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Where long_query.json and the service log go.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/spw_tpch"), help="TPC-H data and the service's root.")
    parser.add_argument("--sf", type=float, default=10)
    parser.add_argument("--backend", choices=["cudf", "pandas"], default="cudf")
    parser.add_argument("--gpus", default="0,0", help="Workers' GPUs ('0,0': two workers sharing GPU 0).")
    parser.add_argument("--calibrate", type=int, default=8, help="Copies in the calibration job.")
    parser.add_argument("--copies", type=int, default=0, help="Copies in the long job (0: from the calibration).")
    parser.add_argument("--target-s", type=float, default=380, help="The long job's aimed run time.")
    parser.add_argument("--max-copies", type=int, default=4000)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--calibration-timeout-s", type=float, default=120, help="A calibration job still running then is a hang.")
    parser.add_argument("--deadline", type=float, default=570, help="Seconds from start after which the long job is given up.")
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    lineitem = generate(args.work, args.sf, 1) / "lineitem"
    result: dict[str, Any] = {"host": platform.node(), "sf": args.sf, "backend": args.backend, "gpus": args.gpus}
    one = one_copy_answer(lineitem)
    extra = {"SPILLWAY_CLUSTER__GPU_MULTI_WORKER": "always"} if args.backend == "cudf" else {}
    env = service_env(args.work, args.backend, gpus=args.gpus, **extra)
    service = launch_service(args.out / "service", env)
    try:
        runs: dict[str, Any] = {}
        result["calibration"] = runs
        for name, count in (("warm-up", args.calibrate), ("first", args.calibrate), ("second", 2 * args.calibrate)):
            calibration = spec(linked_copies(lineitem, args.work / f"long_{count}", count), args.work / f"long_out_cal_{name}")
            try:
                record = run_job(service, calibration, timeout=args.calibration_timeout_s)
            except Exception as error:  # a job of seconds still running: what the service says of it is kept
                runs[name] = {"copies": count, "state": "NOT ENDED", "error": repr(error), "jobs": _jobs_now(service)}
                log(f"calibration {name}: {count} copies did not end in {args.calibration_timeout_s} s: {error!r}")
                return
            runs[name] = {"copies": count, "run_s": record.get("run_s"), "state": record["state"]}
            log(f"calibration {name}: {count} copies in {record.get('run_s')} s ({record['state']})")
        # The slope between two sizes leaves out the fixed cost of a job (engine, planning, commit), but is noisy:
        # the mean time a copy of the larger run (fixed cost included) bounds the count from above.
        mean_per_copy = runs["second"]["run_s"] / (2 * args.calibrate)
        per_copy = max((runs["second"]["run_s"] - runs["first"]["run_s"]) / args.calibrate, 0.5 * mean_per_copy)
        by_slope = args.calibrate + math.ceil((args.target_s - runs["first"]["run_s"]) / per_copy)
        copies = args.copies or min(args.max_copies, by_slope, math.floor(1.4 * args.target_s / mean_per_copy))
        runs["per_copy_s"] = round(per_copy, 4)
        log(f"{per_copy:.3f} s a copy: the long job reads {copies} copies")
        folder = linked_copies(lineitem, args.work / f"long_{copies}", copies)
        with service.client() as api:
            watch = HeartbeatWatch(api.cluster().scheduler_address, args.sample_s)
        pids_before = watch.worker_pids()
        ttl = watch.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.worker_ttl)
        watch.start()
        progress = ProgressWatch(service, 2.0)
        progress.start()
        sink = args.work / "long_out"
        try:
            left = args.deadline - (time.monotonic() - started)
            record = run_job(service, spec(folder, sink), timeout=left, submit_timeout=left)  # thousands of files: a long submit
        except Exception as error:  # past the deadline: the job is cancelled and what was seen is kept
            log(f"the long job did not end in time: {error!r}")  # the service, stopped below, ends it
            record = {"state": "NOT ENDED", "error": repr(error)}
        longest = watch.stop()
        seen = progress.stop()
        pids_after = watch.worker_pids()
        watch.client.close()  # before the service (and its scheduler) stops
        with service.client() as api:
            steps = [line for line in api.logs(record["id"]) if any(word in line for word in ("across", "step", "progress"))] if "id" in record else []
        problem = answer_problem(sink, one, copies) if record["state"] == "SUCCEEDED" else record.get("error")
        result["long"] = {
            "copies": copies, "rows": one["count_order"].sum() * copies, "state": record["state"], "run_s": record.get("run_s"),
            "engine": (record.get("progress") or {}).get("engine"), "answer": problem or "equal to copies x one copy (counts exact, sums within 1e-9)",
            "scheduler_worker_ttl_s": ttl, "longest_heartbeat_silence_s": longest, "samples": watch.samples,
            "worker_pids_before": pids_before, "worker_pids_after": pids_after, "workers_restarted": pids_before != pids_after,
            "progress_seen": seen, "log": steps,
        }
        log(json.dumps(result["long"], indent=1, default=str))
    finally:
        service.stop()
        (args.out / "long_query.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
