"""A bounded load test on loopback: many concurrent small-job submissions while status is polled.

    .venv/bin/python bench/load.py --jobs 200 --out bench/results

Every submitted job must be accounted for exactly once (one id per submission, each reaching
SUCCEEDED, the store's count matching). Reports p50/p99 latency of POST /jobs and GET /jobs/{id}.
A benchmark, not a test: it records figures, it asserts only the accounting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.samples import write_sample_data  # noqa: E402
from spillway.service.launcher import launch_service  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


async def run(url: str, data: Path, out: Path, jobs: int) -> dict[str, Any]:
    submit_s: list[float] = []
    status_s: list[float] = []
    limits = httpx.Limits(max_connections=jobs, max_keepalive_connections=jobs)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:

        async def submit(i: int) -> str:
            spec = {"name": f"load{i}", "source": {"format": "parquet", "path": str(data)}, "steps": [{"op": "limit", "n": 10}], "sink": {"path": str(out / f"o{i}")}}
            start = time.perf_counter()
            response = await http.post("/jobs", json=spec)
            submit_s.append(time.perf_counter() - start)
            response.raise_for_status()
            return response.json()["id"]

        async def poll(job_id: str) -> str:
            while True:
                start = time.perf_counter()
                state = (await http.get(f"/jobs/{job_id}")).json()["state"]
                status_s.append(time.perf_counter() - start)
                if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    return state
                await asyncio.sleep(0.2)

        wall = time.perf_counter()
        ids = await asyncio.gather(*(submit(i) for i in range(jobs)))
        states = await asyncio.gather(*(poll(i) for i in ids))
        wall = time.perf_counter() - wall
        listed = (await http.get("/jobs", params={"limit": 500})).json()
    names = [j["name"] for j in listed["items"] if j["name"].startswith("load")]
    return {
        "jobs": jobs,
        "distinct_ids": len(set(ids)),
        "succeeded": states.count("SUCCEEDED"),
        "listed_once_each": len(names) == jobs and len(set(names)) == jobs,
        "wall_s": round(wall, 2),
        "submit_ms": {"p50": percentile(submit_s, 0.5), "p99": percentile(submit_s, 0.99)},
        "status_ms": {"p50": percentile(status_s, 0.5), "p99": percentile(status_s, 0.99), "requests": len(status_s)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = write_sample_data(work / "data", rows=20_000, files=2)["sales"]
        env = {"SPILLWAY_ALLOWED_ROOTS": json.dumps([str(work)]), "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_MAX_CONCURRENT_JOBS": "4"}
        service = launch_service(work / "svc", env)
        try:
            result = asyncio.run(run(service.url, data, work / "out", args.jobs))
        finally:
            service.stop()
    assert result["distinct_ids"] == args.jobs and result["succeeded"] == args.jobs and result["listed_once_each"], result
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "load.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
