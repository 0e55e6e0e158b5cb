"""Finding source files and reading their schema, cheaply and before any cluster work.

Paths are local or object-store URLs (``s3://bucket/prefix/*.parquet``); both are
listed here, on the service, with the options of :mod:`jobs.storage`.

Parquet sources are opened as a pyarrow dataset with hive partitioning, the way
``dask.dataframe.read_parquet`` opens them, so ``key=value`` folders show up as
columns here too. :func:`plain_types` says which columns Spillway reads as plainer
types than the files hold (see its docstring).
"""

from __future__ import annotations

import functools
import glob
import os

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
from fsspec import AbstractFileSystem

from spillway.jobs.errors import SourceNotFound, SpecError, SpillwayError, UnknownColumn
from spillway.jobs.sandbox import checked_files
from spillway.jobs.spec import SourceSpec
from spillway.jobs.storage import MANIFEST_NAME, filesystem, is_url, load_manifest, storage_options

#: Column name → coarse kind ("numeric", "string", "datetime", "bool", "other", "unknown").
Schema = dict[str, str]

_SUFFIXES = {
    "parquet": (".parquet", ".parq", ".pq"),
    "csv": (".csv", ".csv.gz", ".tsv"),
    "jsonl": (".jsonl", ".ndjson", ".json"),
}


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
    files = _url_files(source, field) if is_url(source.path) else _local_files(source, field)
    if not files:
        raise SourceNotFound(f"no {source.format} file matches '{source.path}'", field=f"{field}.path")
    return checked_files(files, field=f"{field}.path")


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
    return parts[-1].endswith(_SUFFIXES[format]) and not any(part.startswith(("_", ".")) for part in parts)


def _manifest_files(fs: AbstractFileSystem, directory: str, source: SourceSpec, field: str) -> list[str] | None:
    try:
        manifest = load_manifest(fs, directory)
    except ValueError as exc:
        raise SpecError(f"'{source.path}' has an unreadable {MANIFEST_NAME}: {exc}", field=f"{field}.path") from exc
    if manifest is None:
        return None
    # Manifest order is the order the data was committed in (and, within a job, partition order).
    return [f"{directory.rstrip('/')}/{f.path}" for f in manifest.files if f.path.endswith(_SUFFIXES[source.format])]


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
      them, so they order, compare and compute like any column.

    The first two are :func:`plain_arrow_type` in pandas terms; a reader that holds Arrow
    tables converts them there (``jobs.dask_read`` does on pandas), not through Python objects.
    """
    casts: dict[str, object] = {}
    for field in schema:
        plain = plain_arrow_type(field.type)
        if plain is not None:
            casts[field.name] = pd.api.types.pandas_dtype(plain.to_pandas_dtype())
        elif field.name in partition_columns:
            casts[field.name] = str if arrow_kind(field.type) == "string" else field.type.to_pandas_dtype()
    return casts


def plain_arrow_type(dtype: pa.DataType) -> pa.DataType | None:
    """The Arrow type Spillway reads a file's ``dtype`` as, or None where it reads it as it is.

    Decimals become float64 and dates timestamp[us]; :func:`plain_types` says why.
    """
    if pa.types.is_decimal(dtype):
        return pa.float64()
    if pa.types.is_date(dtype):
        return pa.timestamp("us")
    return None


#: Rows of a CSV or JSON-lines file's head read for its columns' kinds and read types.
TEXT_HEAD_ROWS = 1000


def read_text_head(format: str, path: str, options: dict[str, object] | None) -> pd.DataFrame:
    """The first :data:`TEXT_HEAD_ROWS` rows of a CSV or JSON-lines file, in pandas' nullable dtypes.

    Nullable inference tells integers with an empty field (``Int64``) and bools with one
    (``boolean``) apart; pandas' default reads them as float64 and object. ``options`` are
    the fsspec options (None for a local path: pandas refuses options with one).
    """
    if format == "csv":
        return pd.read_csv(path, nrows=TEXT_HEAD_ROWS, storage_options=options, dtype_backend="numpy_nullable")
    return pd.read_json(path, lines=True, nrows=TEXT_HEAD_ROWS, storage_options=options, dtype_backend="numpy_nullable")


def text_read_dtypes(head: pd.DataFrame, format: str) -> dict[str, str]:
    """Column → the pandas dtype the Dask engine reads a CSV or JSON-lines column as, where pandas' own
    inference differs from Polars' (which infers from the whole file): from :func:`read_text_head`'s rows.

    * integers → ``Int64``: pandas reads one with an empty field as float64, and a block
      without one as int64;
    * bools → ``boolean``: pandas reads ``true``/``false`` with a null as float64 (JSON) or
      as object text (CSV), and a block without one as bool; Polars reads them as Boolean;
    * a CSV column without a value → text (``string``), as Polars reads it (pandas: float64).

    A JSON-lines column without a value is left as pandas reads it (float64; Polars: Null).
    """
    dtypes: dict[str, str] = {}
    for name, dtype in head.dtypes.items():
        if format == "csv" and len(head) and bool(head[name].isna().all()):
            dtypes[str(name)] = "string"
        elif isinstance(dtype, pd.Int64Dtype):
            dtypes[str(name)] = "Int64"
        elif isinstance(dtype, pd.BooleanDtype):
            dtypes[str(name)] = "boolean"
    return dtypes


def text_kinds(head: pd.DataFrame, format: str) -> Schema:
    """The kinds of a CSV or JSON-lines file's columns, from :func:`read_text_head`'s rows, as both engines read them."""
    read = text_read_dtypes(head, format)
    kinds: Schema = {}
    for name, dtype in head.dtypes.items():
        if str(name) in read:
            kinds[str(name)] = pandas_kind(read[str(name)])
        elif len(head) and bool(head[name].isna().all()):  # JSON lines without a value: float64 on pandas, as its kind always was
            kinds[str(name)] = "numeric"
        else:
            kinds[str(name)] = pandas_kind(dtype)
    return kinds


def read_arrow_type(dtype: pa.DataType) -> pa.DataType | None:
    """The Arrow type both engines read a parquet column of ``dtype`` as, or None where they read it as it is.

    :func:`plain_arrow_type`'s, and a column of Arrow type null (a file's column whose every value is
    null, written without a type) as text: Polars' Null and pandas' object columns of None took no
    string function, and compared differently. Its kind stays "other" (:func:`arrow_kind`).
    """
    return pa.string() if pa.types.is_null(dtype) else plain_arrow_type(dtype)


def read_schema(source: SourceSpec, *, field: str = "source") -> Schema:
    """Column names and kinds of a source, read from the first file's footer or header.

    Raises
    ------
    SourceNotFound
        If nothing matches the path.
    SpecError
        If the first file cannot be read as the declared format, or ``columns``
        names a column the file does not have.
    """
    files = resolve_files(source, field=field)
    first = files[0]
    try:
        if source.format == "parquet":
            schema = {f.name: arrow_kind(f.type) for f in parquet_schema(files)[0]}
        else:
            head = read_text_head(source.format, first, storage_options(first) or None)
            schema = text_kinds(head, source.format)
    except (OSError, ValueError, pa.ArrowException, pd.errors.ParserError) as exc:
        raise SpecError(f"cannot read '{first}' as {source.format}: {exc}", field=f"{field}.path") from exc
    if source.columns is not None:
        missing = [c for c in source.columns if c not in schema]
        if missing:
            raise UnknownColumn(
                f"column '{missing[0]}' is not in {first}; it has: {', '.join(schema)}",
                field=f"{field}.columns",
            )
        schema = {c: schema[c] for c in source.columns}
    return schema
