"""Parquet footers are read once per file version: a file rewritten in place is read again."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from spillway.jobs.sources import _cached_parquet_schema, parquet_schema


def test_a_rewritten_file_gives_its_new_schema_and_an_unchanged_one_is_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"a": [1, 2, 3]}).to_parquet(path)
    assert parquet_schema([str(path)])[0].names == ["a"]
    hits = _cached_parquet_schema.cache_info().hits
    assert parquet_schema([str(path)])[0].names == ["a"]
    assert _cached_parquet_schema.cache_info().hits == hits + 1
    before = os.stat(path).st_mtime_ns
    pd.DataFrame({"b": ["x"], "c": [1.5]}).to_parquet(path)  # same path, new contents
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))  # a different mtime even on a coarse clock
    assert parquet_schema([str(path)])[0].names == ["b", "c"]
