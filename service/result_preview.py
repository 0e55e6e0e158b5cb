"""The first rows of a committed result, read through its manifest (``spillway result --head``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spillway.jobs.status import ResultManifest

if TYPE_CHECKING:
    import pyarrow as pa


def read_head(manifest: ResultManifest, n: int) -> pa.Table:
    """The first ``n`` rows of the manifest's files, in the manifest's order.

    Only the files (and, for parquet, the row batches) needed for ``n`` rows are read. Columns
    of a ``partition_on`` sink come from the ``key=value`` folders of each file's path.
    """
    import fsspec
    import pyarrow as pa

    from spillway.jobs.storage import storage_options  # the service's S3 endpoint and region; none for a local path

    options = storage_options(manifest.location)
    tables: list[pa.Table] = []
    wanted = n
    for file in manifest.files:
        if wanted <= 0:
            break
        if file.rows == 0:
            continue
        with fsspec.open(f"{manifest.location.rstrip('/')}/{file.path}", "rb", **options) as handle:
            table = _read_rows(handle, manifest.format, wanted)
        for part in file.path.split("/")[:-1]:
            key, sep, value = part.partition("=")
            if sep and key in manifest.partition_on and key not in table.column_names:
                table = table.append_column(key, pa.array([value] * table.num_rows, pa.string()))
        tables.append(table)
        wanted -= table.num_rows
    if not tables:
        return pa.table({c.name: pa.array([], pa.string()) for c in manifest.columns})
    return pa.concat_tables(tables, promote_options="permissive").slice(0, n)


def _read_rows(handle: object, fmt: str, n: int) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    if fmt == "csv":
        reader = pa_csv.open_csv(handle)
    else:
        reader = pq.ParquetFile(handle).iter_batches(batch_size=max(n, 1))  # type: ignore[assignment]
    batches: list[pa.RecordBatch] = []
    rows = 0
    for batch in reader:
        batches.append(batch)
        rows += batch.num_rows
        if rows >= n:
            break
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches).slice(0, n)
