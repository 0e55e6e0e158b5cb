"""Writing results: into a hidden temporary directory, then one atomic rename.

Readers never see a half-written sink: the final directory appears only on commit,
already holding every part file, ``_manifest.json`` and the ``_SUCCESS`` marker.
A failed or cancelled job leaves no committed output.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from jobs.errors import SinkExists
from jobs.spec import SinkSpec
from jobs.status import ColumnSchema, ResultFile, ResultManifest

TMP_PREFIX = ".spillway-tmp-"
SUCCESS_MARKER = "_SUCCESS"
MANIFEST_NAME = "_manifest.json"
PART_NAME = "part.{:06d}.parquet"


def ensure_sink_free(sink: SinkSpec, *, field: str = "sink.path") -> None:
    """Refuse a sink that already holds data (an empty directory is fine).

    Raises
    ------
    SinkExists
        If the path is a file or a non-empty directory.
    """
    path = Path(sink.path).expanduser()
    if path.is_file() or (path.is_dir() and any(path.iterdir())):
        raise SinkExists(f"'{sink.path}' already holds data; Spillway never overwrites output", field=field)


class SinkWriter:
    """Writes one job's output to a temporary sibling of the sink and commits it."""

    def __init__(self, sink: SinkSpec, job_id: str) -> None:
        self.sink = sink
        self.final = Path(sink.path).expanduser().absolute()
        # A sibling, so the commit is a rename within one filesystem.
        self.staging = self.final.parent / f"{TMP_PREFIX}{job_id}-{self.final.name}"

    def write_graph(self, frame: dd.DataFrame) -> Any:
        """The lazy write of ``frame`` into the staging directory."""
        self.abort()
        self.staging.parent.mkdir(parents=True, exist_ok=True)
        return frame.to_parquet(
            str(self.staging),
            compute=False,
            write_index=False,
            write_metadata_file=False,
            partition_on=list(self.sink.partition_on) or None,
            compression=None if self.sink.compression == "none" else self.sink.compression,
            # Zero-padded, so listing the files in name order is partition order
            # (a sorted job reads back sorted). A str method: workers need no Spillway code.
            name_function=PART_NAME.format,
        )

    def commit(self) -> ResultManifest:
        """Describe the staged files, mark success and rename into place.

        Raises
        ------
        SinkExists
            If data appeared at the sink path while the job ran; the staged output is
            removed and nothing is overwritten.
        """
        manifest = self._manifest()
        (self.staging / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=2))
        (self.staging / SUCCESS_MARKER).write_text("")
        if self.final.is_dir() and not any(self.final.iterdir()):
            self.final.rmdir()
        try:
            ensure_sink_free(self.sink)
            os.rename(self.staging, self.final)
        except (SinkExists, OSError):
            self.abort()
            raise
        return manifest

    def abort(self) -> None:
        """Remove the staging directory, if any."""
        shutil.rmtree(self.staging, ignore_errors=True)

    def _manifest(self) -> ResultManifest:
        files: list[ResultFile] = []
        for path in sorted(self.staging.rglob("*.parquet")):
            relative = path.relative_to(self.staging)
            if any(part.startswith(("_", ".")) for part in relative.parts):
                continue
            files.append(
                ResultFile(path=relative.as_posix(), size_bytes=path.stat().st_size, rows=pq.read_metadata(path).num_rows)
            )
        partitioning = "hive" if self.sink.partition_on else None
        schema = ds.dataset(str(self.staging), format="parquet", partitioning=partitioning).schema if files else None
        return ResultManifest(
            location=str(self.final),
            files=files,
            total_rows=sum(f.rows for f in files),
            total_bytes=sum(f.size_bytes for f in files),
            columns=[ColumnSchema(name=f.name, type=str(f.type)) for f in schema] if schema is not None else [],
            partition_on=list(self.sink.partition_on),
        )


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest a committed sink carries."""
    return json.loads((Path(path) / MANIFEST_NAME).read_text())
