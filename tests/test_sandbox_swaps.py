"""Links swapped in while a job waits, or while it runs, do not lead it outside the data roots.

A job's paths are checked at submit; someone who may create links in a root can then swap a
source file, a folder inside a source or the sink's parent for a link that leads out. The
manager checks again when the job starts, the sources' files are resolved and checked as they
are listed, and the sink's parent at the commit: the job fails as ``path_not_allowed``, nothing
is committed and no output holds the secret's rows. Live tests on both engines, then the two
later checks on their own (a swap after the job started).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spillway.jobs.dask_read import read_source
from spillway.jobs.polars_io import scan_source, write_output
from spillway.jobs.safe_open import SourceChanged, open_checked
from spillway.jobs.sandbox import PathNotAllowed, checked_so_far, enforce_roots
from spillway.jobs.sink import SinkWriter
from spillway.jobs.sources import resolve_files
from spillway.jobs.spec import SinkSpec, SourceSpec
from spillway.jobs.status import ColumnSchema, JobStatus
from spillway.service.client import SpillwayClient
from tests.conftest import ServiceProcess, start_service, wait_for, wait_terminal
from tests.fault_jobs import slow_spec

SECRET_AMOUNT = 987_654.25  # a value no sample row has: finding it in an output means the secret was read


@pytest.fixture(scope="module")
def swap_env(tmp_path_factory: pytest.TempPathFactory, big_data: dict[str, Path]) -> Iterator[dict[str, Any]]:
    """A service running one job at a time, whose roots are one directory and the slow jobs' data."""
    root = tmp_path_factory.mktemp("swaproot")
    secret = tmp_path_factory.mktemp("secret")  # outside every root
    sample = pd.read_parquet(next(big_data["sales"].glob("*.parquet"))).head(500)
    sample.to_parquet(root / "sample.parquet", index=False)
    sample.assign(amount=SECRET_AMOUNT).to_parquet(secret / "secret.parquet", index=False)
    roots = f'["{root}", "{big_data["sales"].parent}"]'
    service = start_service(root / "svc", extra_env={"SPILLWAY_ALLOWED_ROOTS": roots, "SPILLWAY_MAX_CONCURRENT_JOBS": "1"})
    yield {"service": service, "root": root, "secret": secret, "big": big_data}
    service.stop()


def _run_queued(env: dict[str, Any], engine: str, name: str, victim: dict[str, Any], swap: Callable[[], None]) -> Any:
    """Submit ``victim`` behind a slow job, ``swap`` while it waits, let it run; return it finished."""
    service: ServiceProcess = env["service"]
    # A cancel of a running Polars query restarts its worker: on 2 busy cores that can take a while.
    with SpillwayClient(service.url, timeout=120) as api:
        slow = api.submit(slow_spec(engine, env["big"], env["root"] / f"slow_{name}_{engine}")).id
        wait_for(lambda: api.get(slow).state == JobStatus.RUNNING, timeout=120, what="the slow job to start")
        job_id = api.submit({"engine": engine, **victim}).id  # accepted: nothing leads out yet
        swap()
        assert api.get(job_id).state == JobStatus.PENDING, "the swap must happen while the job waits"
        api.cancel(slow)
        return wait_terminal(api, job_id, timeout=180)


def _outputs_hold_no_secret(*places: Path) -> None:
    for place in places:
        for path in place.rglob("*.parquet"):
            if path.is_file() and not path.is_symlink() and path.resolve().is_relative_to(place.resolve()):
                assert not (pd.read_parquet(path).get("amount", pd.Series(dtype=float)) == SECRET_AMOUNT).any(), f"{path} holds the secret's rows"


def _assert_refused(job: Any) -> None:
    assert job.state == JobStatus.FAILED, job
    assert job.error is not None and job.error.code == "path_not_allowed", job.error


def test_source_file_swapped_for_a_link_while_queued_fails_path_not_allowed(swap_env: dict[str, Any], engine: str) -> None:
    root, secret = swap_env["root"], swap_env["secret"]
    source = root / f"src_file_{engine}"
    source.mkdir()
    (source / "part.parquet").write_bytes((root / "sample.parquet").read_bytes())
    sink = root / f"out_file_{engine}"

    def swap() -> None:
        (source / "part.parquet").unlink()
        os.symlink(secret / "secret.parquet", source / "part.parquet")

    job = _run_queued(swap_env, engine, "file", {"source": {"format": "parquet", "path": str(source)}, "sink": {"path": str(sink)}}, swap)
    _assert_refused(job)
    assert not sink.exists(), "nothing is committed"
    _outputs_hold_no_secret(root)


def test_directory_inside_a_source_swapped_for_a_link_while_queued_fails_path_not_allowed(swap_env: dict[str, Any], engine: str) -> None:
    root, secret = swap_env["root"], swap_env["secret"]
    source = root / f"src_dir_{engine}"
    (source / "inner").mkdir(parents=True)
    (source / "inner" / "part.parquet").write_bytes((root / "sample.parquet").read_bytes())
    sink = root / f"out_dir_{engine}"

    def swap() -> None:
        (source / "inner").rename(root / f"moved_inner_{engine}")
        os.symlink(secret, source / "inner")

    glob = f"{source}/*/*.parquet"
    job = _run_queued(swap_env, engine, "dir", {"source": {"format": "parquet", "path": glob}, "sink": {"path": str(sink)}}, swap)
    _assert_refused(job)
    assert not sink.exists(), "nothing is committed"
    _outputs_hold_no_secret(root)


def test_sink_parent_swapped_for_a_link_while_queued_fails_path_not_allowed(swap_env: dict[str, Any], engine: str) -> None:
    root, secret = swap_env["root"], swap_env["secret"]
    parent = root / f"sink_parent_{engine}"
    parent.mkdir()
    before = sorted(p.name for p in secret.iterdir())

    def swap() -> None:
        parent.rmdir()
        os.symlink(secret, parent)

    victim = {"source": {"format": "parquet", "path": str(root / "sample.parquet")}, "sink": {"path": str(parent / "out")}}
    job = _run_queued(swap_env, engine, "sink", victim, swap)
    _assert_refused(job)
    assert job.error.field == "sink.path"
    assert sorted(p.name for p in secret.iterdir()) == before, "nothing is written or committed outside the root"


# The later checks on their own: a swap after the start's check, while the job is planned or runs.


def test_source_files_are_resolved_and_checked_as_they_are_listed(tmp_path: Path) -> None:
    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "src").mkdir(parents=True)
    secret.mkdir()
    pd.DataFrame({"a": [1]}).to_parquet(root / "src" / "in.parquet")
    pd.DataFrame({"a": [2]}).to_parquet(secret / "s.parquet")
    source = SourceSpec(format="parquet", path=str(root / "src"))
    os.symlink(root / "src" / "in.parquet", root / "src" / "alias.parquet")  # a link that stays inside is fine
    with enforce_roots([str(root)]):
        assert resolve_files(source) == [str((root / "src" / "in.parquet").resolve())] * 2
    os.symlink(secret / "s.parquet", root / "src" / "leak.parquet")
    assert len(resolve_files(source)) == 3  # outside a job's planning nothing is enforced here
    with enforce_roots([str(root)]), pytest.raises(PathNotAllowed, match="outside the allowed roots") as caught:
        resolve_files(source)
    assert caught.value.field == "source.path"


def test_sink_parent_swapped_after_staging_is_refused_at_the_commit(tmp_path: Path) -> None:
    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "parent").mkdir(parents=True)
    secret.mkdir()
    writer = SinkWriter(SinkSpec(path=str(root / "parent" / "out")), "job1", allowed_roots=[str(root)])
    staging = Path(writer.prepare(["a"]))
    staging.mkdir()
    pd.DataFrame({"a": [1]}).to_parquet(staging / "part.000000.parquet")
    (root / "parent").rename(root / "parent_moved")
    os.symlink(secret, root / "parent")
    with pytest.raises(PathNotAllowed) as caught:
        writer.commit()
    assert caught.value.code == "path_not_allowed" and caught.value.field == "sink.path"
    assert list(secret.iterdir()) == [], "nothing is committed outside the root"


# Where the files are opened: a swap after the check and before the open (each open called directly).


def _source_and_secret(tmp_path: Path) -> tuple[Path, Path]:
    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "src").mkdir(parents=True)
    (secret / "src").mkdir(parents=True)
    frame = pd.DataFrame({"a": [1, 2, 3]})
    frame.to_parquet(root / "src" / "in.parquet", index=False)
    frame.to_csv(root / "src" / "in.csv", index=False)
    pd.DataFrame({"a": [int(SECRET_AMOUNT)]}).to_parquet(secret / "src" / "in.parquet", index=False)
    pd.DataFrame({"a": [int(SECRET_AMOUNT)]}).to_csv(secret / "src" / "in.csv", index=False)
    return root, secret


def _swap_folder_for_link(root: Path, secret: Path) -> None:
    (root / "src").rename(root / "src_moved")
    os.symlink(secret / "src", root / "src")


def test_a_checked_file_is_opened_without_following_a_link_swapped_in_after_the_check(tmp_path: Path) -> None:
    root, secret = _source_and_secret(tmp_path)
    with enforce_roots([str(root)]):
        [path] = resolve_files(SourceSpec(format="parquet", path=str(root / "src" / "in.parquet")), field="sources.orders")
        [checked] = checked_so_far()
    assert checked.path == path and checked.field == "sources.orders.path"
    os.close(open_checked(checked))  # as checked: it opens
    _swap_folder_for_link(root, secret)
    assert Path(path).resolve().is_relative_to(secret), "the path now leads to the secret"
    with pytest.raises(PathNotAllowed, match="is now a link") as caught:
        open_checked(checked)
    assert caught.value.field == "sources.orders.path"


def test_a_checked_file_replaced_by_another_file_is_not_opened(tmp_path: Path) -> None:
    root, _ = _source_and_secret(tmp_path)
    with enforce_roots([str(root)]):
        resolve_files(SourceSpec(format="parquet", path=str(root / "src" / "in.parquet")))
        [checked] = checked_so_far()
    os.replace(root / "src" / "in.csv", root / "src" / "in.parquet")  # no link: another inode at the same path
    with pytest.raises(SourceChanged, match="replaced after it was checked") as caught:
        open_checked(checked)
    assert caught.value.code == "source_changed"


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_dask_partitions_are_opened_without_following_a_link_swapped_in_after_planning(tmp_path: Path, fmt: str) -> None:
    root, secret = _source_and_secret(tmp_path)
    with enforce_roots([str(root)]):
        frame = read_source(SourceSpec(format=fmt, path=str(root / "src" / f"in.{fmt}")))
    assert frame["a"].compute(scheduler="sync").tolist() == [1, 2, 3]  # the graph reads the checked file
    _swap_folder_for_link(root, secret)
    with pytest.raises(PathNotAllowed, match="is now a link"):
        frame["a"].compute(scheduler="sync")
    with enforce_roots(None):  # the same graph without a job's roots reads what the path leads to: the check is what refused
        assert read_source(SourceSpec(format=fmt, path=str(root / "src" / f"in.{fmt}")))["a"].compute(scheduler="sync").tolist() == [int(SECRET_AMOUNT)]


def test_a_polars_query_over_a_file_swapped_after_planning_writes_nothing(tmp_path: Path) -> None:
    root, secret = _source_and_secret(tmp_path)
    writer = SinkWriter(SinkSpec(path=str(root / "out")), "job1", allowed_roots=[str(root)])
    with enforce_roots([str(root)]):
        frame = scan_source(SourceSpec(format="parquet", path=str(root / "src")))
        target = writer.polars_target([ColumnSchema(name="a", type="int64")])
    assert [Path(f.path).name for f in target.checked] == ["in.parquet"]
    _swap_folder_for_link(root, secret)
    assert Path(target.checked[0].path).resolve().is_relative_to(secret), "by path, the scan would now read the secret"
    with pytest.raises(PathNotAllowed, match="is now a link"):
        write_output(frame, target)
    assert not Path(target.location).exists() or not list(Path(target.location).rglob("*.parquet")), "nothing is written"


def test_the_sink_commit_renames_inside_the_parent_it_opened_not_through_a_link_swapped_in_after(tmp_path: Path) -> None:
    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "parent").mkdir(parents=True)
    secret.mkdir()
    writer = SinkWriter(SinkSpec(path=str(root / "parent" / "out")), "job1", allowed_roots=[str(root)])
    staging = Path(writer.prepare(["a"]))
    staging.mkdir()
    pd.DataFrame({"a": [1]}).to_parquet(staging / "part.000000.parquet")
    parent = writer._open_parent()  # checked and opened: from here on the commit works relative to this directory
    staging_fd = writer._open_below(parent, staging.name)
    try:
        (root / "parent").rename(root / "parent_moved")
        os.symlink(secret, root / "parent")
        manifest = writer._commit_local_at(parent, staging_fd)
    finally:
        os.close(staging_fd)
        os.close(parent)
    assert list(secret.iterdir()) == [], "nothing is committed through the link"
    committed = root / "parent_moved" / "out"
    assert (committed / "_SUCCESS").is_file() and manifest.total_rows == 1
    assert pd.read_parquet(committed)["a"].tolist() == [1]


def test_a_staging_directory_swapped_for_a_link_is_not_committed(tmp_path: Path) -> None:
    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "parent").mkdir(parents=True)
    secret.mkdir()
    writer = SinkWriter(SinkSpec(path=str(root / "parent" / "out")), "job1", allowed_roots=[str(root)])
    staging = Path(writer.prepare(["a"]))
    (secret / "staged").mkdir()
    pd.DataFrame({"a": [int(SECRET_AMOUNT)]}).to_parquet(secret / "staged" / "part.000000.parquet")
    os.symlink(secret / "staged", staging)
    with pytest.raises(PathNotAllowed, match="is now a link") as caught:
        writer.commit()
    assert caught.value.field == "sink.path"
    assert not (root / "parent" / "out").exists() and not os.path.lexists(root / "parent" / "out"), "nothing is committed"
    assert sorted(p.name for p in (secret / "staged").iterdir()) == ["part.000000.parquet"], "nothing is written outside the root"


def test_on_another_host_the_inode_alone_identifies_a_checked_file(tmp_path: Path) -> None:
    # A worker on another host of a shared file system sees its own device number for it.
    root, _ = _source_and_secret(tmp_path)
    with enforce_roots([str(root)]):
        resolve_files(SourceSpec(format="parquet", path=str(root / "src" / "in.parquet")))
        [checked] = checked_so_far()
    elsewhere = dataclasses.replace(checked, host=f"not-{checked.host}", device=checked.device + 1)
    os.close(open_checked(elsewhere))
    with pytest.raises(SourceChanged):
        open_checked(dataclasses.replace(checked, device=checked.device + 1))  # on this host the device counts
    os.replace(root / "src" / "in.csv", root / "src" / "in.parquet")
    with pytest.raises(SourceChanged):
        open_checked(elsewhere)


def test_a_polars_worker_does_not_write_through_a_staging_directory_swapped_for_a_link(tmp_path: Path) -> None:
    root, secret = _source_and_secret(tmp_path)
    writer = SinkWriter(SinkSpec(path=str(root / "out")), "job1", allowed_roots=[str(root)])
    with enforce_roots([str(root)]):
        frame = scan_source(SourceSpec(format="parquet", path=str(root / "src" / "in.parquet")))
        target = writer.polars_target([ColumnSchema(name="a", type="int64")])
    assert target.root == str(root.resolve())
    (secret / "staged").mkdir()
    os.symlink(secret / "staged", target.location)  # where the worker will write, before it does
    with pytest.raises(PathNotAllowed, match="is now a link") as caught:
        write_output(frame, target)
    assert caught.value.field == "sink.path"
    assert list((secret / "staged").iterdir()) == [], "nothing is written outside the root"
    os.unlink(target.location)
    assert write_output(frame, target) == 3 and (Path(target.location) / "part.000000.parquet").is_file()


@pytest.mark.parametrize(("fmt", "partition_on", "backend"), [
    ("parquet", [], "pandas"), ("parquet", ["a"], "pandas"), ("csv", [], "pandas"),
    # dask-cudf's plain parquet writer writes by path whatever the file system (the H200, 2026-12-02): its
    # sinks get tasks of their own (SinkWriter._pinned_parquet_writes); "pandas-pinned" runs those on pandas.
    ("parquet", [], "pandas-pinned"), pytest.param("parquet", [], "cudf", marks=pytest.mark.gpu),
    pytest.param("parquet", ["a"], "cudf", marks=pytest.mark.gpu), pytest.param("csv", [], "cudf", marks=pytest.mark.gpu),
])
def test_a_dask_worker_does_not_write_through_a_staging_directory_swapped_for_a_link(
    tmp_path: Path, fmt: str, partition_on: list[str], backend: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 16 item 2's last gap: the Dask engine's workers wrote into staging by path (the commit refused the link, after);
    dask-cudf's CSV and partitioned parquet writers go through the same file system, its plain parquet sinks through
    tasks that open each file below the root."""
    import dask
    import dask.dataframe as dd

    if backend == "pandas-pinned":
        monkeypatch.setattr(SinkWriter, "_cudf_writes_by_path", lambda self, frame: True)
        backend = "pandas"
    root, secret = _source_and_secret(tmp_path)
    sink = SinkSpec(path=str(root / "out"), format=fmt, partition_on=partition_on)
    writer = SinkWriter(sink, "job1", allowed_roots=[str(root)])
    frame = dd.from_pandas(pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}), npartitions=2).to_backend(backend)
    graph = writer.write_graph(frame)  # staged: the workers will write below the staging directory
    (secret / "staged").mkdir()
    if writer.staging.exists():  # made when the graph was built (parquet)
        writer.staging.rmdir()
    os.symlink(secret / "staged", writer.staging)  # swapped in before they write
    with dask.config.set(scheduler="sync"), pytest.raises(PathNotAllowed, match="link"):
        dask.compute(graph)
    assert list((secret / "staged").rglob("*")) == [], "nothing is written outside the root"
    os.unlink(writer.staging)
    with dask.config.set(scheduler="sync"):
        dask.compute(writer.write_graph(frame))
    assert writer.commit().total_rows == 3


def test_pinned_parquet_writes_keep_the_sinks_codec_and_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-partition parquet tasks (dask-cudf's plain parquet sinks under data roots) write what the sink asks for."""
    import dask
    import dask.dataframe as dd
    import pyarrow.parquet as pq

    monkeypatch.setattr(SinkWriter, "_cudf_writes_by_path", lambda self, frame: True)
    root, _ = _source_and_secret(tmp_path)
    sink = SinkSpec(path=str(root / "out"), compression="zstd", row_group_size=2)
    writer = SinkWriter(sink, "job1", allowed_roots=[str(root)])
    frame = dd.from_pandas(pd.DataFrame({"a": range(10), "b": list("abcdefghij")}), npartitions=2)
    with dask.config.set(scheduler="sync"):
        dask.compute(writer.write_graph(frame))
    manifest = writer.commit()
    assert manifest.total_rows == 10 and [f.path for f in manifest.files] == ["part.000000.parquet", "part.000001.parquet"]
    metadata = pq.ParquetFile(root / "out" / "part.000000.parquet").metadata
    assert metadata.num_row_groups == 3 and metadata.row_group(0).column(0).compression == "ZSTD"
    assert pd.read_parquet(root / "out").sort_values("a")["b"].tolist() == list("abcdefghij")


@pytest.mark.parametrize("planted", ["hard link", "fifo"])
def test_a_part_file_planted_in_staging_is_not_written_through(tmp_path: Path, planted: str) -> None:
    """A hard link to a file outside the root, or a FIFO, planted where a worker will write a part file: the write is
    refused (a hard link was followed: O_TRUNC emptied the file it shares), the outside file is intact, nothing hangs."""
    from spillway.jobs.safe_open import open_for_writing

    root, secret = _source_and_secret(tmp_path)
    staging = root / "out" / ".staging"
    staging.mkdir(parents=True)
    outside = secret / "src" / "in.parquet"
    before = outside.read_bytes()
    if planted == "hard link":
        os.link(outside, staging / "part.000000.parquet")
    else:
        os.mkfifo(staging / "part.000000.parquet")
    with pytest.raises(PathNotAllowed, match="not a file of its own|FIFO"):
        open_for_writing(str(staging / "part.000000.parquet"), str(root))
    assert outside.read_bytes() == before
    with open_for_writing(str(staging / "part.000001.parquet"), str(root)) as handle:  # a file of its own is written
        handle.write(b"rows")
    assert (staging / "part.000001.parquet").read_bytes() == b"rows"
