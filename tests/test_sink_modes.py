"""Sink formats, options and write modes on local disk: the writer itself, then through the service."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import SinkExists
from spillway.jobs.sink import MANIFEST_NAME, SUCCESS_MARKER, TMP_PREFIX, SinkSchemaMismatch, SinkWriter, ensure_sink_free, read_manifest
from spillway.jobs.sources import resolve_files
from spillway.jobs.spec import JobSpec, SinkSpec, SourceSpec
from spillway.jobs.status import JobStatus, ResultManifest
from spillway.service.client import ApiError, SpillwayClient
from tests.conftest import ServiceProcess, start_service, wait_terminal


def pandas_frame(rows: int = 300, first: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"k": [i % 3 for i in range(first, first + rows)], "v": range(first, first + rows)})


def staged(sink: SinkSpec, job_id: str, data: pd.DataFrame, partitions: int = 3) -> SinkWriter:
    """A writer whose job has run: its files written, not committed."""
    writer = SinkWriter(sink, job_id)
    with dask.config.set(scheduler="sync"):
        dask.compute(writer.write_graph(dd.from_pandas(data, npartitions=partitions)))
    return writer


def write(sink: SinkSpec, job_id: str, data: pd.DataFrame, partitions: int = 3) -> ResultManifest:
    return staged(sink, job_id, data, partitions).commit()


def read_back(path: Path) -> pd.DataFrame:
    """What a reader honouring the manifest sees, ordered by the first column."""
    manifest = read_manifest(path)
    reader = pd.read_csv if manifest["format"] == "csv" else pd.read_parquet
    frame = pd.concat([reader(path / f["path"]) for f in manifest["files"]])
    return frame.sort_values(frame.columns[0] if "v" not in frame else "v").reset_index(drop=True)


def assert_manifest_matches_disk(path: Path) -> None:
    manifest = read_manifest(path)
    data_files = sorted(
        p.relative_to(path).as_posix() for p in path.rglob("part.*") if not any(s.startswith((".", "_")) for s in p.relative_to(path).parts)
    )
    assert sorted(f["path"] for f in manifest["files"]) == data_files
    for entry in manifest["files"]:
        assert (path / entry["path"]).stat().st_size == entry["size_bytes"]
    assert manifest["total_rows"] == sum(f["rows"] for f in manifest["files"]) == len(read_back(path))
    assert (path / SUCCESS_MARKER).exists()
    assert not [p for p in path.parent.iterdir() if p.name.startswith((TMP_PREFIX, ".spillway-old-"))]


# ---- formats and options ---------------------------------------------------------------------


def test_csv_sink_writes_csv_parts_with_a_manifest(tmp_path: Path) -> None:
    out = tmp_path / "csv"
    manifest = write(SinkSpec(format="csv", path=str(out)), "c1", pandas_frame())
    assert manifest.format == "csv" and manifest.total_rows == 300
    assert [f.path for f in manifest.files] == [f"part.{i:06d}.csv" for i in range(3)]
    assert [(c.name, c.type) for c in manifest.columns] == [("k", "int64"), ("v", "int64")]
    pd.testing.assert_frame_equal(read_back(out), pandas_frame())
    assert_manifest_matches_disk(out)


def test_csv_sink_gzip_and_quoted_newlines_count_rows(tmp_path: Path) -> None:
    data = pandas_frame(10).assign(note=["line one\nline two", "plain"] * 5)
    manifest = write(SinkSpec(format="csv", path=str(tmp_path / "gz"), compression="gzip"), "c2", data, partitions=2)
    assert all(f.path.endswith(".csv.gz") for f in manifest.files)
    assert manifest.total_rows == 10 and [f.rows for f in manifest.files] == [5, 5]
    back = pd.concat(pd.read_csv(tmp_path / "gz" / f.path) for f in manifest.files).reset_index(drop=True)
    pd.testing.assert_frame_equal(back, data)
    # A gzipped CSV sink reads back as a Spillway source.
    assert len(resolve_files(SourceSpec(format="csv", path=str(tmp_path / "gz")))) == 2


def test_a_csv_field_over_128_kib_is_counted_and_committed(tmp_path: Path) -> None:
    # Python's csv reader refuses fields over 128 KiB by default: the commit's row count failed the job after its query.
    import csv

    before = csv.field_size_limit(131072)  # Python's default, whatever an earlier test in this process set
    try:
        data = pd.DataFrame({"k": [1, 2], "v": ["x" * 500_000, "short"]})
        manifest = write(SinkSpec(format="csv", path=str(tmp_path / "wide")), "c3", data, partitions=1)
    finally:
        csv.field_size_limit(max(before, csv.field_size_limit()))
    assert manifest.total_rows == 2 and manifest.files[0].rows == 2


@pytest.mark.parametrize(
    ("sink", "field"),
    [
        ({"format": "csv", "row_group_size": 10}, "row_group_size"),
        ({"format": "csv", "partition_on": ["k"]}, "partition_on"),
        ({"format": "csv", "compression": "snappy"}, "compression"),
        ({"mode": "replace"}, "mode"),
        ({"row_group_size": 0}, "row_group_size"),
    ],
)
def test_sink_options_are_checked_per_format(sink: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError) as info:
        JobSpec.model_validate({"source": {"format": "csv", "path": "x"}, "sink": {"path": "out", **sink}})
    assert [e["loc"] for e in info.value.errors()] == [("sink", field)]  # type: ignore[attr-defined]


def test_row_group_size_and_compression_reach_the_parquet_files(tmp_path: Path) -> None:
    manifest = write(SinkSpec(path=str(tmp_path / "rg"), row_group_size=25, compression="zstd"), "p1", pandas_frame(), partitions=2)
    for entry in manifest.files:
        metadata = pq.read_metadata(tmp_path / "rg" / entry.path)
        assert metadata.num_rows == 150 and metadata.num_row_groups == 6
        assert {metadata.row_group(i).num_rows for i in range(6)} == {25}
        assert metadata.row_group(0).column(0).compression == "ZSTD"
    plain = write(SinkSpec(path=str(tmp_path / "plain"), compression="none"), "p2", pandas_frame(), partitions=1)
    assert pq.read_metadata(tmp_path / "plain" / plain.files[0].path).row_group(0).column(0).compression == "UNCOMPRESSED"
    default = write(SinkSpec(path=str(tmp_path / "default")), "p3", pandas_frame(), partitions=1)
    assert pq.read_metadata(tmp_path / "default" / default.files[0].path).row_group(0).column(0).compression == "SNAPPY"


# ---- write modes --------------------------------------------------------------------------------


def test_overwrite_swaps_in_the_new_output_and_removes_the_old(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(SinkSpec(path=str(out)), "first", pandas_frame())
    with pytest.raises(SinkExists):
        ensure_sink_free(SinkSpec(path=str(out)))
    sink = SinkSpec(path=str(out), mode="overwrite")
    ensure_sink_free(sink)
    writer = staged(sink, "second", pandas_frame(50, first=1000))
    assert read_manifest(out)["version"] == 1 and len(read_back(out)) == 300, "the old output stays until the commit"
    manifest = writer.commit()
    assert manifest.version == 2 and manifest.mode == "overwrite" and manifest.total_rows == 50
    assert {f.job_id for f in manifest.files} == {"second"} and all(f.path.startswith("part.second.") for f in manifest.files)
    pd.testing.assert_frame_equal(read_back(out), pandas_frame(50, first=1000))
    assert_manifest_matches_disk(out)


def test_overwrite_and_append_refuse_data_spillway_did_not_write(tmp_path: Path) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "precious.csv").write_text("a\n1\n")
    for mode in ("overwrite", "append"):
        with pytest.raises(SinkExists, match="did not write") as info:
            ensure_sink_free(SinkSpec(path=str(out), mode=mode))
        assert info.value.field == "sink.path"
        writer = staged(SinkSpec(path=str(out), mode=mode), f"x{mode}", pandas_frame())
        with pytest.raises(SinkExists):
            writer.commit()
        assert sorted(p.name for p in out.iterdir()) == ["precious.csv"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_append_adds_files_and_rewrites_the_manifest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = SinkSpec(path=str(out), mode="append")
    write(sink, "a1", pandas_frame(100))  # appending to nothing creates the sink
    manifest = write(sink, "a2", pandas_frame(100, first=100))
    assert manifest.version == 2 and manifest.total_rows == 200 and len(manifest.files) == 6
    assert [f.job_id for f in manifest.files] == ["a1"] * 3 + ["a2"] * 3, "committed order"
    pd.testing.assert_frame_equal(read_back(out), pandas_frame(200))
    assert_manifest_matches_disk(out)
    # A part file that no manifest lists (an append in progress) is not read by a Spillway source.
    (out / "part.inflight.000000.parquet").write_bytes((out / manifest.files[0].path).read_bytes())
    assert len(resolve_files(SourceSpec(format="parquet", path=str(out)))) == 6


def test_append_with_partitions_keeps_hive_layout(tmp_path: Path) -> None:
    out = tmp_path / "hive"
    sink = SinkSpec(path=str(out), mode="append", partition_on=["k"])
    write(sink, "h1", pandas_frame(90))
    manifest = write(sink, "h2", pandas_frame(90, first=90))
    assert {Path(f.path).parts[0] for f in manifest.files} == {"k=0", "k=1", "k=2"}
    assert manifest.total_rows == 180 and [c.name for c in manifest.columns] == ["v", "k"]
    assert_manifest_matches_disk(out)
    with pytest.raises(SinkSchemaMismatch) as info:
        ensure_sink_free(SinkSpec(path=str(out), mode="append"))
    assert info.value.field == "sink.partition_on" and info.value.code == "sink_schema_mismatch"


def test_append_with_other_columns_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(SinkSpec(path=str(out)), "s1", pandas_frame())
    sink = SinkSpec(path=str(out), mode="append")
    # At submit: the job's output column names (what jobs.validate.check_spec gives).
    with pytest.raises(SinkSchemaMismatch) as info:
        ensure_sink_free(sink, columns=["k", "w"])
    assert info.value.field == "sink.mode" and "k, w" in info.value.message and "k, v" in info.value.message
    ensure_sink_free(sink, columns=["v", "k"])  # parquet matches columns by name
    with pytest.raises(SinkSchemaMismatch, match="holds parquet") as info:
        ensure_sink_free(SinkSpec(path=str(out), mode="append", format="csv"))
    assert info.value.field == "sink.format"
    # At commit: same names, another type; nothing changes and the job's files are removed.
    writer = staged(sink, "s2", pandas_frame().astype({"v": "float64"}))
    with pytest.raises(SinkSchemaMismatch, match="v int64 → double") as info:
        writer.commit()
    assert info.value.field == "sink.mode"
    assert read_manifest(out)["version"] == 1
    assert_manifest_matches_disk(out)


def test_csv_append_needs_the_same_column_order(tmp_path: Path) -> None:
    out = tmp_path / "csv"
    sink = SinkSpec(path=str(out), format="csv", mode="append")
    write(sink, "o1", pandas_frame())
    with pytest.raises(SinkSchemaMismatch):
        ensure_sink_free(sink, columns=["v", "k"])
    with pytest.raises(SinkSchemaMismatch):  # found while planning, before any work
        staged(sink, "o2", pandas_frame()[["v", "k"]])
    assert write(sink, "o3", pandas_frame(30).astype({"v": "float64"})).total_rows == 330, "CSV types may differ"


def test_concurrent_appends_keep_every_row(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = SinkSpec(path=str(out), mode="append")
    writers = [staged(sink, f"w{i}", pandas_frame(50, first=50 * i)) for i in range(6)]
    start = threading.Barrier(len(writers))
    errors: list[BaseException] = []

    def commit(writer: SinkWriter) -> None:
        start.wait()
        try:
            writer.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    manifest = read_manifest(out)
    assert manifest["version"] == 6 and len(manifest["files"]) == 18
    pd.testing.assert_frame_equal(read_back(out), pandas_frame(300))
    assert_manifest_matches_disk(out)


def test_abort_of_an_append_leaves_the_committed_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = SinkSpec(path=str(out), mode="append")
    write(sink, "k1", pandas_frame())
    writer = staged(sink, "k2", pandas_frame(30, first=300))
    # As if the service died while moving files in: one is in the sink, unlisted.
    moved = next(writer.staging.rglob("part.*"))
    moved.rename(out / moved.name)
    writer.abort()
    assert not writer.staging.exists() and not (out / moved.name).exists()
    assert_manifest_matches_disk(out)
    SinkWriter(sink, "k1").abort()  # a committed job's files are never removed
    assert_manifest_matches_disk(out)
    assert len(read_back(out)) == 300


# ---- through the service ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modes_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    proc = start_service(tmp_path_factory.mktemp("modes"), extra_env={"SPILLWAY_MAX_CONCURRENT_JOBS": "2"})
    yield proc
    proc.stop()


def job_spec(data: dict[str, Path], sink: dict[str, Any], *, region: str = "north", steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "source": {"format": "parquet", "path": str(data["sales"])},
        "steps": steps if steps is not None else [{"op": "filter", "expr": f"region == '{region}'"}, {"op": "select", "columns": ["order_id", "amount"]}],
        "sink": sink,
    }


def run(client: SpillwayClient, spec: dict[str, Any]) -> Any:
    job = wait_terminal(client, client.submit(spec).id)
    assert job.state == JobStatus.SUCCEEDED, job.error
    return job


def test_modes_through_the_service(modes_service: ServiceProcess, sample_data: dict[str, Path], sales_frame: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "out"
    expected = {r: sales_frame[sales_frame.region == r][["order_id", "amount"]] for r in ("north", "south")}
    with modes_service.client() as client:
        run(client, job_spec(sample_data, {"path": str(out)}))
        with pytest.raises(ApiError) as info:
            client.submit(job_spec(sample_data, {"path": str(out)}))
        assert info.value.status == 409 and info.value.detail.field == "sink.path"
        appended = run(client, job_spec(sample_data, {"path": str(out), "mode": "append"}, region="south")).result
        assert appended.version == 2 and appended.total_rows == len(expected["north"]) + len(expected["south"])
        got = pd.read_parquet(out).sort_values("order_id").reset_index(drop=True)
        want = pd.concat(expected.values()).sort_values("order_id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        replaced = run(client, job_spec(sample_data, {"path": str(out), "mode": "overwrite", "format": "csv"}, region="south")).result
        assert replaced.version == 3 and replaced.format == "csv" and replaced.total_rows == len(expected["south"])
        assert not list(out.glob("*.parquet"))
        got = pd.concat(pd.read_csv(out / f.path) for f in replaced.files).sort_values("order_id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected["south"].sort_values("order_id").reset_index(drop=True), check_dtype=False)
    assert_manifest_matches_disk(out)


def test_mismatched_append_through_the_service_changes_nothing(modes_service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    with modes_service.client() as client:
        run(client, job_spec(sample_data, {"path": str(out)}))
        wrong = job_spec(sample_data, {"path": str(out), "mode": "append"}, steps=[{"op": "select", "columns": ["order_id", "region"]}])
        # Refused at submit when the service passes the job's columns to ensure_sink_free, else
        # while planning, before any work; either way with the same error and nothing written.
        try:
            job = wait_terminal(client, client.submit(wrong).id)
            assert job.state == JobStatus.FAILED and job.error is not None
            error = job.error
        except ApiError as exc:
            assert exc.status == 409
            error = exc.detail
        assert error.code == "sink_schema_mismatch" and error.field == "sink.mode" and "region" in error.message
    assert read_manifest(out)["version"] == 1
    assert_manifest_matches_disk(out)


def test_concurrent_appends_through_the_service(modes_service: ServiceProcess, sample_data: dict[str, Path], sales_frame: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "out"
    regions = ["north", "south", "east", "west"]
    with modes_service.client() as client:
        ids = [client.submit(job_spec(sample_data, {"path": str(out), "mode": "append"}, region=r)).id for r in regions]
        jobs = [wait_terminal(client, job_id) for job_id in ids]
    assert [j.state for j in jobs] == [JobStatus.SUCCEEDED] * 4, [j.error for j in jobs]
    assert sorted(j.result.version for j in jobs) == [1, 2, 3, 4]
    manifest = read_manifest(out)
    assert manifest["version"] == 4 and {f["job_id"] for f in manifest["files"]} == set(ids)
    want = sales_frame[sales_frame.region.isin(regions)][["order_id", "amount"]].sort_values("order_id").reset_index(drop=True)
    got = pd.read_parquet(out).sort_values("order_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert_manifest_matches_disk(out)
    assert (out / MANIFEST_NAME).exists()
