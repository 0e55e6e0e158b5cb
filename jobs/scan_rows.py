"""How many rows a source's parquet files hold, from their footers: a planning hint, never an answer.

The Polars engine's CPU plan uses it to decide where a scan's read casts run (jobs/polars_frame.py):
before or after a join, which gives the same rows either way but casts fewer of them on one side.
"""

from __future__ import annotations

import functools

import pyarrow.parquet as pq

from spillway.jobs.sources import file_version, resolve_files
from spillway.jobs.spec import SourceSpec
from spillway.jobs.storage import is_url


def source_rows(source: SourceSpec, field: str) -> int | None:
    """The rows of a local parquet source's files (their footers' counts), or None where unknown.

    None for CSV and JSON lines (no count without reading them), for object stores (a request per
    footer is not worth a hint) and where a footer cannot be read (the query reports that itself).
    """
    if source.format != "parquet" or is_url(source.path):
        return None
    try:
        return sum(_file_rows(path, file_version(path)) for path in resolve_files(source, field=field))
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=1024)
def _file_rows(path: str, version: tuple[int, int, int]) -> int:
    """The row count in ``path``'s footer, kept per file version (size, modification time, inode)."""
    return pq.ParquetFile(path).metadata.num_rows
