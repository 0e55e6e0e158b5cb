"""Deleting a job's committed output: exactly the files its manifest lists, then the markers.

Only a sink whose current ``_manifest.json`` is the job's own commit is touched: once a later
job appended to the sink or overwrote it, the files belong to that job's result too, and the
deletion is refused (:class:`OutputSuperseded`). The check and the deletion hold the sink's
commit lock, so no commit lands between them.

On local disk every path is opened relative to the sink directory, one component at a time,
with ``O_NOFOLLOW``: a link swapped in for a partition folder cannot lead the deletion outside
the sink, and the sink directory itself is checked against the data roots after it is opened.
Only regular files are unlinked; emptied partition folders and the sink directory are removed
with ``rmdir``, which leaves anything else in place. On an object store the listed keys under
the sink prefix are removed.

The order makes a retry safe after a crash: ``_SUCCESS`` first (readers that wait for it stop
trusting the sink), the data files next, ``_manifest.json`` last, so a second attempt still
finds the manifest and removes what is left.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from fsspec import AbstractFileSystem

from spillway.jobs.errors import InvalidTransition
from spillway.jobs.sandbox import PathNotAllowed, check_sink_parent, check_sink_url
from spillway.jobs.status import ResultManifest
from spillway.jobs.storage import MANIFEST_NAME, SUCCESS_MARKER, commit_lock, filesystem, is_url, load_manifest

FIELD = "output"


class OutputSuperseded(InvalidTransition):
    """The sink no longer holds the job's commit as it made it: a later job appended or overwrote."""

    code = "output_superseded"


@dataclass(frozen=True)
class DeletedOutput:
    """What :func:`delete_output` removed: the data files (as the manifest sizes them) and why not more."""

    location: str
    files: int = 0
    bytes: int = 0
    note: str | None = None


def delete_output(manifest: ResultManifest, job_id: str, roots: Iterable[str]) -> DeletedOutput:
    """Delete the files of ``manifest`` (job ``job_id``'s result) and the sink's markers.

    Raises
    ------
    OutputSuperseded
        A later commit changed the sink (its manifest's version or files differ).
    PathNotAllowed
        The sink, or a link on its way, leads outside the data ``roots``.
    """
    roots = list(roots)
    location = manifest.location
    with commit_lock(location):
        if is_url(location):
            check_sink_url(location, roots, field=FIELD)
        else:
            check_sink_parent(location, roots, field=FIELD)
        fs, root = filesystem(location)
        current = load_manifest(fs, root)
        if current is None:
            return DeletedOutput(location, note=f"no {MANIFEST_NAME} at {location}: the output was already deleted")
        _check_same_commit(current, manifest, job_id)
        if is_url(location):
            deleted, left = _delete_remote(fs, root, manifest), []
        else:
            deleted, left = _delete_local(location, manifest, roots)
    size = {f.path: f.size_bytes for f in manifest.files}
    missing = len(manifest.files) - len(deleted) - len(left)
    notes = [f"{missing} listed file(s) were already gone"] if missing else []
    if left:
        notes.append(f"{len(left)} left where a link or a folder now stands in place of the file ({', '.join(left[:3])}"
                     f"{', …' if len(left) > 3 else ''}): not the job's to remove")
    return DeletedOutput(location, files=len(deleted), bytes=sum(size[p] for p in deleted), note="; ".join(notes) or None)


def _check_same_commit(current: ResultManifest, mine: ResultManifest, job_id: str) -> None:
    if current.version == mine.version and {f.path for f in current.files} == {f.path for f in mine.files}:
        return
    later = sorted({f.job_id for f in current.files if f.job_id and f.job_id != job_id})
    by = f" (files of job {', '.join(later)})" if later else ""
    raise OutputSuperseded(
        f"the sink {current.location} was committed again after job {job_id} (now version {current.version}, mode "
        f"{current.mode}{by}, the job's was version {mine.version}); its files are part of the later result, so they are "
        "not deleted: delete the later job's output, or delete this job without output=true",
        field=FIELD,
    )


def _delete_remote(fs: AbstractFileSystem, root: str, manifest: ResultManifest) -> list[str]:
    deleted = []
    _remove_key(fs, f"{root}/{SUCCESS_MARKER}")
    for entry in manifest.files:
        if _remove_key(fs, f"{root}/{entry.path}"):
            deleted.append(entry.path)
    _remove_key(fs, f"{root}/{MANIFEST_NAME}")
    return deleted


def _remove_key(fs: AbstractFileSystem, key: str) -> bool:
    try:
        fs.rm_file(key)
    except FileNotFoundError:
        return False
    return True


def _delete_local(location: str, manifest: ResultManifest, roots: list[str]) -> tuple[list[str], list[str]]:
    """The listed files deleted below the sink's descriptor, and those left because a link or a folder stands there."""
    sink_fd = os.open(os.path.realpath(location), os.O_RDONLY | os.O_DIRECTORY)
    try:
        # What the descriptor is, not what the path said a moment ago.
        opened = os.path.realpath(f"/proc/self/fd/{sink_fd}")
        local_roots = [os.path.realpath(os.path.expanduser(r)) for r in roots if "://" not in r]
        if not any(os.path.commonpath([opened, r]) == r and opened != r for r in local_roots):
            raise PathNotAllowed(f"the sink '{location}' opened as '{opened}', outside the allowed roots: {', '.join(roots)}", field=FIELD)
        _unlink_in(sink_fd, [SUCCESS_MARKER])
        outcomes = {entry.path: _unlink_in(sink_fd, entry.path.split("/")) for entry in manifest.files}
        for folder in sorted({tuple(f.path.split("/")[:-1]) for f in manifest.files if "/" in f.path}, key=len, reverse=True):
            _rmdir_in(sink_fd, list(folder))
        _unlink_in(sink_fd, [MANIFEST_NAME])
    finally:
        os.close(sink_fd)
    try:
        os.rmdir(os.path.realpath(location))
    except OSError as exc:  # something else is in the sink: it stays
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise
    return [p for p, done in outcomes.items() if done == "deleted"], [p for p, done in outcomes.items() if done == "left"]


def _open_folder(base_fd: int, parts: list[str]) -> int | None:
    """A descriptor of ``parts`` below ``base_fd``, never through a link; None if a part is missing or not a folder."""
    fd = os.dup(base_fd)
    for part in parts:
        try:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            raise
        os.close(fd)
        fd = child
    return fd


def _unlink_in(base_fd: int, parts: list[str]) -> Literal["deleted", "gone", "left"]:
    """Unlink the regular file ``parts`` below ``base_fd``: ``deleted``; ``gone`` where nothing is there; ``left`` where a
    link or a folder stands in its place, or on its way (not ours to remove)."""
    fd = _open_folder(base_fd, parts[:-1])
    if fd is None:
        return "left" if _stands_in_the_way(base_fd, parts[:-1]) else "gone"
    try:
        try:
            info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return "gone"
        if not stat.S_ISREG(info.st_mode):
            return "left"
        os.unlink(parts[-1], dir_fd=fd)
        return "deleted"
    finally:
        os.close(fd)


def _stands_in_the_way(base_fd: int, parts: list[str]) -> bool:
    """Whether something other than a folder (a link, a file) stands at one of the folders ``parts`` below ``base_fd``."""
    for depth in range(1, len(parts) + 1):
        fd = _open_folder(base_fd, parts[: depth - 1])
        if fd is None:
            return True
        try:
            info = os.stat(parts[depth - 1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)
        if not stat.S_ISDIR(info.st_mode):
            return True
    return False


def _rmdir_in(base_fd: int, parts: list[str]) -> None:
    for depth in range(len(parts), 0, -1):
        fd = _open_folder(base_fd, parts[: depth - 1])
        if fd is None:
            return
        try:
            os.rmdir(parts[depth - 1], dir_fd=fd)
        except OSError:  # not empty (another partition's files), or already gone
            return
        finally:
            os.close(fd)
