"""How many rows a source's parquet files hold, from their footers: a planning hint, never an answer.

The Polars engine's CPU plan uses it to decide where a scan's read casts run (jobs/polars_frame.py):
before or after a join, which gives the same rows either way but casts fewer of them on one side.
"""

from __future__ import annotations

from spillway.jobs.parquet_footers import parquet_footer
from spillway.jobs.sources import resolve_files
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
        return sum(parquet_footer(path).num_rows for path in resolve_files(source, field=field))
    except (OSError, ValueError):
        return None
