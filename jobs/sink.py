"""Writing results: parquet or CSV part files, ``_manifest.json`` and ``_SUCCESS``, one atomic commit per job.

On local disk the job writes into a hidden staging directory beside the sink
(``.spillway-tmp-<job>-<name>``); the commit is one rename (a new sink), an atomic
swap of the two directories (``overwrite``) or moving the new files in and then
replacing ``_manifest.json`` (``append``). Object stores have no rename: the workers
write part files named after the job straight under the sink prefix, and writing
``_manifest.json`` is the commit. Commits to one sink hold its lock, so concurrent
appends and overwrites apply one after another and none loses another's files.
docs/sinks.md says what a reader sees at each step. A failed or cancelled job
leaves nothing that a manifest lists.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from stat import S_ISLNK
from typing import Any

import dask
import dask.dataframe as dd
import fsspec
import pandas as pd
import polars as pl
from dask.delayed import Delayed
from fsspec import AbstractFileSystem

from spillway.jobs.commit import (
    OLD_PREFIX,
    SinkSchemaMismatch,
    check_column_names,
    check_mode,
    local_state,
    remote_state,
    move_file_at,
    open_subdirectory,
    replace_file_at,
    swap_directories,
    write_markers_at,
)
from spillway.jobs.errors import SinkExists, SpecError, SpillwayError
from spillway.jobs.manifest import column_difference, describe_files, frame_columns
from spillway.jobs.polars_io import OutputTarget, check_csv_writable, checked_folder_name, escaped_in_partition
from spillway.jobs.safe_open import open_directory, open_for_writing, staging_url
from spillway.jobs.sandbox import PathNotAllowed, check_sink_parent, checked_so_far, local_root_of
from spillway.jobs.spec import SinkSpec
from spillway.jobs.status import ColumnSchema, ResultFile, ResultManifest
from spillway.jobs import storage
from spillway.jobs.storage import MANIFEST_NAME, SUCCESS_MARKER, commit_lock, filesystem, is_url, load_manifest, storage_options

__all__ = ["MANIFEST_NAME", "SUCCESS_MARKER", "TMP_PREFIX", "SinkSchemaMismatch", "SinkWriter", "ensure_sink_free", "read_manifest"]

log = logging.getLogger(__name__)

TMP_PREFIX = ".spillway-tmp-"
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def ensure_sink_free(sink: SinkSpec, *, field: str = "sink.path", columns: Iterable[str] | None = None) -> None:
    """Refuse, at submit, a sink that the job's ``mode`` cannot write.

    ``error`` needs a sink without data (an empty directory is fine). ``overwrite`` and
    ``append`` take a sink without data or one Spillway wrote (it has ``_manifest.json``);
    ``append`` also needs the same format and ``partition_on``, and, given the job's
    output ``columns``, the same column names.

    Raises
    ------
    SinkExists
        If the sink holds data the mode may not replace or extend.
    SinkSchemaMismatch
        If an append does not match the existing data; ``field`` is ``sink.format``,
        ``sink.partition_on`` or ``sink.mode`` (for columns).
    """
    fs, root = filesystem(sink.path, field=field)
    try:
        state = remote_state(fs, root, sink.path) if is_url(sink.path) else local_state(fs, root, sink.path)
    except SpillwayError:
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, no permission, no credentials: each store has its own error types
        raise SpecError(f"cannot inspect the sink '{sink.path}': {exc}", field=field) from exc
    check_mode(sink, state, field=field)
    if columns is not None and sink.mode == "append" and state.manifest is not None:
        check_column_names(sink, state.manifest, list(columns))


class SinkWriter:
    """Writes one job's output for its sink and commits it.

    Parameters
    ----------
    sink
        Where and how to write.
    job_id
        Names the staging directory and, wherever the sink may already hold files,
        the part files (``part.<job>.<n>.parquet``), so they never collide with others.
    allowed_roots
        The data roots: a local sink whose parent resolves outside them when the job stages
        or commits (a link swapped in after submit) is refused as ``path_not_allowed``, and
        nothing is committed. None: no check.
    """

    def __init__(self, sink: SinkSpec, job_id: str, *, allowed_roots: list[str] | None = None) -> None:
        if not _JOB_ID.match(job_id):
            raise ValueError(f"job id {job_id!r} is not usable in file names")
        self.sink = sink
        self.job_id = job_id
        self.allowed_roots = allowed_roots
        self.remote = is_url(sink.path)
        #: The sink as a directory path or a URL without a trailing slash.
        self.location = sink.path.rstrip("/") if self.remote else str(Path(os.path.expanduser(sink.path)).absolute())
        # Local sinks only: the directory, and a sibling to stage in (so the commit is a rename within one filesystem).
        self.final = Path(self.location)
        self.staging = self.final.parent / f"{TMP_PREFIX}{job_id}-{self.final.name}"
        self._planned_columns: list[ColumnSchema] = []

    @property
    def _stem(self) -> str:
        # A first write on local disk is renamed into place whole, so plain names cannot
        # collide; zero-padded, so name order is partition order (a sorted job reads back sorted).
        if not self.remote and self.sink.mode == "error":
            return "part.{:06d}"
        return f"part.{self.job_id}.{{:06d}}"

    def prepare(self, columns: list[str]) -> str:
        """Clear what an earlier attempt left, check an append's columns, and return where to write.

        The target is the staging directory (local) or the sink prefix (object store).
        """
        self.abort()
        if self.sink.mode == "append":  # fail before any work when the names already cannot match
            previous = load_manifest(*filesystem(self.location))
            if previous is not None:
                check_column_names(self.sink, previous, columns)
        if not self.remote:
            self._check_parent()
            self.staging.parent.mkdir(parents=True, exist_ok=True)
        return self.location if self.remote else str(self.staging)

    def polars_target(self, columns: list[ColumnSchema]) -> OutputTarget:
        """Where a Polars job writes its part files; ``columns`` describe them for the manifest.

        With data roots, a local staging directory is given resolved, with its root: the worker
        writes below the root without following links, so a link swapped in for the staging
        directory (or a folder in it) is refused instead of written through.
        """
        location = self.prepare([c.name for c in columns])
        self._planned_columns = columns
        location, root = self._staging_in_root(location)
        return OutputTarget(
            location=location, stem=self._stem, sink=self.sink, storage=storage.current() if is_url(location) else None,
            checked=checked_so_far(), root=root,
        )

    def _staging_in_root(self, location: str) -> tuple[str, str | None]:
        """With data roots, the local staging directory resolved and the root it lies in; else ``location`` and None."""
        if self.remote or self.allowed_roots is None:
            return location, None
        location = os.path.join(os.path.realpath(self.final.parent), self.staging.name)
        root = local_root_of(location, self.allowed_roots)
        if root is None:  # _check_parent has just passed: a swap since then
            raise PathNotAllowed(f"the sink '{self.location}' now lies outside the allowed roots", field="sink.path")
        return location, root

    def _cudf_writes_by_path(self, frame: dd.DataFrame) -> bool:
        """Whether dask-cudf would write this sink by path whatever file system it is given.

        On the H200 (bench/results/gpu_tests_2026-12-02g.log) its CSV writer and its ``partition_on``
        parquet writer opened the files through :class:`jobs.safe_open.StagingFileSystem`. Its plain
        parquet writer wrote through a link swapped in for the staging directory: with data roots,
        :meth:`_pinned_parquet_writes` writes those sinks instead.
        """
        on_gpu = type(frame._meta).__module__.split(".")[0] == "cudf"
        return on_gpu and self.sink.format == "parquet" and not self.sink.partition_on

    def _pinned_parquet_writes(self, frame: dd.DataFrame, location: str, root: str) -> Delayed:
        """One task per partition that opens its part file below ``root`` without following a link
        (:func:`jobs.safe_open.open_for_writing`) and has the frame's own writer write that open file."""
        options = {"compression": self.sink.codec, **_row_group_option(frame, self.sink.row_group_size)}
        name = self._stem + ".parquet"
        writes = [
            dask.delayed(write_parquet_part, pure=False)(part, os.path.join(location, name.format(index)), root, options)
            for index, part in enumerate(frame.to_delayed())  # optimised (fused), as dask's to_csv does; planning records the stages
        ]
        collected = dask.delayed(writes)
        return _CollectedWrites(collected.key, collected.dask)

    def write_graph(self, frame: dd.DataFrame) -> Any:
        """The lazy write of ``frame``: into the staging directory, or under the sink prefix of an object store.

        With data roots, pandas workers write the staging directory's files without following a
        link (:class:`jobs.safe_open.StagingFileSystem`), as a Polars worker writes them.
        """
        target = self.prepare([str(c) for c in frame.columns])
        self._planned_columns = frame_columns(frame._meta)
        options = storage_options(self.location) or None
        location, root = self._staging_in_root(target)
        if root is not None and self._cudf_writes_by_path(frame):
            return self._pinned_parquet_writes(frame, location, root)
        if root is not None:
            target, options = staging_url(location), {"root": root}
        # str.format methods as name functions: workers need no Spillway code.
        if self.sink.format == "csv" and isinstance(frame._meta, pd.DataFrame):  # pandas: Polars' writer, as the Polars engine's
            extension = ".csv.gz" if self.sink.codec == "gzip" else ".csv"
            parts = [dask.delayed(write_csv_part, pure=False)(part, f"{target}/{self._stem.format(index)}{extension}", options, self.sink.codec == "gzip")
                     for index, part in enumerate(frame.to_delayed())]
            collected = dask.delayed(parts)
            return _CollectedWrites(collected.key, collected.dask)
        if self.sink.format == "csv":  # cuDF's own writer
            extension = ".csv.gz" if self.sink.codec == "gzip" else ".csv"
            writes = bools_as_text(frame).to_csv(
                f"{target}/{self._stem.replace('{:06d}', '*')}{extension}",
                name_function="{:06d}".format,
                index=False,
                compression=self.sink.codec,
                storage_options=options,
                compute=False,
            )
            collected = dask.delayed(writes)
            return _CollectedWrites(collected.key, collected.dask)
        keys = list(self.sink.partition_on)
        if keys:  # dask names the folders from the values as they are: escaped first, as the Polars engine names them
            frame = frame.map_partitions(escaped_partition_keys, keys, meta=escaped_partition_keys(frame._meta, keys))
        return frame.to_parquet(
            target,
            compute=False,
            write_index=False,
            write_metadata_file=False,
            partition_on=[escaped_in_partition(key) for key in keys] or None,
            compression=self.sink.codec,
            name_function=(self._stem + ".parquet").format,
            storage_options=options,
            **_row_group_option(frame, self.sink.row_group_size),
        )

    def commit(self) -> ResultManifest:
        """Describe the new files, check the mode still holds, and commit (under the sink's lock).

        Raises
        ------
        SinkExists
            If data the mode may not touch appeared at the sink while the job ran.
        SinkSchemaMismatch
            If an append no longer matches the data committed meanwhile.
        PathNotAllowed
            If the sink's parent (or the sink) now resolves outside the data roots.
        In each case, and on any I/O error, this job's uncommitted files are removed.
        """
        try:
            if not self.remote:
                self._check_parent()
            with commit_lock(self.location):
                return self._commit_remote() if self.remote else self._commit_local()
        except (SinkExists, PathNotAllowed, OSError):
            self.abort()
            raise

    def recover(self) -> ResultManifest | None:
        """After a crash: this job's commit if it landed (its manifest), else None; nothing uncommitted is left.

        A service killed after the commit and before recording it leaves a sink whose manifest
        names this job (and lists the files it wrote, each with the job id): the commit landed,
        also one that wrote no file (an empty partitioned output).
        A local overwrite caught between its two renames (where renameat2 is missing) is rolled
        back first, so the sink keeps its previous version. Then, either way, :meth:`abort`.
        """
        if not self.remote:
            self._settle_swap()
        fs, root = filesystem(self.location)
        manifest = load_manifest(fs, root)
        self.abort()
        if manifest is None:
            return None
        if manifest.job_id is None:  # written before manifests named their job
            return manifest if any(f.job_id == self.job_id for f in manifest.files) else None
        if manifest.job_id == self.job_id:
            return manifest
        # A later job's commit (an append after this one's) that still lists this job's files: this commit landed, and
        # its result is its own files only, so that deleting this job's output is refused as superseded, not done.
        own = [f for f in manifest.files if f.job_id == self.job_id]
        if not own:
            return None
        return manifest.model_copy(update={"files": own, "total_rows": sum(f.rows for f in own),
                                           "total_bytes": sum(f.size_bytes for f in own), "job_id": self.job_id})

    def _settle_swap(self) -> None:
        # swap_directories without renameat2 renames the sink aside, then the staging directory in.
        old = self.final.parent / f"{OLD_PREFIX}{self.staging.name}"
        if not old.is_dir():
            return
        if self.final.exists():  # both renames done: the aside copy is the replaced output
            shutil.rmtree(old, ignore_errors=True)
        else:  # stopped between them: put the previous version back
            os.rename(old, self.final)

    def abort(self) -> None:
        """Remove what this job wrote and no manifest lists: its staging directory and stray part files.

        Best effort and never raising: it runs while another failure is being handled.
        """
        if not self.remote:
            shutil.rmtree(self.staging, ignore_errors=True)
            if self.sink.mode != "append" or not self.final.is_dir():
                return  # only a local append moves files into the sink before its commit point
        try:
            fs, root = filesystem(self.location)
            manifest = load_manifest(fs, root)
            listed = {f.path for f in manifest.files} if manifest else set()
            stray = [path for relative, (path, _) in self._own_files(fs, root).items() if relative not in listed]
            if stray:
                fs.rm(stray)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("could not remove uncommitted files of job %s at %s: %s", self.job_id, self.location, exc)

    def _own_files(self, fs: AbstractFileSystem, root: str) -> dict[str, tuple[str, int]]:
        """Path relative to ``root`` → (full path, bytes) of this job's part files under ``root``, in name order."""
        prefix = f"part.{self.job_id}."
        try:
            found = fs.find(root, detail=True)
        except FileNotFoundError:
            return {}
        return {
            path[len(root) + 1 :]: (path, info["size"])
            for path, info in sorted(found.items())
            if path.rsplit("/", 1)[-1].startswith(prefix) and not _hidden(path[len(root) + 1 :])
        }

    def _check_parent(self) -> None:
        if self.allowed_roots is not None:
            check_sink_parent(str(self.final), self.allowed_roots)

    def _commit_local(self) -> ResultManifest:
        # Again under the lock, just before the renames; then every step is relative to the parent's
        # fd, opened from the root without following links, so a link swapped in since is refused.
        self._check_parent()
        parent = self._open_parent()
        try:
            try:
                staging_fd = self._open_below(parent, self.staging.name)
            except FileNotFoundError:
                if not self.sink.partition_on:
                    raise
                # A partitioned output of no rows is no folder at all on the Polars engine: nothing to commit but the manifest.
                os.mkdir(self.staging.name, 0o755, dir_fd=parent)
                staging_fd = self._open_below(parent, self.staging.name)
            try:
                return self._commit_local_at(parent, staging_fd)
            finally:
                os.close(staging_fd)
        finally:
            os.close(parent)

    def _commit_local_at(self, parent: int, staging_fd: int) -> ResultManifest:
        # The state, the files and their footers are read through the opened directories, not their paths.
        fs, staging = filesystem(_through_fd(staging_fd, str(self.staging)))
        state = local_state(fs, os.path.join(_through_fd(parent, str(self.final.parent)), self.final.name), self.sink.path)
        check_mode(self.sink, state, field="sink.path")
        sizes = self._staged_files(staging_fd)
        manifest = self._manifest(fs, staging, sizes, state.manifest)
        staged = os.fstat(staging_fd)
        if state.manifest is None or self.sink.mode == "overwrite":
            write_markers_at(staging_fd, manifest)
            self._same_directory(parent, self.staging.name, staged)
            if state.manifest is None:  # a free sink (check_mode refused any other without a manifest)
                if self._exists_below(parent, self.final.name):
                    os.rmdir(self.final.name, dir_fd=parent)  # empty, or check_mode would have refused it
                os.rename(self.staging.name, self.final.name, src_dir_fd=parent, dst_dir_fd=parent)
            else:
                old = swap_directories(parent, self.staging.name, self.final.name)
                shutil.rmtree(old, dir_fd=parent, ignore_errors=True)  # after the new output is in place
            self._same_directory(parent, self.final.name, staged)
        else:
            final_fd = self._open_below(parent, self.final.name)
            try:
                for relative in sizes:
                    try:
                        move_file_at(staging_fd, final_fd, relative)
                    except FileExistsError:  # cannot happen: the name carries this job's id
                        raise SinkExists(f"'{self.final / relative}' already exists; nothing was appended", field="sink.path") from None
                replace_file_at(final_fd, MANIFEST_NAME, manifest.model_dump_json(indent=2), temp_name=f"{TMP_PREFIX}{self.job_id}-{MANIFEST_NAME}")
                os.close(os.open(SUCCESS_MARKER, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=final_fd))
            finally:
                os.close(final_fd)
            shutil.rmtree(self.staging.name, dir_fd=parent, ignore_errors=True)
        return manifest

    def _staged_files(self, staging_fd: int) -> dict[str, int]:
        """Path relative to the staging directory → bytes, in name order; a link in it (swapped in) is refused."""
        sizes: dict[str, int] = {}
        for folder, dirs, names, folder_fd in os.fwalk(dir_fd=staging_fd):  # fwalk follows no link
            for name in dirs + names:
                relative = os.path.normpath(os.path.join(folder, name))
                stat = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
                if S_ISLNK(stat.st_mode):
                    raise PathNotAllowed(f"the sink '{self.location}': '{relative}' in the staging directory is a link; nothing was committed", field="sink.path")
                if name in names and not _hidden(relative):
                    sizes[relative] = stat.st_size
        return dict(sorted(sizes.items()))

    def _open_parent(self) -> int:
        """The sink's parent directory, opened from its root without following links (when roots are enforced)."""
        if self.allowed_roots is None:
            return os.open(self.final.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        real = os.path.realpath(self.final.parent)
        root = local_root_of(real, self.allowed_roots)
        if root is None:  # check_sink_parent has just refused this; a swap since then
            raise PathNotAllowed(f"the sink '{self.location}' now lies outside the allowed roots", field="sink.path")
        return open_directory(real, root, field="sink.path")

    def _open_below(self, parent: int, name: str) -> int:
        try:
            return open_subdirectory(parent, name)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise PathNotAllowed(f"the sink '{self.location}': '{name}' is now a link or not a directory; links are not followed", field="sink.path") from None
            raise

    @staticmethod
    def _exists_below(parent: int, name: str) -> bool:
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _same_directory(self, parent: int, name: str, staged: os.stat_result) -> None:
        # The renames go by name: ``name`` must still be the staging directory written and opened, not a link swapped in.
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (staged.st_dev, staged.st_ino):
            raise PathNotAllowed(f"the sink '{self.location}': '{name}' is no longer the job's staging directory; nothing was committed", field="sink.path")

    def _commit_remote(self) -> ResultManifest:
        fs, root = filesystem(self.location)
        state = remote_state(fs, root, self.sink.path)
        check_mode(self.sink, state, field="sink.path")
        sizes = {relative: size for relative, (_, size) in self._own_files(fs, root).items()}
        manifest = self._manifest(fs, root, sizes, state.manifest)
        # One PUT replaces the whole object: readers get the old manifest or the new one. The commit point.
        fs.pipe_file(f"{root}/{MANIFEST_NAME}", manifest.model_dump_json(indent=2).encode())
        if not fs.exists(f"{root}/{SUCCESS_MARKER}"):
            fs.pipe_file(f"{root}/{SUCCESS_MARKER}", b"")
        if self.sink.mode == "overwrite" and state.manifest is not None:
            try:  # committed already: a failure here leaves unlisted files, not a failed job
                fs.rm([f"{root}/{f.path}" for f in state.manifest.files])
            except Exception as exc:  # noqa: BLE001
                log.warning("job %s committed %s but could not remove the replaced files: %s", self.job_id, self.location, exc)
        return manifest

    def _manifest(self, fs: AbstractFileSystem, root: str, sizes: dict[str, int], previous: ResultManifest | None) -> ResultManifest:
        files, columns = describe_files(
            fs, root, sizes, format=self.sink.format, job_id=self.job_id, partition_on=list(self.sink.partition_on),
            planned={c.name: c.type for c in self._planned_columns},
        )
        if not columns and self._planned_columns:  # CSV, or no file written
            columns = _with_partitions_last(self._planned_columns, self.sink.partition_on)
        kept: list[ResultFile] = []
        if self.sink.mode == "append" and previous is not None:
            # No new file (an empty partitioned output) changes nothing, whatever its planned types.
            difference = files and column_difference(previous.columns, columns, format=self.sink.format)
            if difference:
                raise SinkSchemaMismatch(f"append to '{self.sink.path}': the job's columns differ from the sink's ({difference})", field="sink.mode")
            kept, columns = previous.files, previous.columns
        every = [*kept, *files]
        return ResultManifest(
            location=self.location,
            format=self.sink.format,
            files=every,
            total_rows=sum(f.rows for f in every),
            total_bytes=sum(f.size_bytes for f in every),
            columns=columns,
            partition_on=list(self.sink.partition_on),
            mode=self.sink.mode,
            version=previous.version + 1 if previous is not None else 1,
            job_id=self.job_id,
        )


class _CollectedWrites(Delayed):
    """The CSV part writes as one collection, with the ``optimize()`` that dataframe collections have."""

    def optimize(self) -> Delayed:
        return dask.optimize(self)[0]


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest a committed sink carries, local or on an object store."""
    fs, root = filesystem(str(path))
    manifest = load_manifest(fs, root)
    if manifest is None:
        raise FileNotFoundError(f"{path} has no {MANIFEST_NAME}")
    return manifest.model_dump()


def write_parquet_part(part: Any, path: str, root: str, options: dict[str, Any]) -> None:
    """``part`` (a pandas or cuDF frame) as the parquet file ``path`` below ``root``, opened without following a link.

    The writer gets the open file's /proc path, so it writes the file that was opened however the
    folders above it are renamed or swapped meanwhile (cuDF writes that path itself, from the device);
    without /proc, the open file object.
    """
    with open_for_writing(path, root) as handle:
        part.to_parquet(_through_fd(handle.fileno(), handle, directory=False), index=False, **options)


def escaped_partition_keys(part: Any, keys: list[str]) -> Any:
    """A partition (pandas or cuDF) whose ``keys`` columns hold each value's text as its hive folder names it
    (:func:`jobs.polars_io.partition_directory`: %-escaped, so ``../x`` or ``a/b`` never forms a path), renamed to their
    escaped names. The text is the Python value's, as Polars' ``partition_by`` gives it; a null stays null (Hive's null
    folder). Each distinct value is escaped once."""
    escaped = {}
    for key in keys:
        column = part[key]
        values = column if isinstance(column, pd.Series) else column.to_pandas()
        codes, uniques = pd.factorize(values.astype(object), use_na_sentinel=True)
        name = escaped_in_partition(key)
        texts = pd.array([checked_folder_name(key, f"{name}={escaped_in_partition(str(value))}").split("=", 1)[1] for value in uniques] + [None],
                         dtype="string")
        text = pd.Series(texts.take(codes), index=values.index)  # the sentinel -1 takes the last entry: None
        escaped[name] = text if isinstance(column, pd.Series) else _cudf().from_pandas(text)
    return part.drop(columns=keys).assign(**escaped)


def write_csv_part(part: pd.DataFrame, url: str, options: dict[str, Any] | None, gzip: bool) -> None:
    """``part`` as the CSV file ``url`` (the staging file system's, or an object store's), written by Polars' CSV
    writer as the Polars engine writes its CSV sinks: the same text for every value on both engines (pandas' wrote an
    empty string as a null, a column of midnights as dates, its own datetime and float text)."""
    table = pl.from_pandas(part)
    check_csv_writable(table)
    with fsspec.open(url, "wb", compression="gzip" if gzip else None, **(options or {})) as handle:
        table.write_csv(handle)


def _cudf() -> Any:
    import cudf  # only where a partition is cuDF's: the GPU extra is installed

    return cudf


def bools_as_text(frame: dd.DataFrame) -> dd.DataFrame:
    """``frame`` with its bool columns as the text ``true`` and ``false`` (a null stays empty), for a CSV sink.

    pandas writes ``True`` and ``False``, Polars ``true`` and ``false`` (docs/spec.md, "Sinks"); both read either back
    as bools. Dask methods only (``astype``, ``str.lower``), so the workers need no Spillway code for it.
    """
    bools = [column for column, dtype in frame.dtypes.items() if pd.api.types.is_bool_dtype(dtype)]
    if not bools:
        return frame
    return frame.assign(**{str(column): frame[column].astype("string").str.lower() for column in bools})


def _through_fd(fd: int, path: Any, *, directory: bool = True) -> Any:
    """A path to the directory (or file) open as ``fd`` that no rename or link swapped in can redirect (Linux's /proc); else ``path``."""
    pinned = f"/proc/self/fd/{fd}"
    return pinned if (os.path.isdir(pinned) if directory else os.path.exists(pinned)) else path


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def _with_partitions_last(columns: list[ColumnSchema], partition_on: list[str]) -> list[ColumnSchema]:
    # As a hive dataset lists them: data columns, then the partition keys.
    return [c for c in columns if c.name not in partition_on] + [c for c in columns if c.name in partition_on]


def _row_group_option(frame: dd.DataFrame, rows: int | None) -> dict[str, int]:
    if rows is None:
        return {}
    # cuDF's writer names it row_group_size_rows; pyarrow's write_table, row_group_size.
    return {"row_group_size_rows" if type(frame._meta).__module__.startswith("cudf") else "row_group_size": rows}


