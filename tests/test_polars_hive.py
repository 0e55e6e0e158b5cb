"""Hive-partitioned parquet on the Polars engine: one scan per folder with its values as literals (jobs/polars_io.py).

The frame must hold what Polars' own hive scan gives (%-escapes undone, Hive's null marker a null),
since that scan is what cudf-polars refuses; but with the keys in the checker's types, as the Dask
engine reads them (docs/spec.md, "Hive-partitioned directories"): int64 where every value is an
integer, else text. Polars' own scan inferred dates, floats and booleans from the folder names.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from spillway.jobs.polars_io import scan_source
from spillway.jobs.spec import SourceSpec


@pytest.fixture
def hive_root(tmp_path: Path) -> Path:
    folders = [("north", "2024-01-01", "1.5"), ("so%2Futh", "2024-01-01", "2"), ("__HIVE_DEFAULT_PARTITION__", "2024-02-03", "2")]
    for number, (region, day, ratio) in enumerate(folders):
        folder = tmp_path / "sales" / f"region={region}" / f"day={day}" / f"ratio={ratio}"
        folder.mkdir(parents=True)
        pl.DataFrame({"order_id": [number * 10 + 1, number * 10 + 2], "amount": [1.25, 2.5]}).write_parquet(folder / "part-0.parquet")
    return tmp_path / "sales"


def test_a_hive_source_reads_as_polars_own_hive_scan_reads_it_with_the_checkers_key_types(hive_root: Path) -> None:
    got = scan_source(SourceSpec(format="parquet", path=str(hive_root))).collect().sort("order_id")
    files = sorted(str(path) for path in hive_root.rglob("*.parquet"))
    keys = {"region": pl.String, "day": pl.String, "ratio": pl.String}
    want = pl.scan_parquet(files, hive_partitioning=True, hive_schema=keys, try_parse_hive_dates=False).collect().sort("order_id")
    assert got.equals(want), (got, want)
    assert got.schema == pl.Schema({"order_id": pl.Int64, "amount": pl.Float64, **keys})
    assert got["region"].to_list() == ["north", "north", "so/uth", "so/uth", None, None]
    assert got["day"].to_list()[:2] == ["2024-01-01", "2024-01-01"] and got["ratio"].to_list()[:2] == ["1.5", "1.5"]


def test_a_key_of_integers_is_int64_with_its_null_folder_a_null(tmp_path: Path) -> None:
    for number, value in enumerate(["7", "007", "__HIVE_DEFAULT_PARTITION__"]):
        folder = tmp_path / f"k={value}"
        folder.mkdir()
        pl.DataFrame({"order_id": [number]}).write_parquet(folder / "part-0.parquet")
    got = scan_source(SourceSpec(format="parquet", path=str(tmp_path))).collect().sort("order_id")
    assert got.schema["k"] == pl.Int64 and got["k"].to_list() == [7, 7, None]


def test_selected_columns_of_a_hive_source_include_partition_columns(hive_root: Path) -> None:
    frame = scan_source(SourceSpec(format="parquet", path=str(hive_root), columns=["order_id", "region"])).collect()
    assert frame.columns == ["order_id", "region"] and frame.height == 6
