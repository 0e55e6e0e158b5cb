"""How both engines read CSV and JSON lines: with Polars' readers, in the read types of :mod:`jobs.sources`.

The Polars engine scans the files, the Dask engine parses each block of them with the same readers and hands it to
pandas; so a field is the same value, or refused, on both. This module holds what they share: the Polars type of each
read type, what Polars' errors say of a value it refused, and the checks of a CSV file's header line.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

import polars as pl
from fsspec.utils import infer_compression

from spillway.jobs.errors import UnreadableSource

#: The Polars type of each read type of a CSV or JSON-lines column (jobs.sources.text_read_types), as ``cast()`` gives it.
READ_TYPES: dict[str, pl.DataType] = {
    "int64": pl.Int64(), "int32": pl.Int32(), "float64": pl.Float64(), "float32": pl.Float32(), "bool": pl.Boolean(),
    "datetime64[ns]": pl.Datetime("ns"), "string": pl.String(),
}


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
    if (field := _CSV_ERROR.search(text)) and field["dtype"] in _CSV_TYPES:
        return PolarsReadError("csv", field["column"], _CSV_TYPES[field["dtype"]], field["value"])
    if (jsonl := _JSON_ERROR.search(text)) and jsonl["dtype"] in _JSON_TYPES:
        return PolarsReadError("jsonl", None, _JSON_TYPES[jsonl["dtype"]], jsonl["value"])
    return None


def refusing_column(data: bytes, error: PolarsReadError, types: dict[str, str], message: str) -> str | None:
    """The column of ``data`` that ``error`` (Polars' ``message``) is about: the one CSV names, or (JSON lines, whose
    error names none) the first of ``error``'s read type in ``types`` that refuses it alone; None if none does."""
    if error.column is not None:
        return error.column
    return next((c for c, t in types.items() if t == error.read_type and refuses(data, error, c, message)), None)


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




#: Polars' errors for a file it cannot read as its format, as opposed to a value a column's type cannot hold
#: (:func:`parse_read_error`): a row with more fields than the header, a malformed JSON line, files of one source
#: whose columns differ, a quote left open.
READ_FAILURES: tuple[type[Exception], ...] = (pl.exceptions.ComputeError, pl.exceptions.NoDataError, pl.exceptions.SchemaError,
                                              pl.exceptions.ColumnNotFoundError, pl.exceptions.ShapeError)

_FORMAT_NAMES = {"csv": "CSV", "jsonl": "JSON lines"}


#: Polars' messages for a file it cannot read as its format (not a value of a column, not an error of the query).
_FILE_FAILURE = re.compile(r"found more fields than defined|schema names differ|schema lengths differ|CSV malformed|error parsing line"
                           r"|empty CSV|NDJSON line expected|invalid utf-?8|unterminated quote", re.I)


#: How Polars' JSON lines reader reports a byte order mark: its first byte, read as Latin-1, at the file's first character.
_BOM_AT_START = "at character 0 ('\u00ef')"


def file_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is Polars failing to read a source file as its format."""
    return isinstance(exc, READ_FAILURES) and bool(_FILE_FAILURE.search(str(exc)))


def unreadable(file: str | None, format: str | None, reason: str, field: str | None) -> UnreadableSource:
    """The error both engines raise for a source file they cannot read as ``format``, naming it (and the source's
    ``field``) where known."""
    what = f"'{file}'" if file is not None else "a file of the job's sources"
    as_format = f" as {_FORMAT_NAMES.get(format, format)}" if format is not None else ""
    first_line = reason.strip().splitlines()[0] if reason.strip() else "unreadable"
    if format == "jsonl" and _BOM_AT_START in first_line:
        first_line += "; the file starts with a UTF-8 byte order mark (bytes EF BB BF), which JSON lines do not take: save it without"
    return UnreadableSource(f"{what} cannot be read{as_format}: {first_line}", field=f"{field}.path" if field is not None else None)


def compressed(path: str) -> bool:
    """Whether ``path`` names a compressed file (``.gz``, ``.bz2``, ``.zst``…), which is read whole: its bytes are not its text's."""
    return infer_compression(path) is not None


#: The most bytes of a file's start read for its header line.
HEADER_BYTES = 1 << 20


def csv_header_of(data: bytes) -> list[str] | None:
    """The column names of the header line at the start of ``data`` (None: no line there), split as Polars splits them:
    at commas outside double quotes, a UTF-8 byte-order mark dropped, the line ending at ``\n`` or ``\r\n``."""
    line = data.split(b"\n", 1)[0].removesuffix(b"\r")
    if not line.strip():
        return None
    text = line.decode("utf-8-sig", errors="replace")
    if "\r" in text:  # lines that end in a lone CR: all one line to Polars (the csv module refuses it)
        return [text]
    return next(csv.reader([text]))


def header_problem(names: list[str]) -> str | None:
    """Why a CSV header of ``names`` cannot be read alike by both engines and the checker (None: it can): a column
    without a name, two of one name, or lines ending in a lone carriage return (the header then holds every row)."""
    if any("\r" in name for name in names):
        return "its lines end in a lone carriage return (\\r); write them ending in \\n or \\r\\n"
    if (empty := [str(i + 1) for i, name in enumerate(names) if not name.strip()]):
        return f"column {', '.join(empty)} of its header has no name (a trailing comma?); name every column"
    seen: set[str] = set()
    if (twice := next((name for name in names if name in seen or seen.add(name)), None)) is not None:
        return f"its header names column '{twice}' twice; give each column its own name"
    return None


def head_readable_types(format: str, head: bytes, types: dict[str, str]) -> dict[str, str]:
    """``types``, the ones the checker inferred from a file's ``head`` (its first lines), with each column whose head
    values Polars' reader cannot read in that type made ``string``: ``7 `` (a space after the digit) is a number to
    pandas and not to Polars. So the head is always readable by both engines in the types the checker gives it.

    Raises
    ------
    ValueError
        The head cannot be read as ``format`` at all: a row with more fields than the header, a malformed JSON line.
    """
    types = dict(types)
    while True:
        try:
            _read_head(format, head, types)
            return types
        except READ_FAILURES as exc:
            message = str(exc)
            error = parse_read_error(message)
            column = error and refusing_column(head, error, types, message)
            if not column or types.get(column, "string") == "string":
                raise ValueError(message.strip().splitlines()[0] if message.strip() else type(exc).__name__) from None
            types[column] = "string"  # one column fewer typed each time round: the loop ends


def _read_head(format: str, head: bytes, types: dict[str, str]) -> None:
    schema = {column: READ_TYPES[read_type] for column, read_type in types.items()}
    if format == "csv":
        pl.read_csv(io.BytesIO(head), schema_overrides=schema, infer_schema=False, raise_if_empty=False)
    elif head.strip():
        pl.read_ndjson(io.BytesIO(head), schema=schema)
