"""Reading sources into Polars and writing a job's output from it.

Sources are read as the Dask engine reads them, so both engines see the same columns:
parquet decimals as float64, dates as ``datetime[us]``, hive ``key=value/`` folders as
plain columns; CSV and JSON-lines columns in the types the checker gives them
(:func:`jobs.sources.text_read_types`), never inferred here. Files are the
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
import io
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import polars as pl

from spillway.jobs.errors import ReadTypeMismatch
from spillway.jobs.safe_open import open_checked, open_for_writing, verify_checked
from spillway.jobs.sandbox import CheckedFile, checked_file
from spillway.jobs.sources import (SUFFIXES, inferred_text_types, read_type_mismatch, resolve_files,
                                   text_read_types)
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
    else:
        frame = _scan_text(source, files, options, field)
    if source.columns:
        frame = frame.select(list(source.columns))
    return frame, read_casts(frame, exact_decimals=source.decimals == "exact") if source.format == "parquet" else {}


#: The Polars type of each read type of a CSV or JSON-lines column (jobs.sources.text_read_types), as ``cast()`` gives it.
READ_TYPES: dict[str, pl.DataType] = {
    "int64": pl.Int64(), "int32": pl.Int32(), "float64": pl.Float64(), "float32": pl.Float32(), "bool": pl.Boolean(),
    "datetime64[ns]": pl.Datetime("ns"), "string": pl.String(),
}


def _scan_text(source: SourceSpec, files: list[str], options: dict[str, str] | None, field: str) -> pl.LazyFrame:
    """A CSV or JSON-lines source read in its read types (:func:`jobs.sources.text_read_types`), the ones the checker
    and the Dask engine use: nothing is inferred here, so a value further on that a type cannot hold fails the query
    (:func:`write_output` names it) instead of changing the column's type on this engine only."""
    schema = {column: READ_TYPES[read_type] for column, read_type in text_read_types(source, files[0], field=field).items()}
    if source.format == "jsonl":
        return pl.scan_ndjson(files, schema=schema, storage_options=options)
    if files[0].endswith(".gz"):  # Polars' CSV scan does not decompress; read those whole
        return pl.concat([_read_csv_now(f, schema, options, field).lazy() for f in files], how="vertical")
    # Every column typed by name; without inference, one the schema missed would be text.
    return pl.scan_csv(files, schema_overrides=schema, infer_schema=False, storage_options=options)


def _read_csv_now(path: str, schema: dict[str, pl.DataType], options: dict[str, str] | None, field: str) -> pl.DataFrame:
    """A whole CSV file read now (the data travels in the plan); a checked one from the fd :func:`open_checked` gives."""
    checked = checked_file(path)
    try:
        if checked is None:
            return pl.read_csv(path, schema_overrides=schema, infer_schema=False, storage_options=options)
        with os.fdopen(open_checked(checked), "rb") as handle:
            return pl.read_csv(handle, schema_overrides=schema, infer_schema=False)
    except pl.exceptions.ComputeError as exc:
        error = parse_read_error(str(exc))
        if error is None or error.column is None:
            raise
        raise read_type_mismatch(error.column, path, error.read_type, error.value, field) from None


@dataclass(frozen=True)
class PolarsReadError:
    """What Polars' error says of a value a column's read type could not hold: the CSV reader names the column, the
    JSON-lines reader only the value and the type."""

    format: str
    column: str | None
    read_type: str
    value: str


# Polars 1.x's messages: "could not parse `abc` as dtype `i64` at column 'n' (column number 2)…" (CSV) and
# "cannot parse 'abc' (string) as Int64" (JSON lines); their type names → the read types.
_CSV_ERROR = re.compile(r"could not parse `(?P<value>.*?)` as dtype `(?P<dtype>[^`]+)` at column '(?P<column>.*?)' \(column number", re.S)
_JSON_ERROR = re.compile(r"cannot parse '(?P<value>.*?)' \(\w+\) as (?P<dtype>\w+)", re.S)
_CSV_TYPES = {"i64": "int64", "i32": "int32", "f64": "float64", "f32": "float32", "bool": "bool", "datetime[ns]": "datetime64[ns]"}
_JSON_TYPES = {"Int64": "int64", "Int32": "int32", "Float64": "float64", "Float32": "float32", "Boolean": "bool", "Datetime": "datetime64[ns]"}


def parse_read_error(text: str) -> PolarsReadError | None:
    """The value, type and (CSV) column of Polars' error ``text`` for a value its read type cannot hold; None for other errors."""
    if (csv := _CSV_ERROR.search(text)) and csv["dtype"] in _CSV_TYPES:
        return PolarsReadError("csv", csv["column"], _CSV_TYPES[csv["dtype"]], csv["value"])
    if (jsonl := _JSON_ERROR.search(text)) and jsonl["dtype"] in _JSON_TYPES:
        return PolarsReadError("jsonl", None, _JSON_TYPES[jsonl["dtype"]], jsonl["value"])
    return None


def refuses(data: str | bytes, error: PolarsReadError, column: str, message: str) -> bool:
    """Whether reading ``column`` alone of ``data`` (a file's path, or its bytes) as ``error``'s type fails as the read
    that gave ``message`` did (JSON lines: with the same message, since another column may refuse that type for
    another value). Only for naming a failure: the data is read again."""
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    dtype = READ_TYPES[error.read_type]
    try:
        if error.format == "csv":
            pl.read_csv(source, columns=[column], schema_overrides={column: dtype}, infer_schema=False)
        else:
            pl.read_ndjson(source, schema={column: dtype})
    except pl.exceptions.ComputeError as exc:
        return error.format == "csv" or str(exc) == message
    except pl.exceptions.ColumnNotFoundError:
        return False
    return False


def named_read_error(exc: pl.exceptions.ComputeError, checked: tuple[CheckedFile, ...]) -> ReadTypeMismatch | None:
    """``exc`` as :class:`jobs.errors.ReadTypeMismatch` if it is Polars refusing a CSV or JSON-lines value its column's
    read type cannot hold; else None.

    Polars names neither the file nor (JSON lines) the column: they are looked for in the job's ``checked`` source
    files (a job the manager runs under data roots; none for object stores), the first that holds such a value
    (each read again, one column at a time: only when a job fails). The Dask engine raises the same error.
    """
    error = parse_read_error(str(exc))
    if error is None:
        return None
    for file in checked:
        if not file.path.endswith(SUFFIXES[error.format]):
            continue
        for column in [error.column] if error.column is not None else inferred_text_types(error.format, file.path):
            if refuses(file.path, error, column, str(exc)):
                return read_type_mismatch(column, file.path, error.read_type, error.value, file.field.removesuffix(".path"))
    return read_type_mismatch(error.column, None, error.read_type, error.value, None)


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
    ReadTypeMismatch
        A CSV or JSON-lines value its column's read type cannot hold (nothing is written).
    """
    sink = target.sink
    codec = sink.codec or "uncompressed"
    verify_checked(target.checked)
    try:
        table = frame.collect(engine=engine)
    except pl.exceptions.ComputeError as exc:
        verify_checked(target.checked)  # the files read again to name the value must still be those checked
        if (named := named_read_error(exc, target.checked)) is not None:
            raise named from None
        raise
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
