"""``GET /jobs/{id}`` throughput alone: bench/load.py's phase 2, in rounds (issue 16 item 14).

    .venv/bin/python bench/status_reads.py --rounds 3

Starts the service as bench/load.py does (2 CPU workers, SQLite, sample data), submits ``--jobs``
small jobs and waits for them to succeed, reads them ``--warmup`` times, then runs ``--rounds``
rounds of ``--reads`` status reads by ``--readers`` concurrent readers (round robin over the jobs).
Each round prints one JSON line: reads per second, latency p50/p99, and the service process's CPU
per read (psutil: user + system of that process only). On a shared machine the CPU per read is the
figure to compare; reads per second moves with whatever else runs.

A/B against another tree: run this file from inside that tree, with ``PYTHONPATH`` on it, so the
service it starts is that tree's (bench/RESULTS.md names the commands used):

    git worktree add /tmp/reads_before HEAD && cp bench/status_reads.py /tmp/reads_before/bench/
    cd /tmp/reads_before && PYTHONPATH=/tmp/reads_before /work/main/.venv/bin/python bench/status_reads.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from bench.load import poll_all, read_throughput, server_stack, start_load_service, submit_all  # noqa: E402


async def run(url: str, pid: int, data: Path, out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rounds' figures, one dict a round."""
    service, client = psutil.Process(pid), psutil.Process()
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)  # as bench/load.py, for the same reason
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        ids = await submit_all(http, data, out, "read", args.jobs, [])
        states = await poll_all(http, ids, [])
        assert states == ["SUCCEEDED"] * len(ids), states
        await read_throughput(http, ids, args.warmup, args.readers)
        rounds = []
        for index in range(args.rounds):
            load = os.getloadavg()[0]
            before, client_before = service.cpu_times(), client.cpu_times()
            figures = await read_throughput(http, ids, args.reads, args.readers)
            after, client_after = service.cpu_times(), client.cpu_times()
            user, system = after.user - before.user, after.system - before.system
            figures.update(
                service_cpu_ms_per_read=round((user + system) * 1000 / args.reads, 3),
                service_user_ms_per_read=round(user * 1000 / args.reads, 3),
                service_system_ms_per_read=round(system * 1000 / args.reads, 3),
                client_cpu_ms_per_read=round((client_after.user + client_after.system - client_before.user - client_before.system) * 1000 / args.reads, 3),
                round=index,
                label=args.label,
                loadavg_1m=round(load, 2),
            )
            print(json.dumps(figures), flush=True)
            rounds.append(figures)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="Measured rounds.")
    parser.add_argument("--reads", type=int, default=3000, help="GET /jobs/{id} per round.")
    parser.add_argument("--readers", type=int, default=100, help="Concurrent readers.")
    parser.add_argument("--jobs", type=int, default=20, help="Finished jobs the reads go round.")
    parser.add_argument("--warmup", type=int, default=1000, help="Unmeasured reads before the rounds.")
    parser.add_argument("--label", default="", help="Copied into every round's line (before, after, ...).")
    parser.add_argument("--out", type=Path, help="Also write the rounds here, as a JSON list.")
    parser.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE", help="A setting for the service's environment (repeatable).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        service, data = start_load_service(work, dict(item.split("=", 1) for item in args.service_env))
        try:
            print(json.dumps({"label": args.label, "service_pid": service.process.pid, "service_server": server_stack(service.process.pid)}), flush=True)
            rounds = asyncio.run(run(service.url, service.process.pid, data, work / "out", args))
        finally:
            service.stop()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rounds, indent=2))


if __name__ == "__main__":
    main()
