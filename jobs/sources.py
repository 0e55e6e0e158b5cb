"""Finding source files and reading their schema, cheaply and before any cluster work."""

from __future__ import annotations

import glob
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.errors import SourceNotFound, SpecError, UnknownColumn
from jobs.spec import SourceSpec

#: Column name → coarse kind ("numeric", "string", "datetime", "bool", "other", "unknown").
Schema = dict[str, str]

_SUFFIXES = {"parquet": (".parquet", ".parq", ".pq"), "csv": (".csv", ".csv.gz", ".tsv")}


def resolve_files(source: SourceSpec, *, field: str = "source") -> list[str]:
    """The files a source reads, sorted; a directory means every data file inside it.

    Raises
    ------
    SourceNotFound
        If the path, directory or glob matches no file.
    """
    path = os.path.expanduser(source.path)
    if os.path.isdir(path):
        files = [
            os.path.join(root, name)
            for root, _, names in os.walk(path)
            for name in names
            if name.endswith(_SUFFIXES[source.format]) and not name.startswith(("_", "."))
        ]
    else:
        files = [p for p in glob.glob(path, recursive=True) if os.path.isfile(p)]
    if not files:
        raise SourceNotFound(f"no {source.format} file matches '{source.path}'", field=f"{field}.path")
    return sorted(files)


def arrow_kind(dtype: pa.DataType) -> str:
    """The coarse kind of an Arrow type, enough to check aggregations."""
    if pa.types.is_boolean(dtype):
        return "bool"
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return "numeric"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_dictionary(dtype):
        return "string"
    if pa.types.is_timestamp(dtype) or pa.types.is_date(dtype):
        return "datetime"
    return "other"


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
    first = resolve_files(source, field=field)[0]
    try:
        if source.format == "parquet":
            schema = {f.name: arrow_kind(f.type) for f in pq.read_schema(first)}
        else:
            head = pd.read_csv(first, nrows=1000)
            schema = {str(name): pandas_kind(dtype) for name, dtype in head.dtypes.items()}
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
