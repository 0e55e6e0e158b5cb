"""Atomic commit: staging directory, rename, manifest, _SUCCESS; nothing on failure."""

from __future__ import annotations

from pathlib import Path

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import SinkExists
from spillway.jobs.sink import MANIFEST_NAME, SUCCESS_MARKER, SinkWriter, ensure_sink_free, read_manifest
from spillway.jobs.spec import SinkSpec


def frame() -> dd.DataFrame:
    pdf = pd.DataFrame({"k": [i % 3 for i in range(300)], "v": range(300)})
    return dd.from_pandas(pdf, npartitions=4)


def write(writer: SinkWriter) -> None:
    with dask.config.set(scheduler="sync"):
        dask.compute(writer.write_graph(frame()))


def test_commit_is_a_rename_with_manifest_and_marker(tmp_path: Path) -> None:
    sink = SinkSpec(path=str(tmp_path / "out"))
    writer = SinkWriter(sink, "job1")
    write(writer)
    assert not (tmp_path / "out").exists(), "nothing visible before commit"
    manifest = writer.commit()
    out = tmp_path / "out"
    assert (out / SUCCESS_MARKER).exists()
    assert not writer.staging.exists()
    assert manifest.total_rows == 300
    assert [f.path for f in manifest.files] == [f"part.{i:06d}.parquet" for i in range(4)]
    for entry in manifest.files:
        assert entry.rows == pq.read_metadata(out / entry.path).num_rows
        assert entry.size_bytes == (out / entry.path).stat().st_size
    assert [c.name for c in manifest.columns] == ["k", "v"]
    assert read_manifest(out)["total_rows"] == 300
    assert pd.read_parquet(out).v.sum() == sum(range(300))


def test_partition_on_writes_hive_directories(tmp_path: Path) -> None:
    writer = SinkWriter(SinkSpec(path=str(tmp_path / "out"), partition_on=["k"]), "job2")
    write(writer)
    manifest = writer.commit()
    assert {Path(f.path).parts[0] for f in manifest.files} == {"k=0", "k=1", "k=2"}
    assert manifest.total_rows == 300
    assert "k" in [c.name for c in manifest.columns]


def test_abort_leaves_nothing(tmp_path: Path) -> None:
    writer = SinkWriter(SinkSpec(path=str(tmp_path / "out")), "job3")
    write(writer)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_existing_data_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    with pytest.raises(SinkExists) as info:
        ensure_sink_free(SinkSpec(path=str(out)))
    assert info.value.field == "sink.path"
    writer = SinkWriter(SinkSpec(path=str(out)), "job4")
    write(writer)
    with pytest.raises(SinkExists):
        writer.commit()
    assert (out / "keep.txt").read_text() == "precious"
    assert not writer.staging.exists()
    assert not (out / MANIFEST_NAME).exists()


def test_empty_directory_is_a_free_sink(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    ensure_sink_free(SinkSpec(path=str(tmp_path / "out")))
    writer = SinkWriter(SinkSpec(path=str(tmp_path / "out")), "job5")
    write(writer)
    assert writer.commit().total_rows == 300
