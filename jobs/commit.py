"""Commit primitives: what a sink holds now, whether a write mode may write it, and the
atomic operations on local disk. :mod:`jobs.sink` puts them together per mode.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from pathlib import Path
from typing import NamedTuple

from fsspec import AbstractFileSystem

from spillway.jobs.errors import SinkExists
from spillway.jobs.spec import SinkSpec
from spillway.jobs.status import ResultManifest
from spillway.jobs.storage import MANIFEST_NAME, SUCCESS_MARKER, load_manifest

OLD_PREFIX = ".spillway-old-"
# Part files named after a job (part.<job>.<n>.<ext>): committed, in flight, or left by a failed job.
JOB_PART = re.compile(r"^part\.[A-Za-z0-9_-]+\.\d{6}\.(parquet|csv|csv\.gz)$")


class SinkSchemaMismatch(SinkExists):
    """An append whose format, partitioning or columns differ from the data already in the sink."""

    code = "sink_schema_mismatch"


class SinkState(NamedTuple):
    """What a sink holds before a commit."""

    manifest: ResultManifest | None  # the committed version, if Spillway wrote the sink
    holds_data: bool  # anything but other jobs' uncommitted part files


def local_state(fs: AbstractFileSystem, root: str, path: str) -> SinkState:
    """The state of a local sink directory ``root`` (``path`` as the spec gives it, for messages)."""
    directory = Path(root)
    if directory.is_file():
        return SinkState(None, True)
    if not directory.is_dir() or not any(directory.iterdir()):
        return SinkState(None, False)
    return SinkState(_committed(fs, root, path), True)


def remote_state(fs: AbstractFileSystem, root: str, path: str) -> SinkState:
    """The state of an object-store sink prefix ``root``; lists it only when no manifest is there."""
    manifest = _committed(fs, root, path)
    if manifest is not None:
        return SinkState(manifest, True)
    try:
        found = fs.find(root)
    except FileNotFoundError:  # no such bucket yet
        return SinkState(None, False)
    # Other jobs' part files in flight do not count: each job commits only its own.
    foreign = [key for key in found if not JOB_PART.match(key.rsplit("/", 1)[-1])]
    return SinkState(None, bool(foreign) or fs.isfile(root))


def _committed(fs: AbstractFileSystem, root: str, path: str) -> ResultManifest | None:
    try:
        return load_manifest(fs, root)
    except ValueError as exc:
        raise SinkExists(f"'{path}' has an unreadable {MANIFEST_NAME} ({exc}); fix or remove it", field="sink.path") from exc


def check_mode(sink: SinkSpec, state: SinkState, *, field: str) -> None:
    """Refuse a sink whose state ``sink.mode`` may not write (see :func:`jobs.sink.ensure_sink_free`)."""
    if not state.holds_data:
        return
    if sink.mode == "error":
        raise SinkExists(
            f"'{sink.path}' already holds data; mode 'error' (the default) never replaces output: set sink.mode to overwrite or append",
            field=field,
        )
    if state.manifest is None:
        raise SinkExists(
            f"'{sink.path}' holds data that Spillway did not write (no {MANIFEST_NAME}); mode '{sink.mode}' only replaces or extends a Spillway output",
            field=field,
        )
    if sink.mode == "append":
        if state.manifest.format != sink.format:
            raise SinkSchemaMismatch(f"append to '{sink.path}': the sink holds {state.manifest.format}, not {sink.format}", field="sink.format")
        if state.manifest.partition_on != list(sink.partition_on):
            raise SinkSchemaMismatch(
                f"append to '{sink.path}': the sink is partitioned on [{', '.join(state.manifest.partition_on)}], "
                f"not [{', '.join(sink.partition_on)}]",
                field="sink.partition_on",
            )


def check_column_names(sink: SinkSpec, manifest: ResultManifest, names: list[str]) -> None:
    """Refuse an append whose output column names cannot match the sink's."""
    existing = [c.name for c in manifest.columns]
    # Parquet readers match columns by name, CSV readers by position.
    if set(names) != set(existing) or (sink.format == "csv" and names != existing):
        raise SinkSchemaMismatch(
            f"append to '{sink.path}': the job writes columns {', '.join(names)} but the sink holds {', '.join(existing)}",
            field="sink.mode",
        )


def write_markers(directory: Path, manifest: ResultManifest) -> None:
    """Write ``_manifest.json`` and ``_SUCCESS`` into a staging directory before it is renamed into place."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_markers_at(fd, manifest)
    finally:
        os.close(fd)


def write_markers_at(directory_fd: int, manifest: ResultManifest) -> None:
    """:func:`write_markers` into the directory open as ``directory_fd`` (no link is followed)."""
    _write_at(directory_fd, MANIFEST_NAME, manifest.model_dump_json(indent=2))
    _write_at(directory_fd, SUCCESS_MARKER, "")


def _write_at(directory_fd: int, name: str, text: str, *, sync: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(os.open(name, flags, 0o644, dir_fd=directory_fd), "w") as handle:
        handle.write(text)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())


def replace_file_at(directory_fd: int, name: str, text: str, *, temp_name: str) -> None:
    """Write ``name`` in the directory ``directory_fd`` so that readers see the old content or the new, never a part
    (temp file, fsync, rename within the directory)."""
    _write_at(directory_fd, temp_name, text, sync=True)
    os.replace(temp_name, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)


def open_subdirectory(directory_fd: int, relative: str, *, create: bool = False) -> int:
    """An fd of ``relative`` below ``directory_fd``, walked without following links (created where missing if ``create``).

    Raises
    ------
    OSError
        ELOOP or ENOTDIR where a component is a link or not a directory.
    """
    fd = os.dup(directory_fd)
    try:
        for part in (p for p in relative.split("/") if p):
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def move_file_at(source_fd: int, target_fd: int, relative: str) -> None:
    """Rename ``relative`` below ``source_fd`` to the same place below ``target_fd``, creating its folders; links are not followed.

    Raises
    ------
    FileExistsError
        Something is at the target already.
    """
    folder, _, name = relative.rpartition("/")
    source = open_subdirectory(source_fd, folder)
    try:
        target = open_subdirectory(target_fd, folder, create=True)
        try:
            try:
                os.stat(name, dir_fd=target, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
            else:
                raise FileExistsError(errno.EEXIST, "already exists", relative)
        finally:
            os.close(target)
    finally:
        os.close(source)


def swap_directories(parent_fd: int, new: str, final: str) -> str:
    """Put directory ``new`` at ``final`` (both names in the directory ``parent_fd``) and return the name the old one now has.

    Linux's renameat2(RENAME_EXCHANGE) swaps the two in one step, so ``final`` always
    names a complete output. Elsewhere two renames leave a moment with no ``final``.
    """
    exchange = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if exchange is not None:
        rename_exchange = 2
        if exchange(parent_fd, os.fsencode(new), parent_fd, os.fsencode(final), rename_exchange) == 0:
            return new
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), final)
    old = f"{OLD_PREFIX}{new}"
    os.rename(final, old, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    os.rename(new, final, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    return old
