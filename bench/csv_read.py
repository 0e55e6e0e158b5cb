"""The Dask engine (pandas) reading a CSV source: a 2 M-row, 5-column file read and grouped, in process.

    PYTHONPATH=$TREE .venv/bin/python bench/csv_read.py --rounds 3

Run it once per tree (``git worktree add``) and alternate trees to compare readers; it prints the best of
``--rounds`` and each round. The file is written once under ``--data`` and reused.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import dask
import numpy as np
import pandas as pd

from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec


def write_file(path: Path, rows: int) -> None:
    rng = np.random.default_rng(1)
    pd.DataFrame({
        "id": np.arange(rows), "x": rng.random(rows), "s": rng.choice(["alpha", "beta", "gamma"], rows),
        "t": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 10**6, rows), unit="s"), "b": rng.random(rows) > 0.5,
    }).to_csv(path, index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/spillway_csv_read"), help="folder of the generated file")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    path = args.data / f"rows_{args.rows}.csv"
    if not path.exists():
        write_file(path, args.rows)
    spec = JobSpec.model_validate({
        "source": {"format": "csv", "path": str(path), "types": {"t": "datetime64[ns]"}},
        "steps": [{"op": "groupby", "by": ["s"], "aggs": {"sx": {"func": "sum", "column": "x"}, "n": {"func": "count", "column": "id"},
                                                          "lt": {"func": "max", "column": "t"}}}],
        "sink": {"path": str(args.data / "unused")},
    })
    plan = plan_spec(spec)
    times = []
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        for _ in range(args.rounds):
            started = time.perf_counter()
            build_frame(spec, plan).compute()
            times.append(time.perf_counter() - started)
    print(f"best {min(times):.3f} s; rounds {', '.join(f'{t:.3f}' for t in times)} ({path.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
