"""Describing written part files for ``_manifest.json``: sizes, rows and schema.

Works through fsspec, so the same code describes a local staging directory and
part files under an object-store prefix.
"""

from __future__ import annotations

import csv
import re
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from spillway.jobs.parquet_footers import hive_folders
from spillway.jobs.polars_io import HIVE_NULL
from spillway.jobs.status import ColumnSchema, ResultFile


def describe_files(
    fs: AbstractFileSystem, root: str, sizes: dict[str, int], *, format: str, job_id: str, partition_on: list[str],
    planned: dict[str, str] | None = None,
) -> tuple[list[ResultFile], list[ColumnSchema]]:
    """One entry per file (``sizes``: path relative to ``root`` → bytes, in order) and their schema.

    Parquet rows come from the footers, the schema from the first file's footer plus the
    hive ``key=value`` folders of ``partition_on``, typed by :func:`partition_key_types`
    (``planned``: the job's column types, Arrow names). CSV rows are counted by reading the
    files (quoted newlines included); CSV files carry no types, so their schema is left to the caller.
    """
    files = [
        ResultFile(path=relative, size_bytes=size, rows=_rows(fs, f"{root}/{relative}", format), job_id=job_id)
        for relative, size in sizes.items()
    ]
    if format != "parquet" or not files:
        return files, []
    dataset = pads.dataset(
        [f"{root}/{f.path}" for f in files],
        format="parquet",
        filesystem=fs,
        partitioning=pads.HivePartitioning(partition_key_types(list(sizes), partition_on, planned or {}), null_fallback=HIVE_NULL,
                                           segment_encoding="uri") if partition_on else None,
        partition_base_dir=root,
    )
    return files, [ColumnSchema(name=field.name, type=str(field.type)) for field in dataset.schema]


_INT32_TEXT = re.compile(r"-?[0-9]+")


def partition_key_types(paths: list[str], keys: list[str], planned: dict[str, str]) -> pa.Schema:
    """The manifest's types of the hive keys ``keys`` of the files ``paths`` (relative, ``k=v/…/part``).

    A key is typed as pyarrow's hive discovery types its folder names (int32 where every value is
    an int32, else string: what readers of the sink get), except where the job's column
    (``planned``) tells more than the names can: a text column's key is string even where its
    values look like numbers, and a key of only nulls is int32 for an integer column, else string,
    as its values would be typed. Appends then compare keys by what the column holds.
    """
    values: dict[str, set[str]] = {key: set() for key in keys}
    for path in paths:
        for name, value in hive_folders(path):
            if name in values and value != HIVE_NULL:
                values[name].add(unquote(value))
    fields = []
    for key in keys:
        column = planned.get(key, "")
        if column in _TEXT_TYPES:
            fields.append(pa.field(key, pa.string()))
        elif not values[key]:
            fields.append(pa.field(key, pa.int32() if column.startswith(("int", "uint")) else pa.string()))
        else:
            fields.append(pa.field(key, pa.int32() if all(_is_int32(v) for v in values[key]) else pa.string()))
    return pa.schema(fields)


_TEXT_TYPES = frozenset({"string", "large_string", "string_view"})


def _is_int32(text: str) -> bool:
    return _INT32_TEXT.fullmatch(text) is not None and -(2**31) <= int(text) < 2**31


def frame_columns(meta: Any) -> list[ColumnSchema]:
    """The Arrow schema of a (pandas or cudf) dataframe's columns."""
    frame = meta.to_pandas() if hasattr(meta, "to_pandas") else meta  # cudf has to_pandas, pandas does not
    schema = pa.Schema.from_pandas(frame, preserve_index=False)
    return [ColumnSchema(name=field.name, type=str(field.type)) for field in schema]


def column_difference(existing: list[ColumnSchema], new: list[ColumnSchema], *, format: str) -> str | None:
    """How ``new`` columns differ from ``existing`` ones, in words; None when they match.

    Parquet readers match columns by name and need one type per column; CSV readers
    match them by position and infer types from the text, so for CSV the names and
    their order must match and the types need not.
    """
    old_types = {c.name: c.type for c in existing}
    new_types = {c.name: c.type for c in new}
    problems = []
    if missing := [name for name in old_types if name not in new_types]:
        problems.append(f"missing {', '.join(missing)}")
    if extra := [name for name in new_types if name not in old_types]:
        problems.append(f"new {', '.join(extra)}")
    if format == "parquet" and (changed := [f"{n} {old_types[n]} → {t}" for n, t in new_types.items() if old_types.get(n, t) != t]):
        problems.append(f"changed types: {', '.join(changed)}")
    if format == "csv" and not problems and list(old_types) != list(new_types):
        problems.append(f"order {', '.join(new_types)} instead of {', '.join(old_types)}")
    return "; ".join(problems) or None


def _rows(fs: AbstractFileSystem, path: str, format: str) -> int:
    if format == "parquet":
        with fs.open(path, "rb") as handle:
            return pq.ParquetFile(handle).metadata.num_rows
    compression = "gzip" if path.endswith(".gz") else None
    # Python's reader refuses a field over 128 KiB by default; the writers have no such limit, so neither has the count.
    csv.field_size_limit(max(csv.field_size_limit(), _LARGEST_CSV_FIELD))
    with fs.open(path, "rt", compression=compression, newline="", encoding="utf-8") as handle:
        return max(sum(1 for _ in csv.reader(handle)) - 1, 0)  # less the header


#: The largest field :func:`_rows` reads (the most a C long holds on every platform).
_LARGEST_CSV_FIELD = 2**31 - 1
