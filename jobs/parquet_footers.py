"""Every file of a parquet source holds its first file's columns, in types both engines read alike.

A source's columns and their types come from its first file's footer (:func:`jobs.sources.parquet_schema`). Its
later files are read in those: columns a later file adds are not read (a nightly export that gained a column still
reads, on both engines). A later file that lacks one of them, or holds it in another type, was read differently by
the two engines (the Dask engine in each file's own types, or failing on the column; Polars failing on the scan), so
it is refused at planning, naming the file, the column and both types, as :class:`jobs.errors.UnreadableSource`.
Local files only: an object store's are not opened at planning.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field as dataclass_field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from spillway.jobs.spec import SourceSpec
from spillway.jobs.storage import is_url
from spillway.jobs.text_reading import unreadable


def check_parquet_footers(source: SourceSpec, files: list[str], *, field: str = "source", polars: bool = False) -> bool:
    """Refuse the first local file after ``files[0]`` whose footer lacks a column of the first file's (of the source's
    ``columns``, where it lists them) or holds one in another type, and a first file with a timestamp zoned by a fixed
    offset; whether a later file has columns the first has not (which a scan must then be told to leave out). With
    ``polars`` (the Polars engine's planning), also a first file with a decimal it cannot read.

    Raises
    ------
    UnreadableSource
        Naming that file and what differs; or a later file that is not parquet.
    """
    if source.format != "parquet":
        return False
    check_hive_layout(files, field)
    if is_url(files[0]):
        return False
    first = _footer(files[0])
    _refuse_fixed_offsets(first, files[0], field)
    if polars:
        _refuse_wide_decimals(first, list(source.columns) if source.columns else first.names, files[0], field)
    extra = False
    wanted = list(source.columns) if source.columns else first.names
    for path in files[1:]:
        if is_url(path):
            continue
        try:
            footer = _footer(path)
        except (OSError, pa.ArrowException) as exc:
            raise unreadable(path, "parquet", str(exc), field) from None
        extra = extra or any(name not in first.names for name in footer.names)
        for column in wanted:
            if column not in first.names:
                continue  # a hive key, or a column the checker refuses anyway
            if column not in footer.names:
                raise unreadable(path, "parquet", f"it has no column '{column}', which the source's first file ({files[0]}) has; "
                                                  "list the columns the job reads in the source's columns, or rewrite the file", field)
            had, has = first.field(column).type, footer.field(column).type
            if not same_read_type(had, has):
                raise unreadable(path, "parquet", f"its column '{column}' is {has}, where the source's first file ({files[0]}) has "
                                                  f"{had}; every file of a source holds a column in one type", field)
    return extra


def hive_folders(path: str) -> list[tuple[str, str]]:
    """The hive ``key=value`` folders of the file ``path`` (``k=v/j=w/f.parquet``: (k, v), (j, w)), as pyarrow's and
    Spillway's readers take them: split at each folder's first ``=``, the key's %-escapes undone, the value as written
    (Hive's null marker included)."""
    return [(unquote(key), value) for key, value in
            (part.split("=", 1) for part in path.replace("\\", "/").split("/")[:-1] if "=" in part)]


def check_hive_layout(files: list[str], field: str) -> None:
    """Refuse a source whose files lie under different hive keys: a file beside the ``key=value`` folders, or folders of
    different depths. The engines read such a layout differently (the Dask engine failed on a missing key, Polars on
    the frame's shape), each with a raw error naming no file."""
    first = [key for key, _ in hive_folders(files[0])]
    for path in files[1:]:
        keys = [key for key, _ in hive_folders(path)]
        if keys != first:
            raise unreadable(path, "parquet", f"it lies {_under(keys)}, where the source's first file ({files[0]}) lies {_under(first)}; "
                                              "every file of a source lies under the same key=value folders", field)


def _under(keys: list[str]) -> str:
    return f"under the hive keys {', '.join(keys)}" if keys else "under no key=value folder"


def _refuse_fixed_offsets(schema: pa.Schema, path: str, field: str) -> None:
    """A timestamp zoned by a fixed offset (``+05:30``, which pyarrow and pandas write) makes Polars panic while it
    builds the scan (a Rust panic, not an error it raises): refused on both engines, naming the column."""
    for column in schema:
        zone = getattr(column.type, "tz", None) if pa.types.is_timestamp(column.type) else None
        if zone and zone[0] in "+-":
            raise unreadable(path, "parquet", f"its column '{column.name}' is zoned by the fixed offset {zone}, which the Polars "
                                              "engine cannot read; write it in UTC or in a named zone (Asia/Kolkata)", field)


def _refuse_wide_decimals(schema: pa.Schema, wanted: list[str], path: str, field: str) -> None:
    """A decimal of more than 38 digits (decimal256) that the job reads: the Polars engine cannot read it (it failed
    raw); the Dask engine reads it as float64, as every decimal. Refused on Polars, naming the column and the way out."""
    for column in schema:
        if column.name in wanted and pa.types.is_decimal(column.type) and column.type.precision > 38:
            raise unreadable(path, "parquet", f"its column '{column.name}' is {column.type}, wider than the 38 digits the "
                                              "Polars engine reads; run the job with engine: dask (which reads it as float64), "
                                              "leave the column out of the source's columns, or write it as decimal128", field)


def same_read_type(first: pa.DataType, later: pa.DataType) -> bool:
    """Whether a column stored as ``first`` in a source's first file and ``later`` in another is read alike by both
    engines: the same type, text in any of Arrow's string layouts, or a later column of only nulls (type null). Polars'
    scan takes no other pair (not int32 beside int64, a date beside a timestamp, nor a typed column after one of type
    null, as pandas writes a file of no rows); the Dask engine read each file in its own type."""
    return pa.types.is_null(later) or first == later or (_text(first) and _text(later))


def _text(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype)


def _footer(path: str) -> pa.Schema:
    return parquet_footer(path).schema


#: File versions whose footer summaries are kept (~11 KiB each for lineitem's 16 columns): more than the files of the
#: largest source measured (3251 links of TPC-H SF 10 lineitem), so a job planned again reads none; an LRU smaller than
#: a source's files reads them all again each time.
FOOTERS_KEPT = 8192


@dataclass(frozen=True)
class ParquetFooter:
    """What planning takes from a local parquet file's footer, read once per file version (:func:`parquet_footer`)."""

    #: The file's Arrow schema, as ``pyarrow.parquet.read_schema`` gives it.
    schema: pa.Schema
    #: The rows the footer counts.
    num_rows: int
    #: (top-level column, compressed bytes, uncompressed bytes) of each leaf column, summed over the row groups.
    column_bytes: tuple[tuple[str, int, int], ...]


def parquet_footer(path: str) -> ParquetFooter:
    """The footer of the local parquet file ``path``, parsed once per file version: the source check's schema
    (:func:`check_parquet_footers`), the read totals and working set (``jobs.read_progress``) and the row hint
    (``jobs.scan_rows``) share one read. Kept by the file's identity (device, inode, size, modification time), not its
    path: hard links of one file are one read. (A TPC-H SF 10 lineitem's 1 MB footer, 524 row groups: ~8 ms to parse and
    ~6 ms to sum its 8384 column chunks on a 2-core CPU; before, each path's was parsed by two or three steps and its
    chunks walked at ~30 ms, and a source of more files than the totals' cache kept, 1024, was read again every job.)

    Raises
    ------
    OSError, pyarrow.ArrowException
        As ``pyarrow.parquet.ParquetFile`` raises them (no such file, not parquet).
    """
    stat = os.stat(path)
    return _read_footer(_FileVersion((stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns), path))


@dataclass(frozen=True)
class _FileVersion:
    identity: tuple[int, int, int, int]
    #: Where to read it: any of its links (not part of the cache's key).
    path: str = dataclass_field(compare=False, hash=False)


@functools.lru_cache(maxsize=FOOTERS_KEPT)
def _read_footer(version: _FileVersion) -> ParquetFooter:
    file = pq.ParquetFile(version.path)
    metadata = file.metadata
    columns = metadata.num_columns
    compressed, uncompressed = [0] * columns, [0] * columns
    names: list[str] = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(columns):
            chunk = row_group.column(column)
            if group == 0:
                names.append(chunk.path_in_schema.split(".")[0])
            compressed[column] += chunk.total_compressed_size
            uncompressed[column] += chunk.total_uncompressed_size
    return ParquetFooter(file.schema_arrow, metadata.num_rows, tuple(zip(names, compressed, uncompressed)))
