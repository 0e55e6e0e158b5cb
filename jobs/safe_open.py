"""Opening checked files and directories so that no link swapped in after the check can lead elsewhere.

:mod:`jobs.sandbox` resolves every path of a job and checks that it lies inside a data root;
between that check and the moment a reader opens the file, someone who may create links in a
root could swap a folder on the path, or the file, for a link that leads out. Here the path is
walked from the root's directory one component at a time with ``O_NOFOLLOW`` (``openat`` on
directory fds), so a link anywhere below the root makes the open fail instead of following it,
and the file opened must be the one checked (its device and inode, from ``os.fstat``; on a worker
of another host, whose device numbers for a shared file system are its own, the inode).

* :func:`open_checked` opens one :class:`~jobs.sandbox.CheckedFile` that way.
* :class:`RootBoundFileSystem` is an fsspec local file system whose reads go through it: the
  Dask engine reads sources with it, so every partition a worker reads is opened this way.
* :func:`open_directory` opens a directory below a root that way, for a sink's commit
  (:mod:`jobs.commit` renames relative to it); :func:`open_for_writing`, a file the Polars
  engine's worker writes into the staging directory.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from typing import Any, BinaryIO

from fsspec import register_implementation
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

from spillway.jobs.sandbox import CheckedFile, PathNotAllowed

#: A protocol of its own, so dask's text readers (which take a URL and options, not a file system) use this one.
PROTOCOL = "spillway-checked"

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in must not block the open; it has no effect on a regular file's reads.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: What opening through a link (or a file where a folder was) fails with, under O_NOFOLLOW.
LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR)


class SourceChanged(PathNotAllowed):
    """A checked source file that is no longer the file that was checked when it is opened."""

    code = "source_changed"


def _components(path: str, root: str) -> list[str]:
    relative = os.path.relpath(path, root)
    parts = [] if relative == "." else relative.split(os.sep)
    if any(part in ("", ".", "..") for part in parts):
        raise PathNotAllowed(f"'{path}' is not below the root '{root}'")
    return parts


def open_directory(path: str, root: str, *, field: str = "sink.path", opening: str | None = None, create: bool = False) -> int:
    """An fd of directory ``path``, walked from ``root`` (which may itself be a link: roots are configured) without following links.

    ``field`` and ``opening`` (the file opened through it, if any) name it in the error; with
    ``create``, folders that are missing are made.

    Raises
    ------
    PathNotAllowed
        A component below ``root`` is a link (or not a directory): a swap after the check.
    FileNotFoundError
        A component does not exist.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in _components(path, root):
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                child = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in LINK_ERRNOS:
                    raise PathNotAllowed(
                        f"'{opening or path}': the folder '{part}' on its path is now a link or not a directory; links are not followed here",
                        field=field,
                    ) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_checked(file: CheckedFile) -> int:
    """A read-only fd of ``file``: its path walked from its root without following links, and its inode the checked one.

    Raises
    ------
    PathNotAllowed
        A folder on the path, or the file, is now a link.
    SourceChanged
        The file there now is another file than the one checked.
    """
    field = file.field
    parts = _components(file.path, file.root)
    if not parts:
        raise PathNotAllowed(f"'{file.path}' is a root, not a file", field=field)
    parent = open_directory(os.path.join(file.root, *parts[:-1]), file.root, field=field, opening=file.path)
    try:
        fd = open_file_below(parent, parts[-1], shown=file.path, field=field)
    finally:
        os.close(parent)
    stat = os.fstat(fd)
    here = socket.gethostname() == file.host
    if stat.st_ino != file.inode or (here and stat.st_dev != file.device):
        os.close(fd)
        raise SourceChanged(f"'{file.path}' was replaced after it was checked; it was not read", field=field)
    os.set_blocking(fd, True)
    return fd


def open_file_below(directory: int, name: str, *, shown: str, field: str | None) -> int:
    """The file ``name`` in the folder ``directory`` opened for reading (non-blocking: a FIFO there must not block the
    open), never through a link.

    Raises
    ------
    PathNotAllowed
        ``name`` is a link (``shown`` names it); other errors (a missing file) are raised as they are.
    """
    try:
        return os.open(name, _FILE_FLAGS, dir_fd=directory)
    except OSError as exc:
        if exc.errno in LINK_ERRNOS:
            raise PathNotAllowed(f"'{shown}' is now a link; links are not followed here", field=field) from None
        raise


def open_for_writing(path: str, root: str, *, field: str = "sink.path") -> BinaryIO:
    """``path`` below ``root`` opened for writing (created or emptied), its folders made where missing; no link is followed.

    Raises
    ------
    PathNotAllowed
        A folder on the path, or the file, is a link (or not what it should be).
    """
    folder, name = os.path.split(path)
    directory = open_directory(folder, root, field=field, opening=path, create=True)
    try:
        # Not O_TRUNC: a hard link planted in its place would have the file it shares emptied before the check below.
        # O_NONBLOCK: a FIFO planted there fails the open (no reader) instead of blocking it.
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644, dir_fd=directory)
    except OSError as exc:
        if exc.errno in LINK_ERRNOS:
            raise PathNotAllowed(f"'{path}' is a link; links are not followed here", field=field) from None
        if exc.errno == errno.ENXIO:
            raise PathNotAllowed(f"'{path}' is a FIFO, not a file; it is not written", field=field) from None
        raise
    finally:
        os.close(directory)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:  # a FIFO, or a hard link to a file elsewhere
        os.close(fd)
        raise PathNotAllowed(f"'{path}' is not a file of its own (a hard link or a special file); it is not written", field=field)
    os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb")


def verify_checked(files: tuple[CheckedFile, ...] | list[CheckedFile]) -> None:
    """Open and close each of ``files`` as :func:`open_checked` does: refuse any that a link or another file replaced."""
    for file in files:
        os.close(open_checked(file))


class _CheckedFileOpener(LocalFileOpener):
    """fsspec's local file, opened through :func:`open_checked` (also when it is unpickled on a worker)."""

    def __init__(self, checked: CheckedFile, mode: str, **kwargs: Any) -> None:
        self.checked = checked
        super().__init__(checked.path, mode, **kwargs)

    def _open(self) -> None:
        if self.f is None or self.f.closed:
            self.f = os.fdopen(open_checked(self.checked), "rb")
            self.size = self.f.seek(0, 2)
            self.f.seek(0)


class RootBoundFileSystem(LocalFileSystem):
    """Local files for reading, each opened as :func:`open_checked` opens it; only files in ``checked``.

    Parameters
    ----------
    checked
        The files the job checked (:func:`jobs.sandbox.checked_so_far`); they travel with the
        file system to the workers, which open them this way. Listing, sizes and other
        metadata are the local file system's; writing is refused.
    """

    protocol = (PROTOCOL,)
    # One instance per job's files: fsspec's instance cache would keep every job's list for the process's life.
    cachable = False

    def __init__(self, checked: tuple[CheckedFile, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checked = {file.path: file for file in checked}

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if mode != "rb":
            raise PermissionError(f"'{path}': sources are opened for reading only")
        file = self.checked.get(path)
        if file is None:
            raise PathNotAllowed(f"'{path}' was not among the job's checked files; it was not read")
        return _CheckedFileOpener(file, mode, fs=self, **kwargs)


def checked_url(path: str) -> str:
    """``path`` as a URL of :class:`RootBoundFileSystem`, for readers that take a URL and storage options."""
    return f"{PROTOCOL}://{path}"


#: The protocol of :class:`StagingFileSystem`'s URLs.
STAGING_PROTOCOL = "spillway-staging"


class StagingFileSystem(LocalFileSystem):
    """Local files below a data root, written as :func:`open_for_writing` writes them: no link followed.

    The Dask engine's workers write a job's part files through it (``dask.dataframe.to_parquet``
    and ``to_csv`` with a URL of :data:`STAGING_PROTOCOL`), so a staging directory (or a folder
    in it) swapped for a link after the job staged is refused where it is written, not only at
    the commit. Folders are made the same way; reading is the local file system's.

    Parameters
    ----------
    root
        The resolved data root the staging directory lies in; travels with the file system to the workers.
    """

    protocol = (STAGING_PROTOCOL,)
    cachable = False

    def __init__(self, root: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = root

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "w" in mode or "a" in mode or "x" in mode:
            return open_for_writing(path, self.root)
        return super()._open(path, mode, block_size=block_size, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.close(open_directory(self._strip_protocol(path), self.root, create=True))

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.makedirs(path, exist_ok=True)


def staging_url(path: str) -> str:
    """``path`` as a URL of :class:`StagingFileSystem`, for writers that take a URL and storage options."""
    return f"{STAGING_PROTOCOL}://{path}"


# dask's CSV and JSON readers find the file system from the URL's protocol; its writers too.
register_implementation(PROTOCOL, RootBoundFileSystem, clobber=True)
register_implementation(STAGING_PROTOCOL, StagingFileSystem, clobber=True)
