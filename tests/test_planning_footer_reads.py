"""A Polars job's planning reads each parquet file version's footer once (jobs.parquet_footers.parquet_footer).

Found on an H100 (bench/long_query.py): a source of 3251 hard links to one TPC-H SF 10 lineitem file (a 1 MB footer of
524 row groups) took 50 s to plan, nothing logged. Each path's footer was parsed twice (the source check's schema,
then the read totals') and its 8384 column chunks walked in Python, again on every later job (the totals' cache kept
1024 files); the CPU's plan read each a third time (the row hint). The answers are the same, each footer read once.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from spillway.cluster import polars_job
from spillway.jobs import parquet_footers, read_progress, scan_rows
from spillway.jobs.engine_choice import choose_engine
from spillway.jobs.gpu_placement import place_on_gpu
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.read_progress import SourceRead, source_reads
from spillway.jobs.sandbox import check_paths, enforce_roots
from spillway.jobs.scan_rows import source_rows
from spillway.jobs.sources import files_listed_once
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec

ROWS, GROUP = 4_000, 500


@pytest.fixture
def footer_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Every footer pyarrow is asked to read, by path (its readers wrapped, not replaced), from a cold cache."""
    reads: Counter[str] = Counter()
    real_file, real_schema, real_metadata = pq.ParquetFile, pq.read_schema, pq.read_metadata

    class CountedFile(real_file):  # type: ignore[misc, valid-type]
        def __init__(self, source, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
            reads[str(source)] += 1
            super().__init__(source, *args, **kwargs)

    def counted(real):  # noqa: ANN001, ANN202
        def read(where, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            reads[str(where)] += 1
            return real(where, *args, **kwargs)
        return read

    monkeypatch.setattr(pq, "ParquetFile", CountedFile)
    monkeypatch.setattr(pq, "read_schema", counted(real_schema))
    monkeypatch.setattr(pq, "read_metadata", counted(real_metadata))
    clear_footer_caches()
    yield reads
    clear_footer_caches()


def clear_footer_caches() -> None:
    """A service that has read no footer yet (every cache of the modules that read footers)."""
    for module in (parquet_footers, read_progress, scan_rows):
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def write_file(path: Path, seed: int = 0) -> None:
    """A lineitem-like file: decimals, text keys, several row groups."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "l_returnflag": rng.choice(["A", "N", "R"], ROWS), "l_linestatus": rng.choice(["F", "O"], ROWS),
        "l_quantity": rng.integers(1, 50, ROWS).astype(float), "l_extendedprice": rng.random(ROWS) * 1000,
        "l_comment": [f"comment {i}" for i in range(ROWS)],
    })
    frame.to_parquet(path, row_group_size=GROUP)


def q1_spec(folder: Path, sink: Path) -> JobSpec:
    aggs = {"sum_qty": {"func": "sum", "column": "l_quantity"}, "sum_price": {"func": "sum", "column": "l_extendedprice"},
            "count_order": {"func": "size"}}
    return JobSpec.model_validate({
        "name": "q1", "engine": "auto", "source": {"format": "parquet", "path": str(folder)},
        "steps": [{"op": "groupby", "by": ["l_returnflag", "l_linestatus"], "aggs": aggs},
                  {"op": "sort", "by": ["l_returnflag", "l_linestatus"]}],
        "sink": {"path": str(sink), "mode": "overwrite"},
    })


def plan(spec: JobSpec, device: str, root: Path) -> tuple[list[SourceRead], int | None]:
    """The steps of cluster.manager.JobManager._plan_query_listed that read sources, as it runs them."""
    with enforce_roots([str(root)]), files_listed_once():
        check_paths(spec, [str(root)])
        logical = plan_spec(spec)
        choice = choose_engine(spec, "auto", "cudf" if device == "gpu" else "pandas")
        assert choice.engine == "polars"
        frame = build_lazyframe(logical, filters_before_casts=device == "cpu", ieee_comparisons=device == "gpu")
        polars_job.output_columns(frame)
        reads = source_reads(spec, frame)
        placement = place_on_gpu(spec, reads, 2**30) if device == "gpu" else None
        polars_job.empty_progress(spec, reads, device)
        return reads, placement.working_set_bytes if placement is not None else None


def linked(tmp_path: Path, copies: int) -> Path:
    folder = tmp_path / "data" / "lineitem"
    folder.mkdir(parents=True)
    write_file(tmp_path / "data" / "one.parquet")
    for copy in range(copies):
        os.link(tmp_path / "data" / "one.parquet", folder / f"copy{copy:03d}.parquet")
    return folder


def expected_bytes(path: Path, columns: set[str]) -> tuple[int, int]:
    """(compressed, uncompressed) bytes of ``columns``' chunks, walked chunk by chunk."""
    metadata = pq.read_metadata(path)
    chunks = [metadata.row_group(g).column(c) for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)]
    kept = [chunk for chunk in chunks if chunk.path_in_schema in columns]
    return sum(c.total_compressed_size for c in kept), sum(c.total_uncompressed_size for c in kept)


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_hard_links_of_one_file_are_one_footer_read(tmp_path: Path, footer_reads: Counter[str], device: str) -> None:
    copies = 8
    folder = linked(tmp_path, copies)
    reads, working_set = plan(q1_spec(folder, tmp_path / "data" / "out"), device, tmp_path)
    assert sum(footer_reads.values()) == 1, footer_reads  # was 2 a link on the GPU's plan, 3 on the CPU's
    packed, unpacked = expected_bytes(tmp_path / "data" / "one.parquet", {"l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice"})
    assert [(r.stage, len(r.files), r.total_bytes, r.in_memory_bytes) for r in reads] == [("read source", copies, copies * packed, copies * unpacked)]
    assert working_set == (copies * unpacked if device == "gpu" else None)


def test_distinct_files_are_read_once_each_and_a_job_planned_again_reads_none(tmp_path: Path, footer_reads: Counter[str]) -> None:
    folder = tmp_path / "data" / "lineitem"
    folder.mkdir(parents=True)
    for number in range(5):
        write_file(folder / f"part{number}.parquet", seed=number)
    spec = q1_spec(folder, tmp_path / "data" / "out")
    first, _ = plan(spec, "cpu", tmp_path)
    assert sorted(footer_reads.values()) == [1] * 5, footer_reads  # was 3 each: schema check, row hint, read totals
    footer_reads.clear()
    again, _ = plan(spec, "cpu", tmp_path)
    assert again == first and not footer_reads


def test_a_rewritten_file_is_read_again_and_its_new_counts_used(tmp_path: Path, footer_reads: Counter[str]) -> None:
    folder = tmp_path / "data" / "lineitem"
    folder.mkdir(parents=True)
    part = folder / "part0.parquet"
    write_file(part)
    source = q1_spec(folder, tmp_path / "data" / "out").source
    assert source_rows(source, "source") == ROWS
    pd.read_parquet(part).head(ROWS // 2).to_parquet(part.with_suffix(".tmp"), row_group_size=GROUP)
    os.replace(part.with_suffix(".tmp"), part)  # another inode, size and time
    assert source_rows(source, "source") == ROWS // 2
    assert footer_reads[str(part)] == 2
