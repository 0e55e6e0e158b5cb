"""Planning a job whose derived sources each have a long chain of filters, on the Dask engine.

    .venv/bin/python bench/filter_chain.py --sources 8 --filters 50

Each derived source reads one parquet file (400k rows) through ``--filters`` filter steps; the job
unions them. Prints the seconds of ``cluster.plan.plan_job`` (graph, optimisation, stage labels), best
of ``--rounds``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import dask
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.cluster.plan import plan_job  # noqa: E402
from spillway.jobs.sink import SinkWriter  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--filters", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="filter-chain-"))
    pd.DataFrame({"amount": np.arange(400_000, dtype=float), "q": np.arange(400_000) % 7}).to_parquet(root / "rows.parquet")
    sources = {f"s{i}": {"from": "rows", "steps": [{"op": "filter", "expr": f"amount > {i + j}"} for j in range(args.filters)]}
               for i in range(args.sources)}
    spec = JobSpec.model_validate({
        "sources": {"rows": {"format": "parquet", "path": str(root / "rows.parquet")}, **sources},
        "source": "s0", "steps": [{"op": "union", "sources": [f"s{i}" for i in range(1, args.sources)]}] if args.sources > 1 else [],
        "sink": {"path": str(root / "out")}})
    plans = []
    for _ in range(args.rounds):
        with dask.config.set(scheduler="sync"):
            start = time.perf_counter()
            plan = plan_job(spec, "pandas", SinkWriter(spec.sink, "filter-chain"))
            plans.append(time.perf_counter() - start)
    print(f"{args.sources} sources x {args.filters} filters: plan_job {min(plans):.2f} s (best of {args.rounds}), {len(plan.graph)} tasks")


if __name__ == "__main__":
    main()
