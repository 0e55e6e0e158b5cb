"""Reading a source's files into a lazy Dask dataframe (pandas or cuDF, from the dask config)."""

from __future__ import annotations

import io
import itertools
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import dask
import dask.dataframe as dd
import fsspec
from fsspec.utils import read_block
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

from spillway.jobs.errors import SpecError, TooManyPartitions
from spillway.jobs.parquet_footers import check_parquet_footers, hive_folders
from spillway.jobs.polars_io import ESCAPED_HIVE_NULL
from spillway.jobs.safe_open import PROTOCOL as CHECKED_PROTOCOL
from spillway.jobs.safe_open import RootBoundFileSystem, checked_url
from spillway.jobs.sandbox import checked_file
from spillway.jobs.sources import (PANDAS_READ_DTYPES, check_csv_headers, parquet_schema, plain_types, read_arrow_type, read_type_mismatch,
                                   resolve_files, text_read_types)
from spillway.jobs.spec import JobSpec, SourceSpec, blocksize_bytes
from spillway.jobs.storage import filesystem, is_url, storage_options
from spillway.jobs.text_reading import READ_FAILURES, READ_TYPES, compressed, csv_header_of, parse_read_error, refusing_column, unreadable

#: dask's default blocksize for CSV and JSON lines, which :func:`read_source` passes when a source sets none.
TEXT_BLOCKSIZE = "64MiB"


def read_source(source: SourceSpec, *, field: str = "source") -> dd.DataFrame:
    """A lazy dataframe over a source's files (the backend comes from the dask config).

    Parquet decimals, dates and hive partition columns are read as plainer types:
    see :func:`jobs.sources.plain_types`. On pandas the decimals and dates are converted
    in each partition's Arrow table (:class:`PlainArrowEngine`); what still differs (hive
    partition columns; everything on cuDF, whose reader gives decimals and dates natively)
    is cast afterwards. On pandas, integer columns of every format are read as pandas'
    nullable integers (``Int64``), so a column with nulls stays an integer, as on Polars
    and cuDF, whose integers hold nulls already. CSV and JSON lines are read on pandas in the
    types the checker gives them (:class:`TextBlockReader`). Object-store options go into the graph as
    ``storage_options``, so the workers open the files exactly as the service listed them.
    """
    files = resolve_files(source, field=field)
    options = storage_options(files[0]) or None
    checked = _checked_reads(files)
    if source.format == "parquet":
        check_parquet_footers(source, files, field=field)  # a later file's columns as the first's, or refused as on Polars
        engine = PlainArrowEngine if dask.config.get("dataframe.backend") == "pandas" else None
        where: dict[str, Any] = {"storage_options": options} if checked is None else {"filesystem": checked}
        schema, partitions = parquet_schema(files)
        if partitions and (spelled := next((f for f in files if any(v == ESCAPED_HIVE_NULL for _, v in hive_folders(f))), None)):
            # pyarrow undoes a folder's %-escapes before it looks for the null's name, so it would read this value as null.
            raise SpecError(f"'{spelled}' lies in a folder whose value is the text __HIVE_DEFAULT_PARTITION__ (written "
                            f"{ESCAPED_HIVE_NULL}), which the Dask engine would read as null: use engine: polars",
                            field=f"{field}.path")
        if partitions and engine is not None:
            # Hive keys in the types the checker gave them from every folder: dask inferred them file by file, so a
            # folder of the null key (__HIVE_DEFAULT_PARTITION__) alone failed, and text keys 01, 007 became 1 and null.
            where["dataset"] = {"partitioning": pads.HivePartitioning(pa.schema([schema.field(key) for key in partitions]))}
        if engine is not None and _has_int96(files[0]):
            # INT96 timestamps (Spark's, Impala's) in microseconds, as Polars reads them: in pyarrow's default, nanoseconds,
            # 9999-12-31 wrapped round silently to 1816-03-29. A partitioning object makes dask read through fragments,
            # which take the format's options (its plain file reads do not).
            dataset = where.setdefault("dataset", {})
            dataset["format"] = pads.ParquetFileFormat(read_options=pads.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
            dataset.setdefault("partitioning", pads.DirectoryPartitioning(pa.schema([])))
        # index=False: a pandas index stored in the file is a column (PlainArrowEngine), never the frame's index.
        frame = _read_parquet(files, columns=source.columns, blocksize=source.blocksize or "default", engine=engine, index=False, **where)
        plain = plain_types(schema, partitions)
        if engine is not None:  # pandas: a hive key of integers holds a null (Hive's null folder) as pandas' nullable Int64
            plain.update({key: pd.Int64Dtype() for key in partitions if plain.get(key) == np.dtype("int64")})
        casts = {column: dtype for column, dtype in plain.items() if column in frame.columns and frame[column].dtype != dtype}
        # A column of Arrow type null is read as text (jobs.sources.read_arrow_type): PlainArrowEngine converts it on
        # pandas; cuDF's reader gives it another type.
        casts.update({field.name: "str" for field in schema if pa.types.is_null(field.type) and field.name in frame.columns
                      and not pd.api.types.is_string_dtype(frame[field.name].dtype)})
        # One cast per column: a frame-wide astype would need every column, so dask could
        # no longer push a job's column projection into the read.
        return frame.assign(**{column: frame[column].astype(dtype) for column, dtype in casts.items()}) if casts else frame
    return _read_text(source, files, options, checked, field)


def _shown(url: str) -> str:
    """A block's file as a user names it: its path, without the checked reads' internal protocol."""
    return url.removeprefix(f"{CHECKED_PROTOCOL}://")


def _read_text(source: SourceSpec, files: list[str], options: dict[str, Any] | None, checked: RootBoundFileSystem | None,
               field: str) -> dd.DataFrame:
    """A CSV or JSON-lines source: on pandas, each block read by a :class:`TextBlockReader` in the source's read types
    (:func:`jobs.sources.text_read_types`), as the Polars engine reads them; on cuDF by dask-cudf's readers."""
    check_csv_headers(source, files, field=field)  # on cuDF too: a file of other columns is refused as on the other engines
    urls, options = _text_reads(files, options, checked)
    blocksize = source.blocksize or TEXT_BLOCKSIZE
    if dask.config.get("dataframe.backend") == "pandas":
        reader = TextBlockReader(source.format, text_read_types(source, files[0], field=field), options, field)
        fs, _ = filesystem(files[0])
        blocks = [TextBlock(url, start, length) for path, url in zip(files, urls, strict=True)
                  for start, length in _file_blocks(fs, path, source.format, blocksize)]
        frame = dd.from_map(reader, blocks, meta=reader.empty(reader.types), label=f"read-{source.format}", enforce_metadata=False)
    else:  # cuDF infers the types itself (its integers and bools hold nulls), but a declared type is read as declared
        declared = {"dtype": {column: "str" if t == "string" else t for column, t in source.types.items()}} if source.types else {}
        blocksize = None if any(map(compressed, files)) else blocksize  # dask's readers refuse to split a compressed file
        if source.format == "csv":
            frame = dd.read_csv(urls, usecols=source.columns, blocksize=blocksize, storage_options=options, **declared)
        else:
            frame = dd.read_json(urls, lines=True, blocksize=blocksize, storage_options=options, **declared)
    return frame[list(source.columns)] if source.columns else frame


@dataclass(frozen=True)
class TextBlock:
    """Bytes of a CSV or JSON-lines file: from ``start`` (or the line after it), ``length`` of them (to the end of the
    line they stop in); None: the whole file. A dataclass, not a tuple: dask reads tuples in task arguments as keys."""

    url: str
    start: int
    length: int | None


#: How much of a CSV file to be split into blocks is looked at for a quote character (:func:`_read_whole`).
QUOTE_PROBE_BYTES = 1 << 20


def _read_whole(fs: Any, path: str, size: int, format: str, blocksize: str) -> bool:
    """Whether a file is read as one block: a compressed file (its size is not its text's), and a CSV file to be split
    whose first MiB holds a quote character. Blocks start at a line break, and one inside a quoted field would start
    a block mid-field (a raw parse error, or a read_type_mismatch for a text no row holds), where the Polars engine
    reads every file whole; a file whose quotes begin only past its first MiB is still split (docs/spec.md, "CSV")."""
    if compressed(path):
        return True
    if format != "csv" or size < 2 * blocksize_bytes(blocksize):
        return False  # one block anyway
    with fs.open(path, "rb") as handle:
        return b'"' in handle.read(QUOTE_PROBE_BYTES)


def _file_blocks(fs: Any, path: str, format: str, blocksize: str) -> list[tuple[int, int | None]]:
    size = fs.size(path) or 0
    return _block_ranges(size, None if _read_whole(fs, path, size, format, blocksize) else blocksize)


def _block_ranges(size: int, blocksize: str | None) -> list[tuple[int, int | None]]:
    """A file of ``size`` bytes as ``size // blocksize`` blocks of about one length (at least one), as dask's
    ``read_bytes`` splits it (:func:`estimated_partitions` counts them so); the whole file without a blocksize."""
    if blocksize is None:
        return [(0, None)]
    count = max(1, size // blocksize_bytes(blocksize))
    bounds = [size * i // count for i in range(count + 1)]
    return [(start, end - start) for start, end in itertools.pairwise(bounds)]


def _checked_reads(files: list[str]) -> RootBoundFileSystem | None:
    """For local files checked against the data roots (a job the manager runs): the file system the
    workers open them with, walking each path from its root without following links; else None."""
    checked = [file for path in files if (file := checked_file(path)) is not None]
    return RootBoundFileSystem(tuple(checked)) if checked and len(checked) == len(files) else None


def _text_reads(files: list[str], options: dict[str, Any] | None, checked: RootBoundFileSystem | None) -> tuple[list[str], dict[str, Any] | None]:
    # dask's text readers take URLs and options, not a file system: name it by its protocol.
    if checked is None:
        return files, options
    return [checked_url(path) for path in files], {"checked": tuple(checked.checked.values())}


class _Unreadable(Exception):
    """A value of ``column`` that ``read_type`` cannot hold (``value``: its text), found in a block or a file."""

    def __init__(self, column: str, read_type: str, value: str) -> None:
        super().__init__(column, read_type, value)
        self.column, self.read_type, self.value = column, read_type, value


@dataclass(frozen=True)
class TextBlockReader:
    """The Dask engine's reader (on pandas) of a CSV or JSON-lines source's :class:`TextBlock`, in the source's read types
    (``types``: column → type name), of the columns a job reads: dask passes the ones it projects, as Polars reads
    only those, so a value neither engine reads fails neither.

    Both formats are parsed by Polars' readers, the ones the Polars engine reads them with, then handed to pandas: the
    same fields are numbers, bools, date-times and nulls on both engines, and a number's text in a ``string`` column is
    the same; Polars' CSV reader is also a few times pandas' speed. A value its column's type cannot hold
    raises :class:`jobs.errors.ReadTypeMismatch`, the error the Polars engine raises too, naming the column, the file
    of the block that holds it and the source's ``field``. ``options`` are the fsspec options the files are opened with.
    """

    format: str
    types: dict[str, str]
    options: dict[str, Any] | None
    field: str

    def __call__(self, block: TextBlock, columns: list[str] | None = None) -> pd.DataFrame:
        types = self.types if columns is None else {column: self.types[column] for column in columns}
        with fsspec.open(block.url, "rb", compression="infer", **(self.options or {})) as handle:
            data = handle.read() if block.length is None else read_block(handle, block.start, block.length, b"\n")
        first = block.start == 0
        # Blank lines are rows of nulls in a CSV file, as Polars' scan reads them; none in JSON lines. A file's first
        # block of nothing but blanks has no header: an empty file.
        if not data.strip() and (first or self.format == "jsonl"):
            return self.empty(types)
        if first and self.format == "csv" and (header := csv_header_of(data)) != list(self.types):
            raise unreadable(_shown(block.url), "csv", f"its header ({', '.join(header or [])}) is not the first file's ({', '.join(self.types)}); "
                                               "every CSV file of a source starts with the same header", self.field)
        # With no column asked for (a count of rows), one is read: a reader gives no rows without a column.
        read = types or dict(itertools.islice(self.types.items(), 1))
        try:
            frame = self._csv_block(data, read, first=first) if self.format == "csv" else self._json_block(data, read)
        except _Unreadable as bad:
            raise read_type_mismatch(bad.column, _shown(block.url), bad.read_type, bad.value, self.field) from None
        except READ_FAILURES as exc:
            raise unreadable(_shown(block.url), self.format, str(exc), self.field) from None
        return frame[list(types)]

    @staticmethod
    def empty(types: dict[str, str]) -> pd.DataFrame:
        """No rows, in ``types``: the metadata dask is given, so no file is read for it while the graph is built."""
        return pd.DataFrame({column: pd.Series([], dtype=PANDAS_READ_DTYPES[t]) for column, t in types.items()})

    def _csv_block(self, data: bytes, types: dict[str, str], *, first: bool) -> pd.DataFrame:
        # Parsed by Polars' reader, as the Polars engine parses the file: the same fields are numbers, bools, date-times
        # and nulls (only an empty field) on both engines. A file's later blocks have no header: they take the first
        # file's column names in order, as dask's reader does.
        schema = {column: READ_TYPES[t] for column, t in self.types.items()}
        try:
            if first:
                frame = pl.read_csv(io.BytesIO(data), columns=list(types), schema_overrides=schema, infer_schema=False)
            else:
                order = list(self.types)
                frame = pl.read_csv(io.BytesIO(data), has_header=False, schema=schema, columns=[order.index(c) for c in types])
        except pl.exceptions.ComputeError as exc:
            error = parse_read_error(str(exc))
            if error is None or error.column is None:
                raise
            raise _Unreadable(error.column, error.read_type, error.value) from None
        return self._pandas(frame, types)

    def _json_block(self, data: bytes, types: dict[str, str]) -> pd.DataFrame:
        try:
            frame = pl.read_ndjson(io.BytesIO(data), schema={column: READ_TYPES[t] for column, t in types.items()})
        except pl.exceptions.ComputeError as exc:
            error = parse_read_error(str(exc))
            # Polars names the value and the type, not the column: the one of that type that refuses it alone.
            column = error and refusing_column(data, error, types, str(exc))
            if error is None or column is None:
                raise
            raise _Unreadable(column, error.read_type, error.value) from None
        return self._pandas(frame, types)

    @staticmethod
    def _pandas(frame: pl.DataFrame, types: dict[str, str]) -> pd.DataFrame:
        table = frame.to_arrow(compat_level=pl.CompatLevel.oldest())  # large_string, which pandas' Arrow strings hold
        return table.to_pandas(types_mapper=_NULLABLE_TYPES.get).astype({c: PANDAS_READ_DTYPES[t] for c, t in types.items()})


def estimated_partitions(source: SourceSpec, *, field: str = "source") -> int:
    """How many partitions :func:`read_source` would make of ``source``, from its files' sizes alone.

    Nothing is read but parquet footers: CSV and JSON lines split each file into
    ``size // blocksize`` blocks (at least one; a gzipped file is one partition); parquet makes at least one partition per file, and with
    a ``blocksize`` about one per ``blocksize`` of each file, but no more than its row groups.
    An estimate of the reads only: the graph has more tasks, and :class:`cluster.plan.JobPlan`
    counts them.
    """
    files = resolve_files(source, field=field)
    fs, _ = filesystem(files[0])
    if source.format == "parquet" and source.blocksize is None:
        return len(files)
    block = blocksize_bytes(source.blocksize or TEXT_BLOCKSIZE)
    total = 0
    for path in files:
        if source.format != "parquet" and compressed(path):
            total += 1
            continue
        size = fs.size(path) or 0
        # dask's read_bytes widens the blocks to make size // blocksize of them; parquet is split at row groups, never inside one.
        parts = max(1, size // block if source.format != "parquet" else -(-size // block))
        if source.format == "parquet" and parts > 1:
            with fs.open(path, "rb") as handle:
                parts = min(parts, max(1, pq.ParquetFile(handle).metadata.num_row_groups))
        total += parts
    return total


def check_partitions(spec: JobSpec, limit: int) -> int:
    """The partitions the Dask engine would read ``spec``'s sources as, estimated before any graph is built.

    Raises
    ------
    TooManyPartitions
        Over ``limit``, naming the blocksize of the source that reads the most.
    """
    counts = {field: estimated_partitions(source, field=field) for field, source in spec.source_fields()}
    total = sum(counts.values())
    if total > limit:
        field = max(counts, key=counts.__getitem__)
        raise TooManyPartitions(
            f"the job's sources would be read as about {total} partitions (estimated from the files' sizes and blocksize; "
            f"{field} alone {counts[field]}), over the limit of {limit} (SPILLWAY_MAX_PARTITIONS): use a larger blocksize "
            "or fewer, larger files",
            field=f"{field}.blocksize",
        )
    return total


# dask builds parquet metadata through pandas and, with string conversion on, maps DATE
# and DECIMAL to pandas' ArrowDtype, which cudf.from_pandas refuses for dates (dask-cudf
# 26.10 under pandas 3). Without string conversion they come out as object columns, which
# dask-cudf then builds as empty cuDF columns; only the metadata changes: the partitions
# come from cuDF's own reader and are cast afterwards like every source (plain_types).
_CUDF_DATE_META_CONFIG = {"dataframe.convert-string": False}


def _has_int96(path: str) -> bool:
    """Whether the parquet file ``path`` (local; an object store's are not opened at planning) stores an INT96 timestamp."""
    if is_url(path):
        return False
    return any(column.physical_type == "INT96" for column in pq.read_metadata(path).schema)


def _read_parquet(files: list[str], **kwargs: Any) -> dd.DataFrame:
    """``dd.read_parquet``, working around cuDF's missing support for date32 metadata."""
    try:
        return dd.read_parquet(files, **kwargs)
    except NotImplementedError as exc:
        if dask.config.get("dataframe.backend") != "cudf" or "date" not in str(exc):
            raise
        with dask.config.set(_CUDF_DATE_META_CONFIG):
            return dd.read_parquet(files, **kwargs)


class PlainArrowEngine(ArrowDatasetEngine):
    """dask's pyarrow parquet engine, with decimals and dates made plain before ``to_pandas``.

    ``to_pandas`` gives decimals and dates as Python objects (``decimal.Decimal``,
    ``datetime.date``), or as pandas' Arrow dtypes whose ``astype`` goes through those
    objects: on TPC-H lineitem that conversion was nine tenths of a pandas job's time.
    Here they are converted in Arrow (:func:`plain_arrow_table`), so partitions and the
    metadata dask derives from an empty table come out float64 and datetime64[us].
    Integers come out as pandas' nullable integers (``to_pandas`` alone makes an integer
    column with a null float64, and one without int64, in the same source), bools as pandas'
    nullable ``boolean``, and a column of Arrow type null as text.
    """

    @classmethod
    def _determine_type_mapper(cls, **kwargs: Any) -> Any:
        mapper = super()._determine_type_mapper(**kwargs)

        def types_mapper(dtype: pa.DataType) -> Any:
            nullable = _NULLABLE_TYPES.get(dtype)
            if nullable is not None:
                return nullable
            if _kept_in_arrow(dtype):
                return pd.ArrowDtype(dtype)
            return None if mapper is None else mapper(dtype)

        return types_mapper

    @classmethod
    def _arrow_table_to_pandas(cls, arrow_table: pa.Table, categories: Any, **kwargs: Any) -> Any:
        # Without pandas' metadata, an index pandas stored in the file (__index_level_0__, a named index) stays a
        # column, as the checker and Polars read it: to_pandas made it the frame's index, which the sink dropped.
        return super()._arrow_table_to_pandas(_without_pandas_metadata(plain_arrow_table(arrow_table)), categories, **kwargs)


def _without_pandas_metadata(table: pa.Table) -> pa.Table:
    metadata = table.schema.metadata
    if not metadata or b"pandas" not in metadata:
        return table
    return table.replace_schema_metadata({key: value for key, value in metadata.items() if key != b"pandas"})


#: Arrow's integer types → pandas' nullable integer dtypes, which hold a null without becoming floats.
NULLABLE_INTEGERS: dict[pa.DataType, pd.api.extensions.ExtensionDtype] = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(), pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(),
}
_NUMPY_TO_NULLABLE = {np.dtype(arrow.to_pandas_dtype()): nullable for arrow, nullable in NULLABLE_INTEGERS.items()}
#: What :class:`PlainArrowEngine` maps Arrow types to: the nullable integers, and bools as pandas' nullable
#: ``boolean`` (``to_pandas`` makes a bool column with a null object, of True, False and None, while dask's
#: metadata said bool; casts and sums of it then failed).
_NULLABLE_TYPES: dict[pa.DataType, pd.api.extensions.ExtensionDtype] = {**NULLABLE_INTEGERS, pa.bool_(): pd.BooleanDtype()}


def _kept_in_arrow(dtype: pa.DataType) -> bool:
    """Arrow types that :class:`PlainArrowEngine` keeps as pandas' ``ArrowDtype``: times, bytes, lists, structs and
    maps. As numpy objects their type was lost (dask's metadata held placeholder objects), so the parquet sink could
    not write them (a raw ArrowInvalid) where the Polars engine wrote them."""
    return (pa.types.is_time(dtype) or pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype)
            or pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype)
            or pa.types.is_struct(dtype) or pa.types.is_map(dtype))


def nullable_integers(frame: dd.DataFrame, keep: Collection[str] = ()) -> dd.DataFrame:
    """``frame`` with its numpy integer columns (but those in ``keep``) as pandas' nullable integers, on pandas.

    A side of an outer join gets nulls in its unmatched rows, and pandas' merge makes a
    numpy integer column float64 for them (``3.0``); as ``Int64`` it stays an integer, as on
    Polars and SQL. cuDF's integers hold nulls already: a cuDF frame is returned as it is.
    """
    if not isinstance(frame._meta, pd.DataFrame):
        return frame
    casts = {column: _NUMPY_TO_NULLABLE[dtype] for column, dtype in frame.dtypes.items() if dtype in _NUMPY_TO_NULLABLE and column not in keep}
    return frame.astype(casts) if casts else frame


def integers_kept(frame: dd.DataFrame, inputs: dict[str, Any]) -> dd.DataFrame:
    """``frame`` with each column that was an integer in ``inputs`` an integer again, in every partition.

    On pandas the sides are nullable integers already (a no-op). On cuDF (26.10, H200,
    2026-12-02) an outer merge's partition holds a float64 count where dask's meta says int64,
    so a ``cast(n, 'string')`` after it gave ``'3.0'``; cast back, its nulls stay nulls.
    """
    if isinstance(frame._meta, pd.DataFrame):
        return frame
    integers = {column: dtype for column, dtype in inputs.items() if column in frame.columns and getattr(dtype, "kind", "?") in "iu"}
    if not integers:
        return frame
    return frame.map_partitions(_as_integers, integers, meta=frame._meta.astype(integers))


def _as_integers(part: Any, integers: dict[str, Any]) -> Any:
    floats = {column: dtype for column, dtype in integers.items() if part[column].dtype.kind == "f"}
    if not floats:
        return part
    # A NaN would cast to int64's minimum: nulls only (a float made of integers holds no other NaN).
    return part.assign(**{column: part[column].nans_to_nulls().astype(dtype) for column, dtype in floats.items()})


def plain_arrow_table(table: pa.Table) -> pa.Table:
    """``table`` with every column of :func:`jobs.sources.read_arrow_type` converted to that type."""
    for index, field in enumerate(table.schema):
        if _kept_in_arrow(field.type):  # in the Arrow type Polars holds it in (large_binary, time64[ns], …), as it writes it
            column = pl.from_arrow(table.column(index)).to_arrow()
            table = table.set_column(index, pa.field(field.name, column.type, field.nullable, field.metadata), column)
            continue
        plain = read_arrow_type(field.type)
        if plain is None:
            continue
        column = table.column(index)
        if pa.types.is_decimal(field.type):
            column = pa.chunked_array([_decimal_to_float64(chunk) for chunk in column.chunks], pa.float64())
        else:
            column = pc.cast(column, plain)
        table = table.set_column(index, pa.field(field.name, plain, field.nullable, field.metadata), column)
    return table


# 10**15 < 2**53: an unscaled decimal of up to 15 digits is an exact double, and dividing
# it by an exact power of ten rounds once, to the double nearest the decimal's value.
_EXACT_DIGITS = 15


def _decimal_to_float64(array: pa.Array) -> pa.Array:
    """A decimal array as float64, each value the double nearest it (as ``float(Decimal)`` gives).

    Arrow's own cast is not correctly rounded: it misses the nearest double by one unit in
    the last place for about one TPC-H price in seven (32986.52 becomes 32986.520000000004).
    Up to 15 digits of decimal128 the unscaled integers are read from the data buffer (the
    low 8 of each value's 16 little-endian bytes) and divided by 10**scale in numpy; wider
    decimals go through Arrow's decimal → string → float64 casts, whose parsing rounds
    correctly too.
    """
    dtype = array.type
    if len(array) == 0:
        return pa.array([], pa.float64())
    if not (pa.types.is_decimal128(dtype) and dtype.precision <= _EXACT_DIGITS and sys.byteorder == "little"):
        return pc.cast(pc.cast(array, pa.string()), pa.float64())
    unscaled = np.frombuffer(array.buffers()[1], dtype="<i8")[2 * array.offset : 2 * (array.offset + len(array)) : 2]
    values = unscaled / 10.0**dtype.scale if dtype.scale >= 0 else unscaled * 10.0**-dtype.scale
    mask = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    return pa.array(values, pa.float64(), mask=mask)
