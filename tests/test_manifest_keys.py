"""The manifest's types of hive partition keys (jobs/manifest.py partition_key_types).

Where the job's column says nothing more, a key is typed as pyarrow's hive discovery types its
folder names, which is what a reader of the sink gets: checked here against pyarrow itself.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from spillway.jobs.manifest import partition_key_types
from spillway.jobs.polars_io import escaped_in_partition

FOLDER_VALUES = [
    ["1", "2"], ["-5", "007"], ["2147483647", "-2147483648"], ["2147483648"], ["1", "x"], [" 1"], ["+4"], ["1e3"], ["1.5"],
    ["True"], ["2024-01-01 00:00:00"], ["a/b", "c=d"], ["", "1"],
]


@pytest.mark.parametrize("values", FOLDER_VALUES, ids=[",".join(v) for v in FOLDER_VALUES])
def test_a_key_the_column_tells_nothing_more_of_is_typed_as_pyarrows_hive_discovery_types_it(tmp_path: Path, values: list[str]) -> None:
    paths = [f"p={escaped_in_partition(value)}/part.0.parquet" for value in values]
    for path in paths:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": [1]}), tmp_path / path)
    discovered = pads.dataset(str(tmp_path), format="parquet", partitioning=pads.HivePartitioning.discover(segment_encoding="uri")).schema
    assert partition_key_types(paths, ["p"], {"p": "double"}).field("p").type == discovered.field("p").type


def test_a_text_columns_key_is_text_whatever_its_values_look_like() -> None:
    paths = ["k=1/n=2/part.0.parquet", "k=2/n=3/part.0.parquet"]
    assert partition_key_types(paths, ["k", "n"], {"k": "large_string", "n": "int64"}) == pa.schema([("k", pa.string()), ("n", pa.int32())])


@pytest.mark.parametrize(("planned", "expected"), [("int64", pa.int32()), ("uint8", pa.int32()), ("string", pa.string()), ("double", pa.string()), ("", pa.string())])
def test_a_key_of_only_nulls_is_typed_as_its_values_would_be(planned: str, expected: pa.DataType) -> None:
    assert partition_key_types(["p=__HIVE_DEFAULT_PARTITION__/part.0.parquet"], ["p"], {"p": planned}).field("p").type == expected


def test_escaped_key_names_are_matched_by_their_names() -> None:
    paths = [f"{escaped_in_partition('a/b')}=__HIVE_DEFAULT_PARTITION__/part.0.parquet", f"{escaped_in_partition('a/b')}=7/part.0.parquet"]
    assert partition_key_types(paths, ["a/b"], {}) == pa.schema([("a/b", pa.int32())])
