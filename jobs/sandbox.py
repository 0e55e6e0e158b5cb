"""Data roots: every source and sink of a job must resolve inside an allowed root.

Local paths are resolved the way the workers will open them (symlinks followed,
``..`` collapsed), so a link or a relative path cannot lead outside a root. A URL is
allowed only when it is an object-store URL (``s3://``) under a root that is a URL
prefix such as ``s3://bucket/etl/``; it may not hold ``.`` or ``..`` segments
(object keys are not normalised, but some clients normalise request paths) nor
chain filesystems with ``::``. Every other scheme (``file://``, ``http://`` …) is refused.

The check at submit is not enough on its own: while a job waits, someone who may create
links in a root can swap a source file, a folder inside a source or the sink's parent for a
link that leads out. So the manager checks again when the job starts (:func:`check_paths`),
the files a source lists are resolved and checked while the job is planned
(:func:`enforce_roots`, :func:`checked_files`: both engines then read the resolved paths),
and the sink's parent is resolved again at the commit (:func:`check_sink_parent`).
Each checked file is recorded with its root and inode (:class:`CheckedFile`), so that
where it is opened later (:mod:`jobs.safe_open`) no link swapped in since can lead elsewhere.
"""

from __future__ import annotations

import glob
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path

from spillway.jobs.errors import SpecError
from spillway.jobs.spec import JobSpec
from spillway.jobs.storage import OBJECT_STORE_SCHEMES

_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class CheckedFile:
    """A source file as it was checked: its resolved path, the resolved root it lies in, and its identity.

    Where it is opened, the path is walked from ``root`` without following links and the file
    opened must be this ``(device, inode)`` (:func:`jobs.safe_open.open_checked`); on a worker of
    another ``host`` (a shared file system, whose device numbers are each host's own) this inode.
    """

    path: str
    root: str
    device: int
    inode: int
    #: The spec's field of the source that lists it, for errors.
    field: str = "source.path"
    #: The host that checked it.
    host: str = ""


@dataclass(frozen=True)
class _Enforcement:
    roots: tuple[str, ...]
    local_roots: tuple[str, ...]
    # Shared by the threads planning one job (each gets a copy of the context, not of this dict).
    checked: dict[str, CheckedFile] = dataclass_field(default_factory=dict)


# The data roots of the job being planned now (None: no check, as for a spec checked at submit).
_ENFORCED: ContextVar[_Enforcement | None] = ContextVar("spillway_enforced_roots", default=None)


class PathNotAllowed(SpecError):
    """A source or sink outside the configured data roots."""

    code = "path_not_allowed"


class InvalidPath(SpecError):
    """A path no file system can open (a NUL byte in it): a bad request, not a refusal."""

    code = "invalid_path"


def job_paths(spec: JobSpec) -> Iterator[tuple[str, str, bool]]:
    """(field, path, is_sink) for every path a job touches."""
    for field, source in spec.source_fields():
        yield f"{field}.path", source.path, False
    yield "sink.path", spec.sink.path, True


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _inside(path: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([path, root]) == root for root in roots)


def check_paths(spec: JobSpec, roots: Iterable[str]) -> None:
    """Refuse any path of ``spec`` outside ``roots``.

    Raises
    ------
    InvalidPath
        For a path with a NUL byte (the OS would refuse it with a ValueError).
    PathNotAllowed
        Naming the field, the path and the allowed roots.
    """
    roots = list(roots)
    url_roots = [r.rstrip("/") for r in roots if "://" in r]
    local_roots = [_real(r) for r in roots if "://" not in r]
    allowed = ", ".join(roots) or "(none configured)"
    for field, raw, is_sink in job_paths(spec):
        if "\0" in raw:
            raise InvalidPath(f"{field} holds a NUL byte, which no path may contain", field=field)
        if "::" in raw:
            raise PathNotAllowed(f"'{raw}' chains filesystems with '::', which is not allowed; allowed roots: {allowed}", field=field)
        if "://" in raw:
            _check_url(raw, url_roots, allowed, field, is_sink)
            continue
        if ".." in Path(raw).parts:
            raise PathNotAllowed(f"'{raw}' contains '..'; give a path inside an allowed root: {allowed}", field=field)
        literal = raw.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        anchor = _real(literal if not any(c in raw for c in _GLOB_CHARS) else os.path.dirname(literal) or ".")
        if not _inside(anchor, local_roots):
            raise PathNotAllowed(f"'{raw}' resolves to '{anchor}', outside the allowed roots: {allowed}", field=field)
        if is_sink:
            if anchor in local_roots:
                raise _sink_is_root(raw, field)
            continue
        # A link inside a root may point outside it: check what the workers will actually open.
        for match in glob.glob(os.path.expanduser(raw), recursive=True) if any(c in raw for c in _GLOB_CHARS) else _walk(raw):
            real = _real(match)
            if not _inside(real, local_roots):
                raise PathNotAllowed(f"'{match}' links to '{real}', outside the allowed roots: {allowed}", field=field)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be (or lie under) a data root; None when it can."""
    scheme, _, rest = url.partition("://")
    if scheme not in OBJECT_STORE_SCHEMES:
        return f"only {', '.join(f'{s}://' for s in sorted(OBJECT_STORE_SCHEMES))} URLs are supported, not '{scheme}://'"
    if any(segment in (".", "..") for segment in rest.split("/")) or "\\" in rest:
        return "it contains '.' or '..' segments"
    if not rest.split("/", 1)[0]:
        return "it names no bucket"
    return None


def check_sink_url(location: str, roots: list[str], *, field: str) -> None:
    """Refuse an object-store sink ``location`` that lies under none of the URL ``roots`` (naming ``field``)."""
    url_roots = [r.rstrip("/") for r in roots if "://" in r]
    problem = url_problem(location)
    if problem is None and not any(location.startswith(r + "/") for r in url_roots):
        problem = "no data root is a prefix of it"
    if problem is not None:
        raise PathNotAllowed(f"the sink '{location}' is not under an allowed URL root: {problem}", field=field)


def _check_url(raw: str, url_roots: list[str], allowed: str, field: str, is_sink: bool) -> None:
    problem = url_problem(raw)
    if problem is None and not any(raw == root or raw.startswith(root + "/") for root in url_roots):
        problem = "no root is a prefix of it"
    if problem is not None:
        raise PathNotAllowed(f"'{raw}' is not under an allowed URL root: {problem}; allowed roots: {allowed}", field=field)
    if is_sink and raw.rstrip("/") in url_roots:
        raise _sink_is_root(raw, field)


def _sink_is_root(raw: str, field: str) -> PathNotAllowed:
    # The sink is staged beside itself and renamed over it: for a root, that is outside the root.
    return PathNotAllowed(f"'{raw}' is an allowed root itself; give a directory inside it as the sink", field=field)


def _walk(path: str) -> Iterator[str]:
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        for root, dirs, files in os.walk(expanded):
            for name in dirs + files:
                yield os.path.join(root, name)
    elif os.path.lexists(expanded):
        yield expanded


@contextmanager
def enforce_roots(roots: Iterable[str] | None) -> Iterator[None]:
    """Within this block (and the threads started from it with ``asyncio.to_thread``), the files
    sources list are resolved and checked against ``roots`` (:func:`checked_files`). None: no check."""
    if roots is None:
        enforcement = None
    else:
        roots = tuple(roots)
        enforcement = _Enforcement(roots, tuple(_real(r) for r in roots if "://" not in r))
    token = _ENFORCED.set(enforcement)
    try:
        yield
    finally:
        _ENFORCED.reset(token)


def checked_files(files: list[str], *, field: str) -> list[str]:
    """``files`` as the readers should open them: each local file resolved (links followed),
    and refused if it now lies outside the roots of :func:`enforce_roots`. Outside such a block,
    and for object-store URLs (checked as prefixes; object keys have no links), unchanged.

    Raises
    ------
    PathNotAllowed
        Naming the file, where it leads, and the allowed roots.
    """
    enforcement = _ENFORCED.get()
    if enforcement is None:
        return files
    resolved = []
    for path in files:
        if "://" in path:
            resolved.append(path)
            continue
        real = _real(path)
        root = next((r for r in enforcement.local_roots if os.path.commonpath([real, r]) == r), None)
        if root is None:
            raise PathNotAllowed(f"'{path}' now leads to '{real}', outside the allowed roots: {', '.join(enforcement.roots)}", field=field)
        stat = os.stat(real)
        enforcement.checked[real] = CheckedFile(real, root, stat.st_dev, stat.st_ino, field, socket.gethostname())
        resolved.append(real)
    return resolved


def local_root_of(path: str, roots: Iterable[str]) -> str | None:
    """The resolved local root among ``roots`` that the resolved ``path`` lies in; None: none."""
    return next((r for r in (_real(r) for r in roots if "://" not in r) if os.path.commonpath([path, r]) == r), None)


def checked_so_far() -> tuple[CheckedFile, ...]:
    """The local files :func:`checked_files` has checked in this :func:`enforce_roots` block; () outside one."""
    enforcement = _ENFORCED.get()
    return tuple(enforcement.checked.values()) if enforcement is not None else ()


def checked_file(path: str) -> CheckedFile | None:
    """How the resolved ``path`` was checked in this :func:`enforce_roots` block (None: it was not, or no block)."""
    enforcement = _ENFORCED.get()
    return enforcement.checked.get(path) if enforcement is not None else None


def check_sink_parent(location: str, roots: Iterable[str], *, field: str = "sink.path") -> None:
    """Refuse a local sink whose parent (or the sink itself, if it exists) resolves outside ``roots`` now.

    Raises
    ------
    PathNotAllowed
        The sink's parent, or the sink, leads outside every root (a link swapped in after submit).
    """
    roots = list(roots)
    local_roots = [_real(r) for r in roots if "://" not in r]
    for path in (os.path.dirname(location), location):
        if path != location or os.path.lexists(path):
            real = _real(path)
            if not _inside(real, local_roots):
                raise PathNotAllowed(
                    f"the sink '{location}': '{path}' now leads to '{real}', outside the allowed roots: {', '.join(roots) or '(none configured)'}",
                    field=field,
                )
