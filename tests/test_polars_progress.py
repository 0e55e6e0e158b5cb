"""The Polars engine's progress: what each source has read, measured by the OS (jobs/read_progress.py)."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from spillway.cluster.polars_job import POLARS_NOTE, empty_progress, stage_names
from spillway.jobs.read_progress import READ_UNIT, ReadMeter, SourceRead, source_reads, to_mib
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from spillway.jobs.status import JobStatus

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the meter reads /proc/self/smaps (Linux)")


def two_table_spec(tmp_path: Path) -> JobSpec:
    facts, dims = tmp_path / "facts.parquet", tmp_path / "dims.csv"
    pd.DataFrame({"k": np.arange(50_000) % 100, "v": np.arange(50_000) * 1.5, "unused": ["x" * 20] * 50_000}).to_parquet(facts, row_group_size=10_000)
    pd.DataFrame({"k": range(100), "name": [f"n{i}" for i in range(100)]}).to_csv(dims, index=False)
    return JobSpec.model_validate({
        "name": "t",
        "sources": {"facts": {"format": "parquet", "path": str(facts), "columns": ["k", "v"]}, "dims": {"format": "csv", "path": str(dims)}},
        "source": "facts",
        "steps": [{"op": "join", "right": "dims", "on": ["k"]}, {"op": "groupby", "by": ["name"], "aggs": {"total": {"func": "sum", "column": "v"}}}],
        "sink": {"path": str(tmp_path / "out")},
    })


def test_each_source_is_a_read_stage_whose_total_is_the_column_chunks_it_keeps(tmp_path: Path) -> None:
    spec = two_table_spec(tmp_path)
    reads = {read.stage: read for read in source_reads(spec)}
    metadata = pq.ParquetFile(tmp_path / "facts.parquet").metadata
    kept = sum(
        metadata.row_group(g).column(c).total_compressed_size
        for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)
        if metadata.row_group(g).column(c).path_in_schema in ("k", "v")
    )
    assert reads["read facts"].total_bytes == kept < (tmp_path / "facts.parquet").stat().st_size
    assert reads["read dims"].total_bytes == (tmp_path / "dims.csv").stat().st_size  # not parquet: the file's size
    assert stage_names(spec) == ["read facts", "read dims", "steps: join → groupby", "write parquet"]


def test_with_the_query_a_source_s_total_is_the_columns_the_optimizer_keeps(tmp_path: Path) -> None:
    declared = two_table_spec(tmp_path)
    body = declared.model_dump(mode="json", exclude_none=True)
    del body["sources"]["facts"]["columns"]
    undeclared = JobSpec.model_validate(body)
    every_column = {r.stage: r.total_bytes for r in source_reads(undeclared)}["read facts"]
    as_run = {r.stage: r.total_bytes for r in source_reads(undeclared, build_lazyframe(plan_spec(undeclared)))}["read facts"]
    assert as_run == {r.stage: r.total_bytes for r in source_reads(declared)}["read facts"] < every_column  # k and v only


def test_on_the_cpu_read_stages_count_mib_and_on_the_gpu_every_stage_counts_one(tmp_path: Path) -> None:
    spec = two_table_spec(tmp_path)
    reads = source_reads(spec)
    cpu = empty_progress(spec, reads, "cpu")
    assert [(s.name, s.total, s.unit) for s in cpu.stages[:2]] == [(r.stage, to_mib(r.total_bytes), READ_UNIT) for r in reads]
    assert [(s.total, s.unit) for s in cpu.stages[2:]] == [(1, None), (1, None)] and cpu.note == POLARS_NOTE
    gpu = empty_progress(spec, reads, "gpu")
    assert all((s.done, s.total, s.unit) == (0, 1, None) for s in gpu.stages) and "libcudf" in (gpu.note or "")


@linux_only
def test_the_meter_counts_the_pages_of_a_source_this_process_has_touched_and_keeps_the_most_seen(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\1" * (8 << 20))
    meter = ReadMeter([SourceRead("read data", (str(path.resolve()),), 8 << 20)])
    assert meter.sample() == {"read data": 0}
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert meter.sample()["read data"] < (1 << 20)  # mapped, not yet read
        checksum = sum(mapped[offset] for offset in range(0, 4 << 20, 4096))  # touch the first 4 MiB
        seen = meter.sample()["read data"]
    assert checksum == (4 << 20) // 4096
    assert (4 << 20) <= seen <= (8 << 20)
    assert meter.sample()["read data"] == seen  # unmapped now: what was read stays read


@pytest.mark.engines("polars")
def test_a_polars_job_reports_mib_read_per_source_never_going_back_and_all_done_at_the_end(api, big_data: dict[str, Path], tmp_path: Path) -> None:
    spec = {
        "name": "progress", "source": {"format": "parquet", "path": str(big_data["sales"])},
        "steps": [{"op": "groupby", "by": ["region"], "aggs": {"total": {"func": "sum", "column": "amount"}}}],
        "sink": {"path": str(tmp_path / "out")},
    }
    seen: list[tuple[int, int, str | None]] = []
    job = api.wait(api.submit(spec).id, on_event=lambda event: seen.extend((s.done, s.total, s.unit) for s in event.progress.stages if s.name == "read source"), timeout=120)
    assert job.state == JobStatus.SUCCEEDED, (job.error, api.logs(job.id))
    final = next(s for s in job.progress.stages if s.name == "read source")
    assert final.unit == READ_UNIT and final.total > 0 and final.done == final.total
    assert all(unit == READ_UNIT and total == final.total for _, total, unit in seen)
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)
    assert job.progress.note == POLARS_NOTE
