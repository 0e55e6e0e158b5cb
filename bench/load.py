"""A bounded load test of the control plane on loopback (issue 5; issue 16 item 14).

    .venv/bin/python bench/load.py --jobs 200 --out bench/results --name load_2026-12-01.json

One run measures, side by side, against one live service (2 CPU workers, SQLite):

0. ``POST /jobs`` latency of ``--sequential`` submissions one at a time;
1. ``POST /jobs`` latency p50/p99 with ``--jobs`` submissions in flight at once, each job then
   polled every 0.2 s until terminal (the status latency of that is reported too);
2. ``GET /jobs/{id}`` throughput: ``--reads`` reads of the finished jobs by ``--readers``
   concurrent readers (reads per second, and their p50/p99);
3. ``/healthz`` latency idle and with ``--streams`` server-sent event streams open
   (``GET /jobs/{id}/events``), and ``GET /jobs/{id}`` throughput with the streams open. The
   streams watch jobs that stay unfinished while they are measured: every worker thread is held
   by a task of this benchmark waiting on a ``distributed.Event``, so the jobs wait at zero CPU
   (the measure is of the streams, not of jobs running); once measured, the workers are
   released, the jobs run, and every stream must end with its job's ``end`` event.

``--service-env KEY=VALUE`` (repeatable) adds a ``SPILLWAY_*`` setting to the service's environment:
``--service-env SPILLWAY_SERVER_LOOP=asyncio --service-env SPILLWAY_SERVER_HTTP=h11`` measures it
without uvloop and httptools, ``SPILLWAY_GC_TUNING=false`` with CPython's garbage collector defaults.

With ``--assign-steps N``, last, one job per engine of N trivial ``assign`` steps on
``--assign-rows`` rows (issue 16 item 14: 200 steps on 400k rows), submit to its end.

One job runs first, unmeasured, as on a service that has run jobs before. Every submitted job
must be accounted for exactly once (one id per submission, each reaching
SUCCEEDED, each listed exactly once, every event stream ending). A benchmark, not a test: it
records figures, it asserts only the accounting. The client runs on the same machine as the
service: its CPU seconds per phase are reported beside the service's. It is aiohttp, not the
SDK's httpx: httpx spent 4.7-5.3 ms of CPU per request here (100 connections), aiohttp
0.2 ms, so with httpx the client, not the service, was what a run on 2 cores measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.samples import write_sample_data  # noqa: E402
from spillway.service.launcher import ServiceProcess, launch_service  # noqa: E402

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
HOLD_EVENT = "spillway-bench-hold"


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def summary(values: list[float]) -> dict[str, float | int]:
    """p50, p99 and max in ms, and the count."""
    return {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99), "max": round(max(values) * 1000, 1), "requests": len(values)}


class CpuMeter:
    """CPU seconds spent by this process (the client) and by the service process over a phase."""

    def __init__(self, service_pid: int) -> None:
        self.service = psutil.Process(service_pid)
        self.client = psutil.Process()

    def mark(self) -> tuple[float, float, float]:
        s, c = self.service.cpu_times(), self.client.cpu_times()
        return time.perf_counter(), s.user + s.system, c.user + c.system

    def since(self, mark: tuple[float, float, float]) -> dict[str, float]:
        wall, service, client = self.mark()
        return {"wall_s": round(wall - mark[0], 2), "service_cpu_s": round(service - mark[1], 2), "client_cpu_s": round(client - mark[2], 2)}


def server_stack(pid: int) -> dict[str, bool]:
    """Whether the service process has uvloop and httptools loaded (its shared objects are mapped)."""
    paths = [m.path for m in psutil.Process(pid).memory_maps()]
    return {name: any(f"/{name}/" in p for p in paths) for name in ("uvloop", "httptools")}


def spec(name: str, data: Path, sink: Path) -> dict[str, Any]:
    """A small job: the first 10 rows of the sample set."""
    return {"name": name, "source": {"format": "parquet", "path": str(data)}, "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(sink)}}


class WorkerHold:
    """Occupies every worker thread of the service's cluster with a task waiting on a ``distributed.Event``."""

    def __init__(self, scheduler_address: str) -> None:
        from distributed import Client

        self.client = Client(scheduler_address, timeout=30)
        self.futures: list[Any] = []

    def hold(self) -> int:
        """Start one waiting task per worker thread; returns once all of them run. How many."""
        from distributed import Event, Queue

        Event(HOLD_EVENT, client=self.client).clear()
        started = Queue("spillway-bench-started", client=self.client)

        def wait_for_release() -> bool:  # runs on a worker, keeping its thread busy
            from distributed import Event as WorkerEvent
            from distributed import Queue as WorkerQueue

            WorkerQueue("spillway-bench-started").put(1)
            return WorkerEvent(HOLD_EVENT).wait(600)

        for worker, threads in self.client.nthreads().items():
            for i in range(threads):
                self.futures.append(self.client.submit(wait_for_release, key=f"bench-hold-{worker}-{i}", workers=[worker], pure=False))
        for _ in self.futures:
            started.get(timeout=60)
        return len(self.futures)

    def release(self) -> None:
        """Let the waiting tasks end; their threads take the jobs' tasks next."""
        from distributed import Event

        Event(HOLD_EVENT, client=self.client).set()
        self.client.gather(self.futures)
        self.client.close()


async def timed(values: list[float], method: str, http: aiohttp.ClientSession, path: str, **kwargs: Any) -> Any:
    """The JSON body of one request, whose latency (to the whole body read) goes to ``values``; raises on an error status."""
    start = time.perf_counter()
    async with http.request(method, path, **kwargs) as response:
        body = await response.read()
        values.append(time.perf_counter() - start)
        response.raise_for_status()
    return json.loads(body)


async def health_latency(http: aiohttp.ClientSession, count: int) -> dict[str, float | int]:
    """``count`` sequential ``GET /healthz``: what one client waits for, with nothing else of its own in flight."""
    values: list[float] = []
    for _ in range(count):
        await timed(values, "GET", http, "/healthz")
    return summary(values)


async def read_throughput(http: aiohttp.ClientSession, ids: list[str], reads: int, readers: int) -> dict[str, Any]:
    """``reads`` ``GET /jobs/{id}`` over ``readers`` concurrent readers (round robin over ``ids``)."""
    values: list[float] = []
    counter = iter(range(reads))

    async def reader() -> None:
        for i in counter:
            await timed(values, "GET", http, f"/jobs/{ids[i % len(ids)]}")

    start = time.perf_counter()
    await asyncio.gather(*(reader() for _ in range(readers)))
    wall = time.perf_counter() - start
    return {"reads": reads, "readers": readers, "reads_per_s": round(reads / wall, 1), **{f"latency_{k}": v for k, v in summary(values).items() if k != "requests"}}


async def submit_all(http: aiohttp.ClientSession, data: Path, out: Path, prefix: str, count: int, latencies: list[float]) -> list[str]:
    """``count`` ``POST /jobs`` sent at once; their ids, in order."""
    async def submit(i: int) -> str:
        accepted = await timed(latencies, "POST", http, "/jobs", json=spec(f"{prefix}{i}", data, out / f"{prefix}{i}"))
        return str(accepted["id"])

    return list(await asyncio.gather(*(submit(i) for i in range(count))))


async def submit_all_bodies(http: aiohttp.ClientSession, bodies: list[dict[str, Any]]) -> list[str]:
    """Each of ``bodies`` posted to ``/jobs``, one after the other; their ids, in order."""
    return [str((await timed([], "POST", http, "/jobs", json=body))["id"]) for body in bodies]


async def poll_all(http: aiohttp.ClientSession, ids: list[str], latencies: list[float]) -> list[str]:
    """Each job polled every 0.2 s until terminal; their final states."""
    async def poll(job_id: str) -> str:
        while True:
            state = (await timed(latencies, "GET", http, f"/jobs/{job_id}"))["state"]
            if state in TERMINAL:
                return str(state)
            await asyncio.sleep(0.2)

    return list(await asyncio.gather(*(poll(i) for i in ids)))


async def run(url: str, pid: int, data: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    cpu = CpuMeter(pid)
    jobs = args.jobs
    result: dict[str, Any] = {"jobs": jobs, "loadavg_start": os.getloadavg()}
    # Idle connections are dropped after 2 s, before uvicorn closes them (after 5 s): a request sent
    # on a connection the server is closing fails with ServerDisconnectedError (aiohttp keeps them 15 s).
    load = aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=2), timeout=aiohttp.ClientTimeout(total=120))
    one = aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=1, keepalive_timeout=2), timeout=aiohttp.ClientTimeout(total=30))
    async with load as http, one as probe:
        await health_latency(probe, 20)  # warm-up
        result["healthz_idle_start_ms"] = await health_latency(probe, args.health_probes)
        # One job first, as a service that has run jobs before: the first submit and run import
        # what validation and the engines need (fsspec's filesystems, Polars' IO), a one-time cost.
        warm_ids = await submit_all(http, data, out, "warm", 1, [])
        warm_states = await poll_all(http, warm_ids, [])

        # 0. Submissions one at a time: what one costs with nothing else in flight (the jobs run meanwhile).
        alone_s: list[float] = []
        for i in range(args.sequential):
            warm_ids += await submit_all(http, data, out, f"warm-seq{i}-", 1, alone_s)
        warm_states += await poll_all(http, warm_ids[1:], [])
        if alone_s:
            result["submit_one_at_a_time_ms"] = summary(alone_s)

        # 1. Concurrent submissions, then every job polled to its end.
        submit_s: list[float] = []
        status_s: list[float] = []
        mark = cpu.mark()
        ids = await submit_all(http, data, out, "load", jobs, submit_s)
        result["submit_phase"] = cpu.since(mark)
        states = await poll_all(http, ids, status_s)
        result["submit_to_all_terminal"] = cpu.since(mark)
        result["submit_ms"] = summary(submit_s)
        result["status_while_running_ms"] = summary(status_s)

        # 2. Status reads of finished jobs, many readers at once.
        mark = cpu.mark()
        result["reads_quiet"] = {**await read_throughput(http, ids, args.reads, args.readers), **cpu.since(mark)}

        # 3. /healthz and status reads with event streams open on jobs that wait at zero CPU.
        scheduler = (await timed([], "GET", http, "/cluster"))["scheduler_address"]
        hold = WorkerHold(scheduler)
        result["held_worker_threads"] = await asyncio.to_thread(hold.hold)
        held_ids = await submit_all(http, data, out, "held", args.streams, [])
        await asyncio.sleep(1.0)
        result["healthz_idle_ms"] = await health_latency(probe, args.health_probes)
        ends: dict[str, str] = {}
        opened = 0
        all_open = asyncio.Event()

        async def follow(job_id: str) -> None:
            nonlocal opened
            async with http.get(f"/jobs/{job_id}/events", timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as response:
                response.raise_for_status()
                first, event = True, None
                async for raw in response.content:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("event:"):
                        event = line.split(":", 1)[1].strip()
                    elif line.startswith("data:") and event is not None:
                        if first:
                            first, opened = False, opened + 1
                            if opened == len(held_ids):
                                all_open.set()
                        if event == "end":
                            ends[job_id] = json.loads(line[5:])["state"]

        streams = [asyncio.create_task(follow(i)) for i in held_ids]
        await asyncio.wait_for(all_open.wait(), 120)
        await asyncio.sleep(2.0)  # every stream in its wait
        mark = cpu.mark()
        result["healthz_with_streams_ms"] = await health_latency(probe, args.health_probes)
        result["healthz_with_streams_cpu"] = cpu.since(mark)
        mark = cpu.mark()
        result["reads_with_streams"] = {**await read_throughput(http, ids, args.reads, args.readers), **cpu.since(mark)}
        # Nothing but the streams for a few seconds: what they cost the service when nobody else calls.
        mark = cpu.mark()
        await asyncio.sleep(5.0)
        result["streams_only_5s"] = cpu.since(mark)
        result["streams_open"] = opened
        await asyncio.to_thread(hold.release)
        await asyncio.wait_for(asyncio.gather(*streams), 600)
        held_states = await poll_all(http, held_ids, [])
        if args.assign_steps:
            assign_data = write_sample_data(out.parent / "assign_data", rows=args.assign_rows, files=4)["sales"]
            result["assign_steps"] = {"steps": args.assign_steps, "rows": args.assign_rows}
            for engine in ("polars", "dask"):
                body = {**spec(f"assign-{engine}", assign_data, out / f"assign-{engine}"), "engine": engine,
                        "steps": [{"op": "assign", "column": f"c{i}", "expr": "amount + 1"} for i in range(args.assign_steps)]}
                start = time.perf_counter()
                assign_ids = await submit_all_bodies(http, [body])
                (state,) = await poll_all(http, assign_ids, [])
                result["assign_steps"][engine] = {"state": state, "submit_to_end_s": round(time.perf_counter() - start, 2)}
                warm_ids, warm_states = warm_ids + assign_ids, warm_states + [state]
        listed: list[dict[str, Any]] = []
        while len(page := (await timed([], "GET", http, "/jobs", params={"limit": 500, "offset": len(listed)}))["items"]):
            listed.extend(page)
    every_id = warm_ids + ids + held_ids
    names = [j["name"] for j in listed if j["name"].startswith(("warm", "load", "held", "assign-"))]
    result.update(
        distinct_ids=len(set(every_id)),
        submitted=len(every_id),
        succeeded=(warm_states + states + held_states).count("SUCCEEDED"),
        streams_ended=sum(1 for i in held_ids if ends.get(i) == "SUCCEEDED"),
        listed_once_each=len(names) == len(every_id) and len(set(names)) == len(every_id),
        loadavg_end=os.getloadavg(),
    )
    return result


def start_load_service(work: Path, extra: dict[str, str]) -> tuple[ServiceProcess, Path]:
    """The service the load benchmarks measure, and the sample data its jobs read: under ``work``, SQLite, 2 CPU
    workers, 4 jobs at once, with the ``SPILLWAY_*`` settings of ``extra`` added."""
    data = write_sample_data(work / "data", rows=20_000, files=2)["sales"]
    env = {"SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]), "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_MAX_CONCURRENT_JOBS": "4"}
    return launch_service(work / "svc", {**env, **extra}), data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200, help="Submissions in flight at once.")
    parser.add_argument("--sequential", type=int, default=50, help="Submissions one at a time, before the concurrent ones.")
    parser.add_argument("--reads", type=int, default=2000, help="GET /jobs/{id} per throughput measure.")
    parser.add_argument("--readers", type=int, default=100, help="Concurrent readers in the throughput measure.")
    parser.add_argument("--streams", type=int, default=200, help="Event streams open while /healthz is measured.")
    parser.add_argument("--health-probes", type=int, default=200, help="Sequential /healthz requests per latency measure.")
    parser.add_argument("--assign-steps", type=int, default=0, help="Last, one job per engine with this many assign steps (0: none).")
    parser.add_argument("--assign-rows", type=int, default=400_000, help="Rows the assign-steps jobs read.")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--name", default="load.json", help="File name of the JSON written under --out.")
    parser.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE", help="A setting for the service's environment (repeatable).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        extra = dict(item.split("=", 1) for item in args.service_env)
        service, data = start_load_service(work, extra)
        try:
            result = asyncio.run(run(service.url, service.process.pid, data, work / "out", args))
            result["service_env"] = extra
            result["service_server"] = server_stack(service.process.pid)
        finally:
            service.stop()
    result["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    submitted = 1 + args.sequential + args.jobs + args.streams + (2 if args.assign_steps else 0)
    ok = (result["distinct_ids"] == submitted and result["succeeded"] == submitted and result["listed_once_each"]
          and result["streams_open"] == args.streams and result["streams_ended"] == args.streams)
    assert ok, result
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / args.name).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
