"""Data roots: every source and sink of a job must resolve inside an allowed root.

Paths are resolved the way the workers will open them (symlinks followed, ``..``
collapsed), so a link or a relative path cannot lead outside a root. URL schemes
(``file://``, ``s3://`` …) are refused unless a root is that URL prefix.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from jobs.errors import SpecError
from jobs.spec import JobSpec

_GLOB_CHARS = "*?["


class PathNotAllowed(SpecError):
    """A source or sink outside the configured data roots."""

    code = "path_not_allowed"


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
    PathNotAllowed
        Naming the field, the path and the allowed roots.
    """
    url_roots = [r for r in roots if "://" in r]
    local_roots = [_real(r) for r in roots if "://" not in r]
    allowed = ", ".join(roots) or "(none configured)"
    for field, raw, is_sink in job_paths(spec):
        if "://" in raw:
            if ".." in raw.split("/") or not any(raw.startswith(r.rstrip("/") + "/") for r in url_roots):
                raise PathNotAllowed(f"'{raw}' is not under an allowed URL root; allowed roots: {allowed}", field=field)
            continue
        if ".." in Path(raw).parts:
            raise PathNotAllowed(f"'{raw}' contains '..'; give a path inside an allowed root: {allowed}", field=field)
        literal = raw.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        anchor = _real(literal if not any(c in raw for c in _GLOB_CHARS) else os.path.dirname(literal) or ".")
        if not _inside(anchor, local_roots):
            raise PathNotAllowed(f"'{raw}' resolves to '{anchor}', outside the allowed roots: {allowed}", field=field)
        if is_sink:
            continue
        # A link inside a root may point outside it: check what the workers will actually open.
        for match in glob.glob(os.path.expanduser(raw), recursive=True) if any(c in raw for c in _GLOB_CHARS) else _walk(raw):
            real = _real(match)
            if not _inside(real, local_roots):
                raise PathNotAllowed(f"'{match}' links to '{real}', outside the allowed roots: {allowed}", field=field)


def _walk(path: str) -> Iterator[str]:
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        for root, dirs, files in os.walk(expanded):
            for name in dirs + files:
                yield os.path.join(root, name)
    elif os.path.lexists(expanded):
        yield expanded
