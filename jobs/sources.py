"""Finding source files and reading their schema, cheaply and before any cluster work.

Paths are local or object-store URLs (``s3://bucket/prefix/*.parquet``); both are
listed here, on the service, with the options of :mod:`jobs.storage`.

Parquet sources are opened as a pyarrow dataset with hive partitioning, the way
``dask.dataframe.read_parquet`` opens them, so ``key=value`` folders show up as
columns here too. :func:`plain_types` says which columns Spillway reads as plainer
types than the files hold (see its docstring). CSV and JSON-lines files carry no types:
:func:`text_read_types` decides them once, for the checker and both engines.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import glob
import io
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
from fsspec import AbstractFileSystem

from spillway.jobs.errors import ReadTypeMismatch, SourceNotFound, SpecError, SpillwayError, UnknownColumn
from spillway.jobs.parquet_footers import check_parquet_footers
from spillway.jobs.sandbox import checked_files
from spillway.jobs.spec import SourceSpec
from spillway.jobs.storage import MANIFEST_NAME, filesystem, is_url, load_manifest, storage_options
from spillway.jobs.text_reading import HEADER_BYTES, csv_header_of, head_readable_types, header_problem, unreadable

#: Column name → coarse kind ("numeric", "string", "datetime", "bool", "binary", "other", "unknown").
Schema = dict[str, str]

#: The file name endings of each format: a directory's files of a source, and the format of a listed file.
SUFFIXES = {
    "parquet": (".parquet", ".parq", ".pq"),
    "csv": (".csv", ".csv.gz", ".tsv"),
    "jsonl": (".jsonl", ".ndjson", ".json"),
}


#: (format, path) → the files :func:`resolve_files` listed, while :func:`files_listed_once` is on.
_LISTED: contextvars.ContextVar[dict[tuple[str, str], tuple[str, ...]] | None] = contextvars.ContextVar("spillway_listed", default=None)


@contextlib.contextmanager
def files_listed_once() -> Iterator[None]:
    """Within it, each source path is listed (and checked) once: planning a job asks for a source's files
    for its paths' check, its schema, its scan, its size and its progress (TPC-H q05: 30 listings of 6
    sources, each a directory walk, a manifest probe and the data roots' checks). For one pass of planning only:
    a file may be swapped for a link later, and each open checks it again (jobs.safe_open)."""
    token = _LISTED.set({})
    try:
        yield
    finally:
        _LISTED.reset(token)


def resolve_files(source: SourceSpec, *, field: str = "source") -> list[str]:
    """The files a source reads, in name order; a directory means every data file inside it.

    A directory holding ``_manifest.json`` (a Spillway sink) means exactly the files
    that manifest lists, so a job reading another job's output sees its last commit
    and never the part files of a commit still in progress. Paths come back as the
    source gave them: local paths, or URLs for an object store; while a job is planned under
    :func:`jobs.sandbox.enforce_roots`, local paths come back resolved (links followed), each
    checked to lie inside the data roots, so both engines read what was checked.

    Raises
    ------
    SourceNotFound
        If the path, directory or glob matches no file.
    SpecError
        If the directory's manifest cannot be read.
    PathNotAllowed
        If a file now leads outside the enforced data roots.
    """
    listed = _LISTED.get()
    if listed is not None and (source.format, source.path) in listed:
        return list(listed[source.format, source.path])
    files = _url_files(source, field) if is_url(source.path) else _local_files(source, field)
    if not files:
        raise SourceNotFound(f"no {source.format} file matches '{source.path}'", field=f"{field}.path")
    files = checked_files(files, field=f"{field}.path")
    if listed is not None:
        listed[source.format, source.path] = tuple(files)
    return files


def _local_files(source: SourceSpec, field: str) -> list[str]:
    path = os.path.expanduser(source.path)
    if not os.path.isdir(path):
        return sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
    listed = _manifest_files(filesystem(path)[0], path, source, field)
    if listed is not None:
        return listed
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(path)
        for name in names
        if _is_data_file(os.path.relpath(os.path.join(root, name), path), source.format)
    )


def _url_files(source: SourceSpec, field: str) -> list[str]:
    fs, path = filesystem(source.path, field=f"{field}.path")
    try:
        if any(c in path for c in "*?["):
            found = sorted(p for p, info in fs.glob(path, detail=True).items() if info["type"] == "file")
        elif fs.isdir(path):
            listed = _manifest_files(fs, path, source, field)
            found = listed if listed is not None else sorted(p for p in fs.find(path) if _is_data_file(p[len(path) + 1 :], source.format))
        else:
            found = [path] if fs.isfile(path) else []
    except FileNotFoundError:  # no such bucket
        found = []
    except SpillwayError:
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, no permission, no credentials: each store has its own error types
        raise SpecError(f"cannot list '{source.path}': {exc}", field=f"{field}.path") from exc
    return [fs.unstrip_protocol(p) for p in found]


def _is_data_file(relative: str, format: str) -> bool:
    # Dask's rule: names starting with '_' or '.' (markers, staging, metadata) are not data.
    parts = relative.replace(os.sep, "/").split("/")
    return parts[-1].endswith(SUFFIXES[format]) and not any(part.startswith(("_", ".")) for part in parts)


def _manifest_files(fs: AbstractFileSystem, directory: str, source: SourceSpec, field: str) -> list[str] | None:
    try:
        manifest = load_manifest(fs, directory)
    except ValueError as exc:
        raise SpecError(f"'{source.path}' has an unreadable {MANIFEST_NAME}: {exc}", field=f"{field}.path") from exc
    if manifest is None:
        return None
    # Manifest order is the order the data was committed in (and, within a job, partition order).
    return [f"{directory.rstrip('/')}/{f.path}" for f in manifest.files if f.path.endswith(SUFFIXES[source.format])]


def arrow_kind(dtype: pa.DataType) -> str:
    """The coarse kind of an Arrow type, enough to check aggregations."""
    if pa.types.is_boolean(dtype):
        return "bool"
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return "numeric"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_dictionary(dtype) or _is_string_view(dtype):
        return "string"
    if pa.types.is_timestamp(dtype) or pa.types.is_date(dtype):
        return "datetime"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        return "binary"
    return "other"


def _is_string_view(dtype: pa.DataType) -> bool:
    # string_view (what tpchgen-cli writes) has a type test only from pyarrow 16 on.
    test = getattr(pa.types, "is_string_view", None)
    return bool(test and test(dtype))


def pandas_kind(dtype: object) -> str:
    """The coarse kind of a pandas dtype."""
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_numeric_dtype(dtype):
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "datetime"
    if pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype):
        return "string"
    return "other"


def parquet_schema(files: list[str]) -> tuple[pa.Schema, list[str]]:
    """The Arrow schema of parquet ``files`` with any hive partition columns, and those columns' names.

    The footer of the first file is read, and the paths are parsed for ``key=value``
    folders, as dask's reader does. Local files' answers are kept while the first file's
    size, modification time and inode stay the same: a job's schema is asked for at submit
    and again when it starts, and a large file's footer costs tens of milliseconds each time
    (TPC-H SF 100 lineitem: bench/RESULTS.md).
    """
    if is_url(files[0]):
        return _read_parquet_schema(tuple(files))
    try:
        version = file_version(files[0])
    except OSError:
        return _read_parquet_schema(tuple(files))  # let the reader raise its own error
    return _cached_parquet_schema(tuple(files), version)


def file_version(path: str) -> tuple[int, int, int]:
    """What identifies one version of a local file for a cache: size, modification time, inode."""
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


@functools.lru_cache(maxsize=256)
def _cached_parquet_schema(files: tuple[str, ...], first_file_stat: tuple[int, int, int]) -> tuple[pa.Schema, list[str]]:
    return _read_parquet_schema(files)


def _read_parquet_schema(files: tuple[str, ...]) -> tuple[pa.Schema, list[str]]:
    if is_url(files[0]):
        fs, _ = filesystem(files[0])
        dataset = pads.dataset([fs._strip_protocol(f) for f in files], format="parquet", partitioning="hive", filesystem=fs)
    else:
        dataset = pads.dataset(list(files), format="parquet", partitioning="hive")
    physical = next(dataset.get_fragments()).physical_schema.names
    return dataset.schema, [name for name in dataset.schema.names if name not in physical]


def plain_types(schema: pa.Schema, partition_columns: list[str]) -> dict[str, object]:
    """Column → the dtype Spillway reads it as, where that differs from the file's.

    * decimals → float64: pandas' Arrow decimals overflow their precision in products
      and means, and cuDF's support only some operations; float64 keeps about 15
      significant digits.
    * dates → datetime64[us]: so they compare with ``date("...")`` literals, take
      intervals and ``year()`` alike on pandas and cuDF; microseconds reach far past
      sentinels such as 9999-12-31.
    * hive partition columns → their plain type, not the categorical dask makes of
      them, so they order, compare and compute like any column; integer keys int64.

    The first two are :func:`plain_arrow_type` in pandas terms; a reader that holds Arrow
    tables converts them there (``jobs.dask_read`` does on pandas), not through Python objects.
    """
    casts: dict[str, object] = {}
    for field in schema:
        plain = plain_arrow_type(field.type)
        if plain is not None:
            casts[field.name] = pd.api.types.pandas_dtype(plain.to_pandas_dtype())
        elif field.name in partition_columns and pa.types.is_integer(field.type):
            casts[field.name] = np.dtype("int64")  # pyarrow infers int32 from folder names; Polars' hive scan Int64
        elif field.name in partition_columns:
            casts[field.name] = str if arrow_kind(field.type) == "string" else field.type.to_pandas_dtype()
    return casts


def plain_arrow_type(dtype: pa.DataType) -> pa.DataType | None:
    """The Arrow type Spillway reads a file's ``dtype`` as, or None where it reads it as it is.

    Decimals become float64 and dates timestamp[us]; :func:`plain_types` says why. Durations in
    seconds become milliseconds, the coarsest unit Polars has (it reads them so).
    """
    if pa.types.is_decimal(dtype):
        return pa.float64()
    if pa.types.is_date(dtype):
        return pa.timestamp("us")
    if pa.types.is_duration(dtype) and dtype.unit == "s":
        return pa.duration("ms")
    return None


#: Rows of a CSV or JSON-lines file's head whose values decide its columns' types, where its source declares none.
#: Reading 1000 rows of 8 columns takes 1.4 ms (CSV) and 4.5 ms (JSON lines); 10000, 3.8 ms and 48 ms (2026-12-05,
#: this machine's CPU). More rows would only move where a change of type is met, not whether: it fails the job
#: naming the column (:class:`ReadTypeMismatch`), and every job reads the head at submit and again when it starts.
TEXT_HEAD_ROWS = 1000

#: The pandas dtype the Dask engine (pandas) reads each read type as: integers and bools nullable (a null does
#: not make them floats or objects), text as dask's own Arrow strings. The names are those ``cast()`` takes.
PANDAS_READ_DTYPES: dict[str, Any] = {
    "int64": pd.Int64Dtype(), "int32": pd.Int32Dtype(), "float64": np.dtype("float64"), "float32": np.dtype("float32"),
    "bool": pd.BooleanDtype(), "datetime64[ns]": np.dtype("datetime64[ns]"), "string": pd.StringDtype("pyarrow"),
}

#: pandas' CSV options that read fields as Polars does: only an empty field is null (pandas' default also
#: nulls ``NA``, ``null``, ``n/a``…, which Polars reads as text, and then as a number it cannot parse).
CSV_NULLS: dict[str, Any] = {"keep_default_na": False, "na_values": [""]}


def read_type_mismatch(column: str | None, file: str | None, read_type: str, value: str | None, field: str | None) -> ReadTypeMismatch:
    """The one error both engines raise for a value of ``file``'s ``column`` that ``read_type`` cannot hold.

    ``field`` is the source's (``source``, ``sources.name``); None where the engine cannot tell which source
    it was (column and file likewise). The message says how the type was chosen and how to declare another.
    """
    what = f"column '{column}'" if column is not None else "a column"
    where = f" of '{file}'" if file is not None else ""
    holds = f" holds {value!r}, which" if value is not None else " holds a value that"
    example = column if column is not None else "the_column"
    return ReadTypeMismatch(
        f"{what}{where}{holds} its read type {read_type} cannot hold. A CSV or JSON-lines column's type comes from its "
        f"source's first file's first {TEXT_HEAD_ROWS} rows unless the source declares it: declare it in the source's types, "
        f"e.g. `types: {{{example}: string}}`",
        field=f"{field}.types" if field is not None else None,
    )


def text_read_types(source: SourceSpec, first: str, *, field: str = "source") -> dict[str, str]:
    """Column → the type both engines read a CSV or JSON-lines source's column as, in the file's column order:
    the type the source declares in ``types``, else the one :func:`inferred_text_types` gives its ``first`` file.
    A JSON-lines key that those rows do not hold is read where ``types`` declares it (after the others).

    Raises
    ------
    UnknownColumn
        If ``types`` names a column a CSV source's first file does not have.
    UnreadableSource
        If the first file's head cannot be read as its format.
    """
    try:
        inferred = inferred_text_types(source.format, first)
    except ValueError as exc:  # its head is no CSV or JSON lines both engines read alike (pandas' ParserError too)
        raise unreadable(first, source.format, str(exc), field) from None
    declared = source.types or {}
    for column in declared:
        if column not in inferred and source.format == "csv":
            raise UnknownColumn(f"types declares column '{column}', which {first} does not have; it has: {', '.join(inferred)}",
                                field=f"{field}.types.{column}")
    return {**{column: declared.get(column, read_type) for column, read_type in inferred.items()}, **declared}


def check_csv_headers(source: SourceSpec, files: list[str], *, field: str = "source") -> None:
    """Every local CSV file of ``source`` starts with its first file's header line (the same names, in the same order):
    both engines read a file's rows by it (the Dask engine each block after a file's first by position). An empty file
    has no header and passes. Files in an object store are not opened here; the engines check them as they read.

    Raises
    ------
    UnreadableSource
        Naming the first file whose header differs, and both headers.
    """
    if source.format != "csv" or len(files) < 2 or (first := csv_header(files[0])) is None:
        return
    for path in files[1:]:
        if not is_url(path) and (names := csv_header(path)) is not None and names != first:
            raise unreadable(path, "csv", f"its header ({', '.join(names)}) is not the first file's ({', '.join(first)}); "
                                          "every CSV file of a source starts with the same header", field)


def csv_header(path: str) -> list[str] | None:
    """The column names of a CSV file's header line (:func:`jobs.text_reading.csv_header_of`); a local file's answer is
    kept while it stays the same file version."""
    if is_url(path):
        return _read_csv_header(path)
    try:
        version = file_version(path)
    except OSError:
        return _read_csv_header(path)  # let the reader raise its own error
    names = _cached_csv_header(path, version)
    return list(names) if names is not None else None


@functools.lru_cache(maxsize=4096)
def _cached_csv_header(path: str, version: tuple[int, int, int]) -> tuple[str, ...] | None:
    names = _read_csv_header(path)
    return tuple(names) if names is not None else None


def _read_csv_header(path: str) -> list[str] | None:
    with fsspec.open(path, "rb", compression="infer", **storage_options(path)) as handle:
        return csv_header_of(handle.read(HEADER_BYTES))


def inferred_text_types(format: str, path: str) -> dict[str, str]:
    """Column → read type of a CSV or JSON-lines file, from its first :data:`TEXT_HEAD_ROWS` rows, in its column order.

    Integers are ``int64``, other numbers ``float64``, ``true``/``false`` ``bool`` (CSV: any case), and everything
    else ``string``: dates stay text, as does a column without a value in those rows (as a parquet column of
    type null, :func:`read_arrow_type`). JSON lines' columns are the keys those rows hold. A local file's answer
    is kept while it stays the same file version.
    """
    if is_url(path):
        return _read_text_types(format, path)
    try:
        version = file_version(path)
    except OSError:
        return _read_text_types(format, path)  # let the reader raise its own error
    return dict(_cached_text_types(format, path, version))  # a copy: callers may change theirs


@functools.lru_cache(maxsize=256)
def _cached_text_types(format: str, path: str, version: tuple[int, int, int]) -> dict[str, str]:
    return _read_text_types(format, path)


def _read_text_types(format: str, path: str) -> dict[str, str]:
    lines = _head_lines(path, storage_options(path), format)
    if format == "csv":
        names = csv_header_of(lines[0] if lines else b"")
        if names is not None and (problem := header_problem(names)) is not None:
            raise ValueError(problem)
        # index_col=False: a trailing comma on each row (and not on the header) is not an index column.
        head = pd.read_csv(io.BytesIO(b"".join(lines)), nrows=TEXT_HEAD_ROWS, dtype_backend="numpy_nullable", index_col=False, **CSV_NULLS)
        types = {str(name): _csv_type(head[name]) for name in head.columns}
    else:
        if not lines:  # as an empty CSV file has no header: the engines disagreed (no columns on Polars, an error on Dask)
            raise ValueError("it holds no JSON line to take the source's columns from (an empty file)")
        # Python's json keeps ``1.0`` a float and ``1`` an integer, as Polars' reader does (pandas' makes whole floats integers).
        types = _json_types([json.loads(line) for line in lines])
    return head_readable_types(format, b"".join(lines), types)


def _head_lines(path: str, options: dict[str, Any], format: str) -> list[bytes]:
    """A CSV file's header and first :data:`TEXT_HEAD_ROWS` lines, on to where no quoted field is left open (a CSV
    field may hold a newline); a JSON-lines file's first :data:`TEXT_HEAD_ROWS` lines that are not blank."""
    lines: list[bytes] = []
    wanted = TEXT_HEAD_ROWS + 1 if format == "csv" else TEXT_HEAD_ROWS
    quotes = 0
    with fsspec.open(path, "rb", compression="infer", **options) as handle:
        for line in _lines(handle):
            if format == "csv":
                lines.append(line)
                quotes += line.count(b'"')
            elif line.strip():
                lines.append(line)
            if len(lines) >= wanted and quotes % 2 == 0:
                break
    return lines


def _lines(handle: Any, chunk: int = 1 << 16) -> Iterator[bytes]:
    """The lines of a binary file, each with its ``\n``; one longer than :data:`HEADER_BYTES` is cut there (a file of
    lone-CR line endings is all one line: its header is refused). fsspec's object-store files take no ``readline`` limit."""
    buffered = b""
    while data := handle.read(chunk):
        buffered += data
        while (end := buffered.find(b"\n")) >= 0 or len(buffered) >= HEADER_BYTES:
            cut = end + 1 if 0 <= end < HEADER_BYTES else HEADER_BYTES
            yield buffered[:cut]
            buffered = buffered[cut:]
    if buffered:
        yield buffered


def _csv_type(column: pd.Series) -> str:
    if bool(column.isna().all()):
        return "string"
    if pd.api.types.is_bool_dtype(column.dtype):
        return "bool"
    if pd.api.types.is_integer_dtype(column.dtype):
        return "int64"
    return "float64" if pd.api.types.is_float_dtype(column.dtype) else "string"


def _json_types(records: list[Any]) -> dict[str, str]:
    values: dict[str, list[Any]] = {}
    for line, record in enumerate(records, 1):
        if not isinstance(record, dict):
            raise ValueError(f"line {line} is not a JSON object")
        for key, value in record.items():
            values.setdefault(key, []).append(value)
    return {column: _json_column_type(column_values) for column, column_values in values.items()}


def _json_column_type(values: Iterable[Any]) -> str:
    """The read type of JSON values: ``int64`` if every one (but nulls) is an integer, ``float64`` if each is a
    number, ``bool`` if each is ``true`` or ``false``, else ``string`` (text, mixed kinds, objects, only nulls)."""
    kinds = {_json_kind(value) for value in values if value is not None}
    if kinds == {"int"}:
        return "int64"
    if kinds and kinds <= {"int", "float"}:
        return "float64"
    return "bool" if kinds == {"bool"} else "string"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):  # before int: a bool is an int in Python
        return "bool"
    return "int" if isinstance(value, int) else "float" if isinstance(value, float) else "other"


def read_arrow_type(dtype: pa.DataType) -> pa.DataType | None:
    """The Arrow type both engines read a parquet column of ``dtype`` as, or None where they read it as it is.

    :func:`plain_arrow_type`'s, and a column of Arrow type null (a file's column whose every value is
    null, written without a type) as text: Polars' Null and pandas' object columns of None took no
    string function, and compared differently. Its kind stays "other" (:func:`arrow_kind`). A dictionary-encoded
    text column (pandas' category, Spark's dictionary pages) as plain text: pandas' categories sorted in the
    dictionary's order and refused comparisons and text functions that Polars' Categorical took.
    """
    if pa.types.is_null(dtype):
        return pa.string()
    if pa.types.is_dictionary(dtype) and (pa.types.is_string(dtype.value_type) or pa.types.is_large_string(dtype.value_type)):
        return pa.large_string()
    if pa.types.is_float16(dtype):  # as Polars reads it; pandas has no float16 index (a group or join key failed)
        return pa.float32()
    return plain_arrow_type(dtype)


def read_schema(source: SourceSpec, *, field: str = "source") -> Schema:
    """Column names and kinds of a source, read from the first file's footer or header.

    Raises
    ------
    SourceNotFound
        If nothing matches the path.
    SpecError
        If the first file cannot be read as the declared format, or ``columns`` or
        ``types`` names a column the file does not have.
    """
    files = resolve_files(source, field=field)
    first = files[0]
    try:
        if source.format == "parquet":
            schema = {f.name: arrow_kind(f.type) for f in parquet_schema(files)[0]}
            check_parquet_footers(source, files, field=field)
        else:
            schema = {column: pandas_kind(PANDAS_READ_DTYPES[t]) for column, t in text_read_types(source, first, field=field).items()}
            check_csv_headers(source, files, field=field)
    except (OSError, ValueError, pa.ArrowException, pd.errors.ParserError) as exc:  # unreadable_source, as every read error
        raise unreadable(first, source.format, str(exc) or type(exc).__name__, field) from exc
    if source.columns is not None:
        missing = [c for c in source.columns if c not in schema]
        if missing:
            raise UnknownColumn(
                f"column '{missing[0]}' is not in {first}; it has: {', '.join(schema)}",
                field=f"{field}.columns",
            )
        schema = {c: schema[c] for c in source.columns}
    return schema
