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

import fsspec
import fsspec.compression
import polars as pl
import pyarrow as pa
from fsspec.utils import infer_compression

from spillway.jobs.errors import CsvScanMiscount, ReadTypeMismatch, SpecError, UnreadableSource
from spillway.jobs.parquet_footers import check_parquet_footers, hive_folders
from spillway.jobs.safe_open import open_checked, open_for_writing, verify_checked
from spillway.jobs.sandbox import CheckedFile, checked_file
from spillway.jobs.sources import (SUFFIXES, check_csv_headers, inferred_text_types, parquet_schema, read_type_mismatch,
                                   resolve_files, text_read_types)
from spillway.jobs.spec import JobSpec, SinkSpec, SourceSpec
from spillway.jobs.storage import StorageSettings, is_url, storage_options
from spillway.jobs.text_reading import READ_FAILURES, READ_TYPES, compressed, file_failure, parse_read_error, refuses, refusing_column, unreadable

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


def read_casts(frame: pl.LazyFrame, *, exact_decimals: bool = False, dates: frozenset[str] = frozenset()) -> dict[str, pl.DataType]:
    """The types a parquet scan's columns are read as: decimals as float64 (kept with ``exact_decimals``),
    dates as microsecond datetimes (``dates``: the columns pyarrow reads as dates, where Polars may read a date64
    as Datetime('ms') from the file's Arrow schema) and columns of type null as text, as the Dask engine reads them
    (:func:`jobs.sources.read_arrow_type`); columns not named keep their type."""
    casts: dict[str, pl.DataType] = {}
    for name, dtype in frame.collect_schema().items():
        if isinstance(dtype, pl.Decimal) and not exact_decimals:
            casts[name] = pl.Float64()
        elif dtype == pl.Date or name in dates:
            casts[name] = pl.Datetime("us")
        elif dtype == pl.Null:  # a string function on Null failed (SchemaError), where the Dask engine gave null
            casts[name] = pl.String()
        elif isinstance(dtype, (pl.Categorical, pl.Enum)):  # dictionary-encoded text, read as text on both engines
            casts[name] = pl.String()
    return casts


def with_read_types(frame: pl.LazyFrame, casts: dict[str, pl.DataType]) -> pl.LazyFrame:
    """``frame`` with the columns of ``casts`` (:func:`read_casts`) converted."""
    return frame.with_columns(pl.col(name).cast(dtype) for name, dtype in casts.items()) if casts else frame


def scan_source(source: SourceSpec, *, field: str = "source") -> pl.LazyFrame:
    """A LazyFrame over a source's files (listed now, read when the frame runs), in the language's read types."""
    frame, casts = scan_source_as_stored(source, field=field)
    return with_read_types(frame, casts)


def scan_source_as_stored(source: SourceSpec, *, field: str = "source", first_file_only: bool = False,
                          csv_rows_by_a_column: bool = False) -> tuple[pl.LazyFrame, dict[str, pl.DataType]]:
    """A LazyFrame over a source's files with the files' own types, and the casts (:func:`read_casts`) that
    give the language's read types: a filter can then run before them (jobs.polars_frame), where Polars
    pushes it into the scan.

    ``first_file_only``: the frame scans the source's first file alone, with the scan options, types and hive keys
    all of its files give: the same plan over fewer files, for asking cudf-polars whether it can run it
    (jobs.gpu_support), whose translation reads every scanned file's footer (~15 ms a file on an H100).
    ``csv_rows_by_a_column``: a CSV scan always parses its first column (:func:`counted_by_a_column`).
    """
    files = resolve_files(source, field=field)
    scanned = files[:1] if first_file_only else files
    options = polars_storage_options(files[0])
    frame: pl.LazyFrame
    if source.format == "parquet":
        # Columns a later file adds are left out, as the Dask engine leaves them; only asked for where there are such
        # files, so other scans are those cudf-polars was measured with.
        scan = {"extra_columns": "ignore"} if check_parquet_footers(source, files, field=field, polars=True) else {}
        hive = any("=" in part for part in os.path.dirname(files[0]).replace("\\", "/").split("/")[-8:])
        frame = _scan_hive(files, options, scan, scanned) if hive else pl.scan_parquet(scanned, storage_options=options, **scan)
    else:
        frame = _scan_text(source, scanned, options, field)
        if csv_rows_by_a_column and source.format == "csv":
            frame = counted_by_a_column(frame)
    if source.columns:
        frame = frame.select(list(source.columns))
    if source.format != "parquet":
        return frame, {}
    dates: frozenset[str] = frozenset()
    if pl.Datetime("ms") in frame.collect_schema().dtypes():  # maybe a date64, which pyarrow reads as a date
        dates = frozenset(column.name for column in parquet_schema(files)[0] if pa.types.is_date(column.type))
    return frame, read_casts(frame, exact_decimals=source.decimals == "exact", dates=dates)


def counted_by_a_column(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame``, a CSV scan, with its rows counted by parsing its first column.

    A query that reads no column of a CSV file (a row count) makes Polars count the file's line ends outside quotes, a
    stray quote (``ab"c``) included: one row short, silently. Parsing a column finds every row, or fails as
    :class:`CsvScanMiscount` where the two counts differ. A filter true on every row keeps that column in the scan.
    """
    first = pl.col(frame.collect_schema().names()[0])
    return frame.filter(first.is_null() | first.is_not_null())


def csv_read_without_a_column(spec: JobSpec, frame: pl.LazyFrame) -> bool:
    """Whether ``frame``, built from ``spec``, leaves some uncompressed CSV file of its sources with no column read
    (the row count :func:`counted_by_a_column` is for), or cannot tell. (A compressed file is read whole, all columns.)"""
    from spillway.jobs.read_progress import scanned_columns  # it reads the plan through Polars' node visitor

    files = [f for _, source in spec.source_fields() if source.format == "csv" for f in resolve_files(source) if not compressed(f)]
    if not files:
        return False
    scanned = scanned_columns(frame)
    return any(scanned.get(os.path.realpath(f), frozenset()) == frozenset() for f in files)


def _scan_text(source: SourceSpec, files: list[str], options: dict[str, str] | None, field: str) -> pl.LazyFrame:
    """A CSV or JSON-lines source read in its read types (:func:`jobs.sources.text_read_types`), the ones the checker
    and the Dask engine use: nothing is inferred here, so a value further on that a type cannot hold fails the query
    (:func:`write_output` names it) instead of changing the column's type on this engine only."""
    types = text_read_types(source, files[0], field=field)
    schema = {column: READ_TYPES[read_type] for column, read_type in types.items()}
    check_csv_headers(source, files, field=field)
    if any(compressed(f) for f in files):  # Polars' scans read no bzip2, xz…: such sources are read whole, decompressed
        return pl.concat([_read_text_now(source.format, f, types, field).lazy() for f in files], how="vertical")
    if source.format == "jsonl":
        return pl.scan_ndjson(files, schema=schema, storage_options=options)
    # Every column typed by name; without inference, one the schema missed would be text. An empty file is no rows.
    return pl.scan_csv(files, schema_overrides=schema, infer_schema=False, storage_options=options, raise_if_empty=False)


def _read_text_now(format: str, path: str, types: dict[str, str], field: str) -> pl.DataFrame:
    """A whole CSV or JSON-lines file read now, decompressed (the data travels in the plan); a checked one from the fd
    :func:`open_checked` gives, others through fsspec."""
    checked = checked_file(path)
    codec = infer_compression(path)
    with os.fdopen(open_checked(checked), "rb") if checked is not None else fsspec.open(path, "rb", **storage_options(path)).open() as raw:
        handle = fsspec.compression.compr[codec](raw, mode="rb") if codec else raw
        data = handle.read()
    schema = {column: READ_TYPES[read_type] for column, read_type in types.items()}
    if not data.strip():
        return pl.DataFrame(schema=schema)  # an empty file: no rows (a CSV file has no header either)
    try:
        if format == "csv":
            return pl.read_csv(io.BytesIO(data), schema_overrides=schema, infer_schema=False)
        return pl.read_ndjson(io.BytesIO(data), schema=schema)
    except READ_FAILURES as exc:
        error = parse_read_error(str(exc))
        if error is None:
            raise unreadable(path, format, str(exc), field) from None
        column = refusing_column(data, error, types, str(exc))
        raise read_type_mismatch(column, path, error.read_type, error.value, field) from None


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


def failing_file(exc: Exception, checked: tuple[CheckedFile, ...]) -> UnreadableSource:
    """``exc``, Polars failing to read a CSV or JSON-lines file (:func:`file_failure`), as the error naming the first of
    the job's ``checked`` files that fails so when read alone (each read again as text: only when a job fails); the
    file unnamed where none does (an object store's, or one that fails only beside the others). A CSV file only Polars'
    scan miscounts is :class:`CsvScanMiscount` (:func:`scan_miscount`)."""
    if (miscounted := scan_miscount(exc, checked)) is not None:
        return miscounted
    for file in checked:
        format = next((f for f in ("csv", "jsonl") if file.path.endswith(SUFFIXES[f])), None)
        if format is None:
            continue
        try:
            if format == "csv":
                pl.read_csv(file.path, infer_schema=False, raise_if_empty=False)
            else:
                pl.read_ndjson(file.path, infer_schema_length=None)
        except READ_FAILURES:  # read as text (or every row's own type), only the file itself can fail
            return unreadable(file.path, format, str(exc), file.field.removesuffix(".path"))
    return unreadable(None, None, str(exc), None)


#: Polars' parallel CSV scan finding more rows in a piece of a file than its quote-aware count of line ends said.
_MISCOUNT = re.compile(r"CSV malformed: expected \d+ rows, actual \d+ rows")


def scan_miscount(exc: Exception, checked: tuple[CheckedFile, ...]) -> CsvScanMiscount | None:
    """``exc`` as :class:`CsvScanMiscount` naming the first of the job's ``checked`` CSV files Polars' scan miscounts
    when it scans that file alone; None when ``exc`` is not that failure or no file fails so alone."""
    if not _MISCOUNT.search(str(exc)):
        return None
    for file in checked:
        if not file.path.endswith(SUFFIXES["csv"]) or compressed(file.path):  # compressed files are read whole, never scanned
            continue
        try:  # one column: with all of them, a field the quote left open can fail to parse before the rows are counted
            pl.scan_csv(file.path, infer_schema=False, raise_if_empty=False).select(pl.nth(0)).collect()
        except pl.exceptions.ComputeError as alone:
            if (found := _MISCOUNT.search(str(alone))) is not None:
                return csv_miscount(file.path, found.group(0), file.field)
    return None


def csv_miscount(path: str, counts: str, field: str | None, polars_only: str | None = None) -> CsvScanMiscount:
    """The error naming a CSV file Polars' scan miscounts (``counts``: its words), and what to do: run it on the Dask
    engine, or, where ``polars_only`` says why the job cannot run there, fix the file's quotes."""
    what = (f"'{path}' cannot be read by Polars' CSV scan: {counts} (a quote character inside an unquoted field, or one "
            "left open, which Polars' parallel scan miscounts); ")
    if polars_only is None:
        what += ("the Dask engine reads CSV files in blocks with Polars' whole-text reader and may read it: set engine: dask "
                 "(engine: auto runs such a job there)")
    else:
        what += f"{polars_only}, so the Dask engine cannot read it instead: quote such a field whole, its quotes doubled (\"ab\"\"c\")"
    error = CsvScanMiscount(what, field=field)
    error.path, error.counts = path, counts  # kept when the error travels from the worker (an exception pickles its __dict__)
    return error


def _scan_hive(files: list[str], options: dict[str, str] | None, scan: dict[str, Any], scanned: list[str]) -> pl.LazyFrame:
    """Hive ``key=value/`` folders as columns: one scan per folder, its values as typed literals.

    The keys are typed as the checker types them (:func:`jobs.sources.parquet_schema`: int64 where
    every folder's value is an integer, else text), as the Dask engine reads them: Polars' own hive
    scan inferred floats, dates and booleans from the names (and failed on some). cudf-polars 26.10
    refuses hive-partitioned scans: written this way, a job over a partitioned dataset runs on the GPU.
    The keys are typed from all ``files``; the frame scans those of ``scanned``.
    """
    schema, keys = parquet_schema(files)
    types = {key: pl.Int64() if pa.types.is_integer(schema.field(key).type) else pl.String() for key in keys}
    by_folder: dict[str, list[str]] = {}
    for path in scanned:
        by_folder.setdefault(path.replace("\\", "/").rsplit("/", 1)[0], []).append(path)
    frames = []
    for group in by_folder.values():
        texts = dict(hive_folders(group[0]))
        literals = [pl.lit(hive_value(texts.get(key), types[key]), dtype=types[key]).alias(key) for key in keys]
        frames.append(pl.scan_parquet(group, storage_options=options, **scan).with_columns(literals))
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def hive_value(text: str | None, dtype: pl.DataType) -> Any:
    """A folder's ``value`` as a column of ``dtype`` (Int64 or String) holds it: %-unescaped, Hive's null marker a null."""
    if text is None or text == HIVE_NULL:
        return None
    value = unquote(text)
    return int(value) if dtype == pl.Int64 else value


def check_csv_writable(table: pl.DataFrame) -> None:
    """Refuse, before anything is written, a column a CSV file cannot hold (a list, an array, a struct, bytes); Polars'
    writer failed on it with a message naming none."""
    held = {pl.List: "a list", pl.Array: "an array", pl.Struct: "a struct", pl.Binary: "bytes"}
    for name, dtype in table.schema.items():
        if (what := next((text for kind, text in held.items() if isinstance(dtype, kind) or dtype == kind), None)) is not None:
            raise SpecError(f"column '{name}' holds {what} ({dtype}), which a CSV sink cannot hold: write a parquet sink "
                            "(format: parquet), or leave the column out with a select step", field="sink.format")


def partition_directory(names: list[str], values: tuple[Any, ...]) -> str:
    """The hive directory ``name=value/...`` for one partition, every part %-escaped.

    A null is Hive's ``__HIVE_DEFAULT_PARTITION__``.
    """
    parts = []
    for name, value in zip(names, values, strict=True):
        text = HIVE_NULL if value is None else escaped_in_partition(str(value))
        parts.append(checked_folder_name(name, f"{escaped_in_partition(name)}={text}"))
    return "/".join(parts)


#: The longest folder name file systems take (ext4, xfs, APFS, NTFS: 255 bytes).
MAX_FOLDER_NAME = 255


def checked_folder_name(column: str, folder: str) -> str:
    """``folder``, the hive folder of a value of ``column``; refused (both engines) when no file system takes its length."""
    if len(folder.encode()) > MAX_FOLDER_NAME:
        raise SpecError(f"a value of partition column '{column}' makes the folder name '{folder[:60]}…' of {len(folder.encode())} bytes, "
                        f"over the {MAX_FOLDER_NAME} a file system takes; partition on a column of shorter values", field="sink.partition_on")
    return folder


#: Hive's folder name for a null partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: The folder name of a value that is that text (:func:`escaped_in_partition`).
ESCAPED_HIVE_NULL = "%5F" + HIVE_NULL[1:]


def escaped_in_partition(text: str) -> str:
    """``text`` as it appears in a hive folder's name: every character but letters, digits and `` _-.+,@~`` %-escaped,
    so a value or a column name never forms a path of its own (``/``, ``..``) nor another ``key=value``. The text
    ``__HIVE_DEFAULT_PARTITION__`` itself gets its first character escaped: unescaped, it is the null's folder, and the
    rows of both would share one folder, the ones written first lost."""
    return ESCAPED_HIVE_NULL if text == HIVE_NULL else quote(text, safe=_SAFE_IN_PARTITION)


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
    except READ_FAILURES as exc:
        verify_checked(target.checked)  # the files read again to name the value must still be those checked
        if isinstance(exc, pl.exceptions.ComputeError) and (named := named_read_error(exc, target.checked)) is not None:
            raise named from None
        if file_failure(exc):
            raise failing_file(exc, target.checked) from None
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
        check_csv_writable(table)
        with _open(target.path(), target.root) as raw:
            handle = gzip.open(raw, "wb") if sink.codec == "gzip" else raw
            try:
                table.write_csv(handle)
            finally:
                if handle is not raw:
                    handle.close()
    return table.height
