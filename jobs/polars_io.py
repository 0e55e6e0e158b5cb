"""Reading sources into Polars and writing a job's output from it.

Sources are read as the Dask engine reads them, so both engines see the same columns:
parquet decimals as float64, dates as ``datetime[us]``, hive ``key=value/`` folders as
plain columns; CSV and JSON-lines types are inferred from the whole file. Files are the
ones :func:`jobs.sources.resolve_files` lists (a Spillway sink: exactly its manifest's; for a job
the manager runs, each resolved and checked against the data roots, as the Dask engine reads them).

Writing happens on a Dask worker (:mod:`jobs.polars_run`), into the job's staging
directory or, on an object store, as job-named files under the sink prefix; the service
then commits them as for every job (:class:`jobs.sink.SinkWriter`).

Polars opens a scan's files itself, by path, on the worker (a LazyFrame over open files
cannot travel there), so the checked source files cannot be handed to it open. Instead the
worker opens each one as :func:`jobs.safe_open.open_checked` does (walked from its root
without following links, the checked inode) just before the query runs and again after it,
before anything is written: a link or another file swapped in before the query, or left in
place while it ran, fails the job and nothing is written. A swap made and undone while the
query runs is not seen (docs/guarantees.md).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import polars as pl

from spillway.jobs.safe_open import open_checked, open_for_writing, verify_checked
from spillway.jobs.sandbox import CheckedFile, checked_file
from spillway.jobs.sources import resolve_files
from spillway.jobs.spec import SinkSpec, SourceSpec
from spillway.jobs.storage import StorageSettings, is_url, storage_options

# Characters kept as they are in a hive directory name; everything else is %-escaped, as Hive
# and Spark escape partition values, so a value or a column name never forms a path of its own.
_SAFE_IN_PARTITION = " _-.+,@~"


def polars_storage_options(path: str) -> dict[str, str] | None:
    """The object-store options Polars takes for ``path`` (None for a local path).

    Spillway's storage settings are fsspec's (``client_kwargs``); Polars' readers take the
    object_store names. Credentials come from the usual ``AWS_*`` variables in both.
    """
    if not is_url(path):
        return None
    client = storage_options(path).get("client_kwargs", {})
    options: dict[str, str] = {}
    if endpoint := client.get("endpoint_url"):
        options["aws_endpoint_url"] = endpoint
        if endpoint.startswith("http://"):
            options["aws_allow_http"] = "true"
    if region := client.get("region_name"):
        options["aws_region"] = region
    return options


def read_casts(frame: pl.LazyFrame, *, exact_decimals: bool = False) -> dict[str, pl.DataType]:
    """The types a parquet scan's columns are read as: decimals as float64 (kept with ``exact_decimals``),
    dates as microsecond datetimes and columns of type null as text, as the Dask engine reads them
    (:func:`jobs.sources.read_arrow_type`); columns not named keep their type."""
    casts: dict[str, pl.DataType] = {}
    for name, dtype in frame.collect_schema().items():
        if isinstance(dtype, pl.Decimal) and not exact_decimals:
            casts[name] = pl.Float64()
        elif dtype == pl.Date:
            casts[name] = pl.Datetime("us")
        elif dtype == pl.Null:  # a string function on Null failed (SchemaError), where the Dask engine gave null
            casts[name] = pl.String()
    return casts


def with_read_types(frame: pl.LazyFrame, casts: dict[str, pl.DataType]) -> pl.LazyFrame:
    """``frame`` with the columns of ``casts`` (:func:`read_casts`) converted."""
    return frame.with_columns(pl.col(name).cast(dtype) for name, dtype in casts.items()) if casts else frame


def scan_source(source: SourceSpec, *, field: str = "source") -> pl.LazyFrame:
    """A LazyFrame over a source's files (listed now, read when the frame runs), in the language's read types."""
    frame, casts = scan_source_as_stored(source, field=field)
    return with_read_types(frame, casts)


def scan_source_as_stored(source: SourceSpec, *, field: str = "source") -> tuple[pl.LazyFrame, dict[str, pl.DataType]]:
    """A LazyFrame over a source's files with the files' own types, and the casts (:func:`read_casts`) that
    give the language's read types: a filter can then run before them (jobs.polars_frame), where Polars
    pushes it into the scan."""
    files = resolve_files(source, field=field)
    options = polars_storage_options(files[0])
    frame: pl.LazyFrame
    if source.format == "parquet":
        hive = any("=" in part for part in os.path.dirname(files[0]).replace("\\", "/").split("/")[-8:])
        frame = _scan_hive(files, options) if hive else pl.scan_parquet(files, storage_options=options)
    elif source.format == "csv":
        if files[0].endswith(".gz"):  # Polars' CSV scan does not decompress; read those whole
            frame = pl.concat([_read_csv_now(f, options).lazy() for f in files], how="vertical_relaxed")
        else:
            frame = pl.scan_csv(files, infer_schema_length=None, storage_options=options)
    else:
        frame = pl.scan_ndjson(files, infer_schema_length=None, storage_options=options)
    if source.columns:
        frame = frame.select(list(source.columns))
    return frame, read_casts(frame, exact_decimals=source.decimals == "exact") if source.format == "parquet" else {}


def _read_csv_now(path: str, options: dict[str, str] | None) -> pl.DataFrame:
    """A whole CSV file read now (the data travels in the plan); a checked one from the fd :func:`open_checked` gives."""
    checked = checked_file(path)
    if checked is None:
        return pl.read_csv(path, infer_schema_length=None, storage_options=options)
    with os.fdopen(open_checked(checked), "rb") as handle:
        return pl.read_csv(handle, infer_schema_length=None)


def _scan_hive(files: list[str], options: dict[str, str] | None) -> pl.LazyFrame:
    """Hive ``key=value/`` folders as columns: one scan per folder, its values as typed literals.

    The frame Polars' own hive scan gives, with the types Polars infers for the partition
    columns; but cudf-polars 26.10 refuses hive-partitioned scans, and written this way a job
    over a partitioned dataset can run on the GPU instead of moving to dask-cudf.
    """
    inferred = pl.scan_parquet(files, hive_partitioning=True, storage_options=options).collect_schema()
    in_files = set(pl.scan_parquet(files[0], storage_options=options).collect_schema().names())
    keys = [name for name in inferred.names() if name not in in_files]
    by_folder: dict[str, list[str]] = {}
    for path in files:
        by_folder.setdefault(path.replace("\\", "/").rsplit("/", 1)[0], []).append(path)
    frames = []
    for folder, group in by_folder.items():
        texts = dict(part.split("=", 1) for part in folder.split("/") if "=" in part)
        literals = [pl.lit(_hive_value(texts.get(key), inferred[key]), dtype=inferred[key]).alias(key) for key in keys]
        frames.append(pl.scan_parquet(group, storage_options=options).with_columns(literals))
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _hive_value(text: str | None, dtype: pl.DataType) -> Any:
    """A folder's ``value`` as Polars reads it for a column of ``dtype``: %-unescaped, Hive's null marker a null."""
    if text is None or text == "__HIVE_DEFAULT_PARTITION__":
        return None
    value = pl.Series([unquote(text)], dtype=pl.String)
    if dtype == pl.Date:
        return value.str.to_date()[0]
    if isinstance(dtype, pl.Datetime):
        return value.str.to_datetime(time_unit=dtype.time_unit, time_zone=dtype.time_zone)[0]
    return value.cast(dtype)[0]


def partition_directory(names: list[str], values: tuple[Any, ...]) -> str:
    """The hive directory ``name=value/...`` for one partition, every part %-escaped.

    A null is Hive's ``__HIVE_DEFAULT_PARTITION__``.
    """
    parts = []
    for name, value in zip(names, values, strict=True):
        text = "__HIVE_DEFAULT_PARTITION__" if value is None else quote(str(value), safe=_SAFE_IN_PARTITION)
        parts.append(f"{quote(name, safe=_SAFE_IN_PARTITION)}={text}")
    return "/".join(parts)


@dataclass(frozen=True)
class OutputTarget:
    """Where a Polars job writes: a local staging directory or a prefix on an object store.

    ``stem`` names part files (``part.000000`` or ``part.<job>.000000``, without the extension).
    """

    location: str
    stem: str
    sink: SinkSpec
    #: The service's object-store settings (endpoint, region; never credentials), which the worker
    #: that writes takes on: it is another process and never saw them (jobs/storage.py).
    storage: StorageSettings | None = None
    #: The local source files the job checked against the data roots, verified on the worker
    #: before and after the query runs (:func:`write_output`).
    checked: tuple[CheckedFile, ...] = ()
    #: The resolved data root a local ``location`` (then resolved too) lies in: the files are
    #: written below it without following links (:func:`jobs.safe_open.open_for_writing`). None: no roots.
    root: str | None = None

    def path(self, directory: str = "") -> str:
        extension = ".parquet" if self.sink.format == "parquet" else ".csv.gz" if self.sink.codec == "gzip" else ".csv"
        folder = f"{self.location}/{directory}" if directory else self.location
        return f"{folder}/{self.stem.format(0)}{extension}"


def _open(path: str, root: str | None) -> Any:
    import fsspec

    if not is_url(path):
        if root is not None:
            return open_for_writing(path, root)
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return fsspec.open(path, "wb", **storage_options(path)).open()


def write_output(frame: pl.LazyFrame, target: OutputTarget, engine: Any = "auto") -> int:
    """Run ``frame`` and write it to ``target``; returns the rows written.

    The output is collected (on the worker, CPU or GPU) and then written: one file, or one
    per partition directory with ``partition_on``. The checked source files are verified
    before the query runs and after it, before anything is written (see the module's docstring).

    Raises
    ------
    PathNotAllowed
        A checked source file is now reached through a link (nothing is written).
    SourceChanged
        A checked source file was replaced by another (nothing is written).
    """
    sink = target.sink
    codec = sink.codec or "uncompressed"
    verify_checked(target.checked)
    table = frame.collect(engine=engine)
    verify_checked(target.checked)
    if sink.partition_on:
        keys = list(sink.partition_on)
        for values, part in table.partition_by(keys, as_dict=True, maintain_order=True).items():
            with _open(target.path(partition_directory(keys, values)), target.root) as handle:
                part.drop(keys).write_parquet(handle, compression=codec, row_group_size=sink.row_group_size)
    elif sink.format == "parquet":
        with _open(target.path(), target.root) as handle:
            table.write_parquet(handle, compression=codec, row_group_size=sink.row_group_size)
    else:
        with _open(target.path(), target.root) as raw:
            handle = gzip.open(raw, "wb") if sink.codec == "gzip" else raw
            try:
                table.write_csv(handle)
            finally:
                if handle is not raw:
                    handle.close()
    return table.height
