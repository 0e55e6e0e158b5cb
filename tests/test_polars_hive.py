"""Hive-partitioned parquet on the Polars engine: one scan per folder with its values as literals (jobs/polars_io.py).

The frame must be exactly the one Polars' own hive scan gives (types inferred as Polars infers
them, %-escapes undone, Hive's null marker a null), since that scan is what cudf-polars refuses.
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


def test_a_hive_source_reads_as_polars_own_hive_scan_reads_it(hive_root: Path) -> None:
    got = scan_source(SourceSpec(format="parquet", path=str(hive_root))).collect().sort("order_id")
    files = sorted(str(path) for path in hive_root.rglob("*.parquet"))
    want = pl.scan_parquet(files, hive_partitioning=True).with_columns(pl.col("day").cast(pl.Datetime("us"))).collect().sort("order_id")
    assert got.equals(want), (got, want)
    assert got.schema == pl.Schema({"order_id": pl.Int64, "amount": pl.Float64, "region": pl.String, "day": pl.Datetime("us"), "ratio": pl.Float64})
    assert got["region"].to_list() == ["north", "north", "so/uth", "so/uth", None, None]


def test_selected_columns_of_a_hive_source_include_partition_columns(hive_root: Path) -> None:
    frame = scan_source(SourceSpec(format="parquet", path=str(hive_root), columns=["order_id", "region"])).collect()
    assert frame.columns == ["order_id", "region"] and frame.height == 6
