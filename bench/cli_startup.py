"""How long ``spillway`` client commands take to start, and what they import.

Runs each command ``--repeat`` times as a fresh process and prints the fastest and the median wall
time (on a shared machine the fastest is the closest to the uncontended cost), then
``python -X importtime`` of ``spillway list`` against a live service: its total import time
and whether the server's libraries (FastAPI, SQLAlchemy, Dask, pandas) were loaded.

    .venv/bin/python -m bench.cli_startup                    # this checkout
    .venv/bin/python -m bench.cli_startup --repo /tmp/old    # another checkout, same venv

``--repo`` points at a checkout (e.g. ``git archive <commit> | tar -x -C /tmp/old``) whose CLI
is run from its own folder (``-m spillway``, or ``-m service.cli`` in a checkout from before the one
``spillway`` package); the service itself always comes from this one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spillway.service.launcher import REPO_ROOT, launch_service

SERVER_LIBRARIES = ("fastapi", "sqlalchemy", "dask", "distributed", "pandas", "uvicorn")


def cli_module(repo: Path) -> str:
    """The CLI's module in ``repo``: ``spillway``, or ``service.cli`` before there was one package."""
    return "spillway" if (repo / "spillway" / "__main__.py").is_file() else "service.cli"


def time_command(repo: Path, args: list[str], repeat: int) -> tuple[float, float]:
    """The fastest and the median wall time, in seconds, of ``python -m <the CLI> ARGS`` run from ``repo``."""
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", cli_module(repo), *args], cwd=repo, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def import_profile(repo: Path, args: list[str]) -> tuple[float, list[str]]:
    """Total import time (s) of one run, summed over top-level imports, and the server libraries loaded."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", cli_module(repo), *args], cwd=repo, capture_output=True, text=True, check=False)
    total_us = 0
    loaded: set[str] = set()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        if not name.startswith("  "):  # a top-level import: its cumulative time counts once
            total_us += int(cumulative)
        loaded.add(name.strip().split(".")[0])
    return total_us / 1e6, [lib for lib in SERVER_LIBRARIES if lib in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO_ROOT, help="The checkout whose CLI is timed.")
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    repo = options.repo.resolve()
    with tempfile.TemporaryDirectory() as workdir:
        service = launch_service(Path(workdir), {"SPILLWAY_CLUSTER__N_WORKERS": "1", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": ""})
        try:
            commands = [["--help"], ["submit", "--help"], ["list", "--url", service.url], ["status", "nope", "--url", service.url]]
            print(f"CLI of {repo}, {options.repeat} runs each: fastest / median")
            for args in commands:
                shown = " ".join(a if a != service.url else "URL" for a in args)
                fastest, median = time_command(repo, args, options.repeat)
                print(f"  spillway {shown:<28} {fastest:5.2f} s / {median:5.2f} s")
            total, loaded = import_profile(repo, ["list", "--url", service.url])
            print(f"  imports of `spillway list`: {total:.2f} s; server libraries loaded: {', '.join(loaded) or 'none'}")
        finally:
            service.stop()


if __name__ == "__main__":
    main()
