"""How much of each source a running Polars query has read, measured by the operating system.

Polars' engines expose no progress counter, but on the CPU they read local parquet, CSV and
JSON files through memory maps. The pages of a mapped file that the query has touched are
resident in the worker's memory map of that file, which ``/proc/self/smaps`` reports per
file (its ``Rss``). :class:`ReadMeter` samples that while the query runs and keeps, per file,
the most it has seen (a file is unmapped once read). That is a real count of bytes read,
per source, against a total known before the query starts (:func:`source_reads`): for
parquet the compressed size of the column chunks of the columns the optimized query reads,
from the footers; otherwise the files' sizes.

What it does not see, and so never claims: row groups skipped by statistics and pages read
and released between two samples (the bar then stops short and the stage completes when the
query does), files on object stores, and the
GPU engine, which reads through libcudf rather than memory maps (its read stages show 0 of
their total until the query ends). Linux only; elsewhere the meter reads nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from spillway.jobs.parquet_footers import parquet_footer
from spillway.jobs.sources import resolve_files
from spillway.jobs.spec import JobSpec, SourceSpec
from spillway.jobs.storage import is_url

#: The unit of the read stages' counts.
READ_UNIT = "MiB"
_MIB = 1 << 20
_SMAPS = "/proc/self/smaps"


@dataclass(frozen=True)
class SourceRead:
    """One source of a job: the stage its reading feeds, its files and the bytes the query will read.

    ``total_bytes`` is what the files hold of it (compressed column chunks), ``in_memory_bytes``
    what it takes once decoded (uncompressed chunks; the file sizes for CSV and JSON lines).
    """

    stage: str
    files: tuple[str, ...]
    total_bytes: int
    in_memory_bytes: int = 0


def read_stage_name(field: str) -> str:
    """The progress stage of the source at ``field``: ``read lineitem`` for ``sources.lineitem``."""
    if field == "source":
        return "read source"
    if field.startswith("sources.") and field.count(".") == 1:
        return f"read {field.removeprefix('sources.')}"
    return f"read {field}"


def source_reads(spec: JobSpec, frame: pl.LazyFrame | None = None) -> list[SourceRead]:
    """Every local source of files of ``spec``, with the bytes its query is expected to read.

    With the job's ``frame``, a parquet file's columns are those Polars' optimizer keeps for
    its scan (projection pushdown); otherwise the source's ``columns``, or all of them.
    """
    scanned = scanned_columns(frame) if frame is not None else {}
    reads = []
    for field, source in spec.source_fields():
        files = resolve_files(source, field=field)
        if not files or is_url(files[0]):
            continue
        paths = tuple(os.path.realpath(f) for f in files)
        reads.append(SourceRead(read_stage_name(field), paths, *_bytes_to_read(source, paths, scanned)))
    return reads


def scanned_columns(frame: pl.LazyFrame) -> dict[str, frozenset[str] | None]:
    """File → the columns the optimized plan reads from it (None: all), for every file scan in ``frame``.

    Read off the plan Polars will run, through the node visitor cudf-polars also uses
    (``LazyFrame._ldf.visit()``); a Polars without it gives {} and the totals fall back.
    """
    try:
        visitor = frame._ldf.visit()
    except Exception:  # noqa: BLE001 - an internal API: without it, only the fallback is lost
        return {}
    columns: dict[str, frozenset[str] | None] = {}

    def walk(node: int) -> None:
        visitor.set_node(node)
        current = visitor.view_current_node()
        if type(current).__name__ == "Scan":
            kept = current.file_options.with_columns
            for path in current.paths:
                key = os.path.realpath(str(path))
                before = columns.get(key, frozenset())
                columns[key] = None if kept is None or before is None else before | frozenset(kept)
        for child in visitor.get_inputs():
            walk(child)
            visitor.set_node(node)

    try:
        walk(visitor.get_node())
    except Exception:  # noqa: BLE001 - as above
        return {}
    return columns


def _bytes_to_read(source: SourceSpec, files: tuple[str, ...], scanned: dict[str, frozenset[str] | None]) -> tuple[int, int]:
    """(compressed, uncompressed) bytes of what the query reads of ``files``."""
    if source.format != "parquet":
        size = sum(os.path.getsize(f) for f in files)
        return size, size
    compressed = uncompressed = 0
    for path in files:
        keep = scanned[path] if path in scanned else (frozenset(source.columns) if source.columns is not None else None)
        for column, packed, unpacked in parquet_footer(path).column_bytes:
            if keep is None or column in keep:
                compressed += packed
                uncompressed += unpacked
    return compressed, uncompressed


def to_mib(count: int) -> int:
    """Bytes as whole MiB, rounded up so that a started read never shows 0."""
    return -(-count // _MIB)


class ReadMeter:
    """Bytes of each source read so far by this process, from its memory maps (see the module's docstring)."""

    def __init__(self, reads: list[SourceRead]) -> None:
        self._reads = reads
        self._stage_of = {path: read.stage for read in reads for path in read.files}
        self._most: dict[str, int] = {}

    def sample(self) -> dict[str, int]:
        """Stage → bytes read so far, never more than its total."""
        for path, resident in _mapped_bytes(self._stage_of):
            self._most[path] = max(self._most.get(path, 0), resident)
        read: dict[str, int] = {r.stage: 0 for r in self._reads}
        for path, count in self._most.items():
            read[self._stage_of[path]] += count
        return {r.stage: min(read[r.stage], r.total_bytes) for r in self._reads}


def _mapped_bytes(paths: dict[str, str]) -> Iterator[tuple[str, int]]:
    """(path, resident bytes) of this process's mappings of ``paths``; nothing where /proc is absent."""
    try:
        handle = open(_SMAPS, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except OSError:
        return
    resident: dict[str, int] = {}
    current: str | None = None
    with handle:
        for line in handle:
            if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                parts = line.split(None, 5)
                current = parts[5].strip() if len(parts) == 6 and parts[5].strip() in paths else None
            elif current is not None and line.startswith("Rss:"):
                resident[current] = resident.get(current, 0) + int(line.split()[1]) * 1024
    yield from resident.items()
