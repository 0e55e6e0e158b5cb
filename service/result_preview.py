"""The first rows of a committed result, read through its manifest (``spillway result --head``).

The files are the ones the manifest lists, and only if they are still those files. On local disk
the sink directory is opened as the commit opens it (its parent resolved and re-checked against
the data roots, then walked from the root without following links: :func:`jobs.safe_open.open_directory`),
and every part file below that descriptor one component at a time with ``O_NOFOLLOW``
(:func:`jobs.commit.open_subdirectory`): a link swapped in for the sink, a partition folder or a
part file is refused (:class:`~jobs.sandbox.PathNotAllowed`), never followed. A file whose size
(or, for parquet, row count or columns; for CSV, header) is not the manifest's is refused too
(:class:`ResultUnreadable`), as is one no reader can take; the message names the file, never its contents.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import IO, TYPE_CHECKING

from spillway.jobs.errors import InvalidTransition
from spillway.jobs.safe_open import LINK_ERRNOS, open_directory, open_file_below
from spillway.jobs.sandbox import PathNotAllowed, check_sink_url, local_root_of
from spillway.jobs.status import ColumnSchema, ResultFile, ResultManifest

if TYPE_CHECKING:
    import pyarrow as pa

#: Opens one listed file for reading: binary, decompressed, its size checked.
_PartOpener = Callable[[ResultFile], AbstractContextManager[IO[bytes]]]

#: The error field of a preview's refusals: the job whose result it is.
FIELD = "id"



class ResultUnreadable(InvalidTransition):
    """A file the manifest lists is not the file the job committed (another size, rows or columns), or no reader can take it."""

    code = "result_unreadable"


def read_head(manifest: ResultManifest, n: int, roots: Iterable[str] | None = None) -> pa.Table:
    """The first ``n`` rows of the manifest's files, in the manifest's order.

    Only the files (and, for parquet, the row batches) needed for ``n`` rows are read. Columns
    of a ``partition_on`` sink come from the ``key=value`` folders of each file's path, decoded
    as the sources' hive reading decodes them (%-escapes undone, Hive's null marker a null) and
    typed as the manifest types them; CSV values are typed as the manifest records, not guessed.

    Parameters
    ----------
    roots
        The data roots the sink must lie in (the service's); None: no check (the SDK and CLI,
        which read with the caller's own access). Links below the sink are never followed.

    Raises
    ------
    FileNotFoundError
        The sink, or a file it lists, is gone.
    PathNotAllowed
        The sink lies outside ``roots`` now, or a link stands where the sink, a folder or a file was.
    ResultUnreadable
        A listed file differs from the manifest, or cannot be read as the sink's format.
    """
    import pyarrow as pa

    tables: list[pa.Table] = []
    wanted = n
    with _opener(manifest, None if roots is None else list(roots)) as open_part:
        for file in manifest.files:
            if wanted <= 0:
                break
            if file.rows == 0:
                continue
            with open_part(file) as handle:
                table = _read_file(handle, manifest, file, wanted)
            tables.append(_with_partition_columns(table, manifest, file))
            wanted -= table.num_rows
    if not tables:
        return pa.table({c.name: pa.array([], _arrow_type(c.type) or pa.string()) for c in manifest.columns})
    head = pa.concat_tables(tables, promote_options="permissive").slice(0, n)
    # CSV is read as text and typed once, over all files: a column typed in one file and left text in another would not concat.
    return _typed(head, manifest.columns) if manifest.format == "csv" else head


# --- opening the files ------------------------------------------------------------------------


@contextmanager
def _opener(manifest: ResultManifest, roots: list[str] | None) -> Iterator[_PartOpener]:
    """A function opening each listed file of ``manifest`` (binary, decompressed), its size checked."""
    if "://" in manifest.location:
        if roots is not None:
            check_sink_url(manifest.location, roots, field=FIELD)
        yield lambda file: _open_remote(manifest, file)
        return
    sink_fd = _open_sink(manifest.location, roots)
    try:
        yield lambda file: _open_local(sink_fd, manifest, file)
    finally:
        os.close(sink_fd)


def _open_sink(location: str, roots: list[str] | None) -> int:
    """The sink directory's fd, opened as the commit opens it: the parent resolved and checked against
    ``roots`` (then walked from its root without following links), the sink itself no link."""
    from spillway.jobs.commit import open_subdirectory

    parent, name = os.path.split(location.rstrip("/"))
    if roots is None:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        real = os.path.realpath(parent)
        root = local_root_of(real, roots)
        if root is None:
            raise PathNotAllowed(f"the sink '{location}' now lies outside the allowed roots ({', '.join(roots)}); it was not read", field=FIELD)
        parent_fd = open_directory(real, root, field=FIELD, opening=location)
    try:
        return open_subdirectory(parent_fd, name)
    except OSError as exc:
        if exc.errno in LINK_ERRNOS:
            raise PathNotAllowed(f"the sink '{location}' is now a link (or not a directory); links are not followed here", field=FIELD) from None
        raise
    finally:
        os.close(parent_fd)


@contextmanager
def _open_local(sink_fd: int, manifest: ResultManifest, file: ResultFile) -> Iterator[IO[bytes]]:
    """``file`` opened below ``sink_fd``, no link followed on the way, and only if it is a regular file of the manifest's size."""
    from spillway.jobs.commit import open_subdirectory

    shown = _shown(manifest, file)
    folder, _, name = file.path.rpartition("/")
    try:
        folder_fd = open_subdirectory(sink_fd, folder)
    except OSError as exc:
        if exc.errno in LINK_ERRNOS:
            raise PathNotAllowed(f"'{shown}': a folder on its path is now a link (or not a directory); links are not followed here", field=FIELD) from None
        raise _unopenable(shown, exc) from None
    try:
        fd = open_file_below(folder_fd, name, shown=shown, field=FIELD)
    except OSError as exc:
        raise _unopenable(shown, exc) from None
    finally:
        os.close(folder_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a directory with a raw IsADirectoryError
        os.close(fd)
        raise ResultUnreadable(f"'{shown}' is no longer a file (a directory or a special file stands there); it was not read", field=FIELD)
    with os.fdopen(fd, "rb") as raw:
        _check_size(manifest, file, info.st_size)
        os.set_blocking(fd, True)
        with _decompressed(raw, file.path) as handle:
            yield handle


def _unopenable(shown: str, exc: OSError) -> OSError | ResultUnreadable:
    """``exc`` itself for a missing file (the caller's "gone"); otherwise a refusal naming the file."""
    if isinstance(exc, FileNotFoundError):
        return exc
    return ResultUnreadable(f"'{shown}' cannot be opened: {exc.strerror or exc}", field=FIELD)


@contextmanager
def _open_remote(manifest: ResultManifest, file: ResultFile) -> Iterator[IO[bytes]]:
    """``file`` of an object-store sink, its size checked against the manifest."""
    import fsspec

    from spillway.jobs.storage import storage_options  # the service's S3 endpoint and region

    opened = fsspec.open(f"{manifest.location.rstrip('/')}/{file.path}", "rb", **storage_options(manifest.location))
    _check_size(manifest, file, opened.fs.size(opened.path))
    with opened as raw, _decompressed(raw, file.path) as handle:
        yield handle


@contextmanager
def _decompressed(raw: IO[bytes], path: str) -> Iterator[IO[bytes]]:
    """``raw`` as its data: a ``.gz`` part (a gzip CSV sink's, as the writers name them) decompressed."""
    if not path.endswith(".gz"):
        yield raw
        return
    import gzip

    with gzip.GzipFile(fileobj=raw, mode="rb") as handle:
        yield handle


def _check_size(manifest: ResultManifest, file: ResultFile, size: int) -> None:
    if size != file.size_bytes:
        raise ResultUnreadable(
            f"'{_shown(manifest, file)}' is {size:,} bytes, not the {file.size_bytes:,} the manifest lists: it was replaced "
            "or changed after the commit, so it is not shown",
            field=FIELD,
        )


def _shown(manifest: ResultManifest, file: ResultFile) -> str:
    return f"{manifest.location.rstrip('/')}/{file.path}"


# --- reading the rows ---------------------------------------------------------------------------


def _read_file(handle: IO[bytes], manifest: ResultManifest, file: ResultFile, n: int) -> pa.Table:
    """Up to ``n`` rows of the open ``file``; any reader's error becomes :class:`ResultUnreadable` naming it."""
    import pyarrow as pa

    try:
        if manifest.format == "csv":
            return _read_csv(handle, manifest, file, n)
        return _read_parquet(handle, manifest, file, n)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, ValueError, EOFError, OSError, zlib.error) as exc:  # UnicodeDecodeError and BadGzipFile among them
        raise ResultUnreadable(f"'{_shown(manifest, file)}' cannot be read as {manifest.format}: {exc}", field=FIELD) from None


def _data_columns(manifest: ResultManifest) -> list[str]:
    """The columns a file holds itself: the manifest's, less the ``partition_on`` keys its folders give."""
    keys = set(manifest.partition_on)
    return [c.name for c in manifest.columns if c.name not in keys]


def _check_columns(manifest: ResultManifest, file: ResultFile, found: list[str], *, ordered: bool) -> None:
    expected = _data_columns(manifest)
    if (found != expected) if ordered else (set(found) != set(expected) or len(found) != len(expected)):
        raise ResultUnreadable(
            f"'{_shown(manifest, file)}' holds the columns {_names(found)}, not the manifest's {_names(expected)}: it was "
            "replaced after the commit, so it is not shown",
            field=FIELD,
        )


def _names(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f" … ({len(names)} in all)" if len(names) > 10 else "") if names else "(none)"


def _read_parquet(handle: IO[bytes], manifest: ResultManifest, file: ResultFile, n: int) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle)
    if parquet.metadata.num_rows != file.rows:
        raise ResultUnreadable(
            f"'{_shown(manifest, file)}' holds {parquet.metadata.num_rows:,} rows, not the {file.rows:,} the manifest lists: it was "
            "replaced after the commit, so it is not shown",
            field=FIELD,
        )
    _check_columns(manifest, file, parquet.schema_arrow.names, ordered=False)
    return _first_rows(parquet.iter_batches(batch_size=max(n, 1)), n, parquet.schema_arrow)


def _read_csv(handle: IO[bytes], manifest: ResultManifest, file: ResultFile, n: int) -> pa.Table:
    """CSV rows read as text, no type guessed from it (:func:`read_head` types them as the manifest records): an
    unquoted empty field is a null, as the writers write one; a quoted one (``""``) is the empty text."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    columns = _data_columns(manifest)
    convert = pa_csv.ConvertOptions(
        column_types={name: pa.string() for name in columns},
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    reader = pa_csv.open_csv(handle, convert_options=convert)
    _check_columns(manifest, file, reader.schema.names, ordered=True)
    return _first_rows(reader, n, reader.schema)


def _first_rows(batches: Iterable[pa.RecordBatch], n: int, schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    taken: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        taken.append(batch)
        rows += batch.num_rows
        if rows >= n:
            break
    return pa.Table.from_batches(taken, schema=schema).slice(0, n)


def _typed(table: pa.Table, columns: list[ColumnSchema]) -> pa.Table:
    """``table``'s text columns cast to the types ``columns`` record; a column the cast refuses stays text."""
    import pyarrow as pa

    types = {c.name: c.type for c in columns}
    arrays = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        target = _arrow_type(types.get(name, ""))
        if target is not None and not pa.types.is_string(target):
            try:
                column = column.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # text the type cannot parse (a time of day, a list): shown as written
        arrays.append(column)
    return pa.Table.from_arrays(arrays, names=table.column_names)


_ZONED = re.compile(r"timestamp\[(s|ms|us|ns), tz=(.+)\]")
_DECIMAL = re.compile(r"decimal(32|64|128|256)\((\d+), (-?\d+)\)")


def _arrow_type(text: str) -> pa.DataType | None:
    """The Arrow type the manifest names as ``text`` (``str`` of the type); None where it names none this can rebuild."""
    import pyarrow as pa

    try:
        return pa.type_for_alias(text)
    except ValueError:
        pass
    if zoned := _ZONED.fullmatch(text):
        return pa.timestamp(zoned.group(1), tz=zoned.group(2))
    if decimal := _DECIMAL.fullmatch(text):
        return getattr(pa, f"decimal{decimal.group(1)}")(int(decimal.group(2)), int(decimal.group(3)))
    return None


def _with_partition_columns(table: pa.Table, manifest: ResultManifest, file: ResultFile) -> pa.Table:
    """``table`` with the ``partition_on`` keys of ``file``'s ``key=value`` folders as columns, decoded as sources decode them."""
    import polars as pl
    import pyarrow as pa

    from spillway.jobs.parquet_footers import hive_folders
    from spillway.jobs.polars_io import hive_value  # the sources' decoding: %-escapes undone, Hive's null marker a null

    types = {c.name: c.type for c in manifest.columns}
    present = set(table.column_names)
    for key, text in hive_folders(file.path):
        if key not in manifest.partition_on or key in present:
            continue
        arrow = _arrow_type(types.get(key, "")) or pa.string()
        integer = pa.types.is_integer(arrow)
        try:
            value = hive_value(text, pl.Int64() if integer else pl.String())
        except ValueError:
            raise ResultUnreadable(
                f"'{_shown(manifest, file)}': its folder {key}={text} holds no {arrow} value, the manifest's type of {key}", field=FIELD
            ) from None
        table = table.append_column(key, pa.array([value] * table.num_rows, arrow if integer else pa.string()))
        present.add(key)
    return table
