"""Reading a source's files into a lazy Dask dataframe (pandas or cuDF, from the dask config)."""

from __future__ import annotations

from typing import Any

import dask
import dask.dataframe as dd

from jobs.sources import parquet_schema, plain_types, resolve_files
from jobs.spec import SourceSpec
from jobs.storage import storage_options


def read_source(source: SourceSpec, *, field: str = "source") -> dd.DataFrame:
    """A lazy dataframe over a source's files (the backend comes from the dask config).

    Parquet decimals, dates and hive partition columns are read as plainer types:
    see :func:`jobs.sources.plain_types`. Object-store options go into the graph as
    ``storage_options``, so the workers open the files exactly as the service listed them.
    """
    files = resolve_files(source, field=field)
    options = storage_options(files[0]) or None
    if source.format == "parquet":
        frame = _read_parquet(files, columns=source.columns, blocksize=source.blocksize or "default", storage_options=options)
        casts = {column: dtype for column, dtype in plain_types(*parquet_schema(files)).items() if column in frame.columns}
        # One cast per column: a frame-wide astype would need every column, so dask could
        # no longer push a job's column projection into the read.
        return frame.assign(**{column: frame[column].astype(dtype) for column, dtype in casts.items()}) if casts else frame
    if source.format == "csv":
        # A gzipped file cannot be split: one partition per file (dask warns and does the same).
        blocksize = None if files[0].endswith(".gz") else source.blocksize or "64MiB"
        frame = dd.read_csv(files, usecols=source.columns, blocksize=blocksize, storage_options=options)
        # usecols keeps the file's column order; the spec's order is the one validation assumed.
        return frame[list(source.columns)] if source.columns else frame
    frame = dd.read_json(files, lines=True, blocksize=source.blocksize or "64MiB", storage_options=options)
    return frame[list(source.columns)] if source.columns else frame


# dask builds parquet metadata through pandas and, with string conversion on, maps DATE
# and DECIMAL to pandas' ArrowDtype, which cudf.from_pandas refuses for dates (dask-cudf
# 26.10 under pandas 3). Without string conversion they come out as object columns, which
# dask-cudf then builds as empty cuDF columns; only the metadata changes: the partitions
# come from cuDF's own reader and are cast afterwards like every source (plain_types).
_CUDF_DATE_META_CONFIG = {"dataframe.convert-string": False}


def _read_parquet(files: list[str], **kwargs: Any) -> dd.DataFrame:
    """``dd.read_parquet``, working around cuDF's missing support for date32 metadata."""
    try:
        return dd.read_parquet(files, **kwargs)
    except NotImplementedError as exc:
        if dask.config.get("dataframe.backend") != "cudf" or "date" not in str(exc):
            raise
        with dask.config.set(_CUDF_DATE_META_CONFIG):
            return dd.read_parquet(files, **kwargs)
