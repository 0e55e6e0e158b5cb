"""Where a Polars GPU job runs: in memory when its working set fits the device limit, streaming with spilling when not.

The choice (jobs/gpu_placement.py) runs everywhere from real parquet footers; the service
test that a job over 2× its device limit completes, right, with spilled bytes reported is
marked ``gpu``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from spillway.jobs.gpu_placement import AUTO_DEVICE_SHARE, IN_MEMORY_SHARE, device_limit_bytes, place_on_gpu
from spillway.jobs.gpu_streaming import spilled_device_to_host
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.read_progress import source_reads
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import plan_spec
from spillway.service.launcher import ServiceProcess, launch_service
from tests.conftest import wait_terminal


def test_the_device_limit_is_the_setting_in_bytes_or_as_a_share_of_the_device() -> None:
    assert device_limit_bytes(40 << 30, 141 << 30) == 40 << 30
    assert device_limit_bytes(0.5, 100 << 30) == 50 << 30
    assert device_limit_bytes(None, 100 << 30) == int(AUTO_DEVICE_SHARE * (100 << 30))  # dask-cuda's own default
    assert device_limit_bytes(None, None) is None and device_limit_bytes(0.5, None) is None


def _uncompressed(path: Path, columns: set[str]) -> int:
    metadata = pq.ParquetFile(path).metadata
    return sum(
        metadata.row_group(g).column(c).total_uncompressed_size
        for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)
        if metadata.row_group(g).column(c).path_in_schema in columns
    )


@pytest.fixture
def wide_file(tmp_path: Path) -> Path:
    path = tmp_path / "wide.parquet"
    rng = np.random.default_rng(7)
    pl.DataFrame({"key": np.arange(200_000) % 1000, "a": rng.random(200_000), "b": rng.random(200_000)}).write_parquet(path, row_group_size=50_000)
    return path


def _reads(path: Path, steps: list[dict[str, object]]) -> tuple[JobSpec, list]:
    spec = JobSpec.model_validate({
        "name": "t", "engine": "polars", "source": {"format": "parquet", "path": str(path)}, "steps": steps, "sink": {"path": str(path.parent / "out")},
    })
    return spec, source_reads(spec, build_lazyframe(plan_spec(spec)))


def test_the_working_set_is_the_uncompressed_bytes_of_the_columns_the_query_reads(wide_file: Path) -> None:
    spec, reads = _reads(wide_file, [{"op": "groupby", "by": ["key"], "aggs": {"a": {"func": "sum", "column": "a"}}}])
    placement = place_on_gpu(spec, reads, 1 << 40)
    assert placement.working_set_bytes == _uncompressed(wide_file, {"key", "a"})  # b is never read
    assert placement.working_set_bytes < _uncompressed(wide_file, {"key", "a", "b"})


def test_a_job_within_its_share_of_the_limit_runs_in_memory_and_one_over_it_streams(wide_file: Path) -> None:
    spec, reads = _reads(wide_file, [])
    working_set = sum(read.in_memory_bytes for read in reads)
    roomy = place_on_gpu(spec, reads, int(working_set / IN_MEMORY_SHARE) + 1)
    assert roomy.executor == "in-memory" and roomy.spill_device_limit is None and "in-memory: working set" in roomy.reason
    tight = place_on_gpu(spec, reads, working_set)
    assert tight.executor == "streaming" and tight.spill_device_limit == working_set
    assert "streaming with spilling above" in tight.reason and "over 50% of the device limit" in tight.reason


def test_without_a_known_device_size_a_job_runs_in_memory_as_before(wide_file: Path) -> None:
    spec, reads = _reads(wide_file, [])
    assert place_on_gpu(spec, reads, None).executor == "in-memory"


def test_a_source_in_an_object_store_has_no_size_up_front_so_the_job_streams() -> None:
    spec = JobSpec.model_validate({"name": "t", "source": {"format": "parquet", "path": "s3://bucket/data/*.parquet"}, "sink": {"path": "/tmp/out"}})
    placement = place_on_gpu(spec, [], 80 << 30)
    assert placement.executor == "streaming" and "unknown size" in placement.reason


def test_spilled_bytes_are_the_device_to_host_ones_of_rapidsmpf_statistics() -> None:
    # The shape rapidsmpf 26.10 gave on an H200 (bench/results/gpu_stats_probe_2026-12-01c.log).
    stats = {
        "copy-device-to-pinned_host-bytes": {"count": 14, "value": 3_000.0, "max": 1_000.0},
        "copy-device-to-host-bytes": {"count": 1, "value": 500, "max": 500},
        "copy-device-to-pinned_host-time": {"count": 14, "value": 1.16, "max": 0.34},
        "copy-pinned_host-to-device-bytes": {"count": 14, "value": 3_000.0, "max": 1_000.0},
        "alloc-device-bytes": {"count": 14, "value": 9_000.0, "max": 1_000.0},
    }
    assert spilled_device_to_host(stats) == 3_500


# --- on the GPU -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tight_gpu_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    pytest.importorskip("cudf_polars")
    env = {
        "SPILLWAY_CLUSTER__BACKEND": "cudf", "SPILLWAY_CLUSTER__DASHBOARD_ADDRESS": "127.0.0.1:0", "SPILLWAY_ALLOWED_ROOTS": '["/tmp"]',
        "SPILLWAY_CLUSTER__DEVICE_MEMORY_LIMIT": "512MiB",
    }
    service = launch_service(tmp_path_factory.mktemp("tight_gpu_svc"), env, timeout=300)
    yield service
    service.stop()


@pytest.mark.gpu
def test_a_job_over_twice_its_device_limit_streams_with_spilling_and_gives_the_right_answer(
    tight_gpu_service: ServiceProcess, tmp_path: Path
) -> None:
    source = tmp_path / "big.parquet"
    rows = 60_000_000  # 2 int64 columns: ~960 MB decoded, over 2x the 512 MiB limit
    rng = np.random.default_rng(11)
    pl.DataFrame({"key": rng.integers(0, 5_000_000, rows), "value": rng.integers(0, 1_000, rows)}).write_parquet(source)
    spec = {
        "name": "big_groupby", "engine": "polars", "source": {"format": "parquet", "path": str(source)},
        "steps": [{"op": "groupby", "by": ["key"], "aggs": {"value": {"func": "sum", "column": "value"}}}], "sink": {"path": str(tmp_path / "out")},
    }
    with tight_gpu_service.client() as client:
        job = wait_terminal(client, client.submit(spec).id, timeout=600)
        lines = client.logs(job.id)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.progress.engine is not None and "streaming with spilling above 0.5 GiB" in job.progress.engine.reason
    assert any("streaming executor" in line for line in lines), lines
    assert job.resources is not None and job.resources.streaming_spilled_bytes is not None
    got = pl.read_parquet(tmp_path / "out" / "*.parquet").sort("key")
    want = pl.scan_parquet(source).group_by("key").agg(pl.col("value").sum()).sort("key").collect()
    assert got.equals(want.select(got.columns))
