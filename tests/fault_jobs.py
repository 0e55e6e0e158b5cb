"""Jobs that are still running when a fault test acts on them, per engine, and how to find their workers.

The Dask engine's job is a sort and a drop_duplicates of the 1.2 M-row ``big_data`` (many tasks,
seconds on 2 cores). Polars does that in well under a second, so its job is a self-join of
the sales on ``customer_id`` (about 576 M pairs, streamed into a groupby of 2,500 rows): tens of
seconds on one worker thread, in about 200 MB. Its answer is known in closed form:
per customer, ``pairs`` = n² and ``right_total`` = n × the customer's total amount.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from distributed import Client


def shared_gpu_env(**extra: str) -> dict[str, str]:
    """A GPU service's settings with two workers sharing GPU 0 (``allow_gpu_sharing``), plus ``extra``."""
    return {
        "SPILLWAY_CLUSTER__BACKEND": "cudf", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]',
        "SPILLWAY_CLUSTER__CUDA_VISIBLE_DEVICES": "0,0", "SPILLWAY_CLUSTER__ALLOW_GPU_SHARING": "true", **extra,
    }


def slow_spec(engine: str, data: dict[str, Path], out: Path, **overrides: Any) -> dict[str, Any]:
    """A job on ``engine`` that runs long enough to be hit mid-run."""
    sales = str(data["sales"])
    if engine == "polars":
        columns = ["customer_id", "amount"]
        steps: list[dict[str, Any]] = [
            {"op": "join", "right": {"format": "parquet", "path": sales, "columns": columns}, "on": ["customer_id"]},
            {
                "op": "groupby",
                "by": ["customer_id"],
                "aggs": {"pairs": {"func": "count", "column": "amount"}, "right_total": {"func": "sum", "column": "amount_right"}},
            },
        ]
        source: dict[str, Any] = {"format": "parquet", "path": sales, "columns": columns}
    else:
        steps = [{"op": "sort", "by": ["amount"]}, {"op": "drop_duplicates", "subset": ["customer_id", "product_id"]}]
        source = {"format": "parquet", "path": sales}
    return {"name": f"slow_{engine}", "engine": engine, "source": source, "steps": steps, "sink": {"path": str(out)}, **overrides}


def check_slow_output(engine: str, data: dict[str, Path], out: Path) -> None:
    """Assert that ``out`` holds exactly the answer of :func:`slow_spec`."""
    sales = pd.read_parquet(data["sales"])
    result = pd.read_parquet(out)
    if engine == "polars":
        per = sales.groupby("customer_id")["amount"].agg(["count", "sum"])
        expected = pd.DataFrame({"pairs": per["count"] ** 2, "right_total": per["count"] * per["sum"]})
        got = result.set_index("customer_id").sort_index()
        assert len(got) == len(expected) and (got["pairs"].to_numpy() == expected["pairs"].to_numpy()).all()
        assert ((got["right_total"] - expected["right_total"]).abs() <= 1e-6 * expected["right_total"].abs().clip(lower=1)).all()
        return
    keys = ["customer_id", "product_id"]
    distinct = sales[keys].drop_duplicates()
    # Which duplicate survives is Dask's choice; the set of distinct keys is not.
    assert len(result) == len(distinct) and not result[keys].duplicated().any()
    # The Dask engine writes its integers as pandas' nullable Int64 (docs/spec.md, "Types"): compare values, not dtypes.
    pd.testing.assert_frame_equal(
        result[keys].sort_values(keys).reset_index(drop=True), distinct.sort_values(keys).reset_index(drop=True), check_dtype=False
    )


def busy_workers(dask_client: Client) -> list[str]:
    """The workers the scheduler has tasks processing on (one job runs: that job's)."""
    return dask_client.run_on_scheduler(lambda dask_scheduler: sorted(ws.address for ws in dask_scheduler.workers.values() if ws.processing))


def worker_addresses(dask_client: Client) -> list[str]:
    """The workers the scheduler knows now (not the client's cached view)."""
    return dask_client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.workers))


def polars_task_worker(dask_client: Client, job_id: str) -> str | None:
    """The worker the scheduler has the Polars job's one task processing on, if any."""
    from spillway.cluster.polars_job import task_key

    key = task_key(job_id)
    return dask_client.run_on_scheduler(lambda dask_scheduler: getattr(getattr(dask_scheduler.tasks.get(key), "processing_on", None), "address", None))
