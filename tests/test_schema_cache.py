"""Parquet footers are read once per file version: a file rewritten in place is read again; a source is listed once per pass of planning."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from spillway.jobs import sources
from spillway.jobs.sources import _cached_parquet_schema, files_listed_once, parquet_schema, resolve_files
from spillway.jobs.spec import SourceSpec


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


def test_a_source_is_listed_once_within_one_pass_of_planning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside files_listed_once a source path is walked and checked once; outside it, and in the next pass, again."""
    (tmp_path / "d").mkdir()
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "d" / "one.parquet")
    source = SourceSpec(format="parquet", path=str(tmp_path / "d"))
    walks: list[str] = []
    listed = sources._local_files
    monkeypatch.setattr(sources, "_local_files", lambda s, f: walks.append(s.path) or listed(s, f))
    with files_listed_once():
        first = resolve_files(source)
        assert resolve_files(source, field="sources.d") == first and len(walks) == 1
        first.append("changed by a caller")  # a copy each time: the listing itself is not changed
        assert resolve_files(source) == [str(tmp_path / "d" / "one.parquet")]
    pd.DataFrame({"a": [2]}).to_parquet(tmp_path / "d" / "two.parquet")
    with files_listed_once():
        assert len(resolve_files(source)) == 2 and len(walks) == 2
    resolve_files(source)
    assert len(walks) == 3
