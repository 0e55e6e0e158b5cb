"""On a GPU machine: the service on a LocalCUDACluster gives the CPU backend's answer.

Marked ``gpu``: skipped (with the reason) without an NVIDIA GPU and the gpu extra.
The recorded device runs are bench/gpu_service.py; see bench/RESULTS.md.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from spillway.jobs.status import JobStatus
from spillway.service.launcher import launch_service
from tests.conftest import wait_terminal
from tests.test_service_e2e import revenue_reference, revenue_spec

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("engine", ["polars", "dask"])
def test_gpu_service_matches_pandas(engine: str, tmp_path: Path, sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    env = {"SPILLWAY_CLUSTER__BACKEND": "cudf", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]'}
    service = launch_service(tmp_path / "svc", env, timeout=300)
    try:
        with service.client() as client:
            info = client.cluster()
            assert info.backend == "cudf" and info.kind == "LocalCUDACluster"
            assert all(w.gpu is not None and w.gpu.name and w.gpu.memory_total for w in info.workers)
            job = wait_terminal(client, client.submit(revenue_spec(sample_data, tmp_path / "out", engine=engine)).id, timeout=300)
    finally:
        service.stop()
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.backend == "cudf" and job.resources is not None and job.resources.samples > 0
    assert job.progress.engine is not None and (job.progress.engine.engine, job.progress.engine.device) == (engine, "gpu")
    result = pd.read_parquet(tmp_path / "out")
    result["region"] = result["region"].astype(str)
    result = result.sort_values(["region", "category"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(result, revenue_reference(sales_frame, sample_data["products"]), check_dtype=False, rtol=1e-9)
