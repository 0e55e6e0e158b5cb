"""bench/dbbench.py at a tiny size: the harness runs and the engines' answers agree.

Two groupby and two join questions, on Spillway (the real service), DuckDB and Polars,
each in its worker process, one run each. No timing is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("polars")
pytestmark = pytest.mark.slow

from bench.dbbench import expand_engines, main  # noqa: E402
from bench.dbbench_data import ensure_data, join_sizes  # noqa: E402
from bench.dbbench_questions import QUESTIONS, select_questions, spillway_spec  # noqa: E402
from bench.dbbench_report import check_answers  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402

QUESTIONS_RUN = ["groupby.q1", "groupby.q9", "join.q1", "join.q3"]


def test_every_spillway_question_is_a_valid_spec(tmp_path: Path) -> None:
    tables = {name: tmp_path / name for name in ("x", "small", "medium", "big")}
    for question in QUESTIONS.values():
        JobSpec.model_validate(spillway_spec(question, tables, tmp_path / "out"))


def test_generated_data_has_db_benchmarks_shape(tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    data = ensure_data(tmp_path, 10_000)
    x = ds.dataset(str(data.groupby["x"])).to_table()
    assert x.column_names == ["id1", "id2", "id3", "id4", "id5", "id6", "v1", "v2", "v3"]
    assert len(set(x.column("id1").to_pylist())) == 100 and len(set(x.column("id6").to_pylist())) <= 100
    assert set(x.column("v1").to_pylist()) <= set(range(1, 6)) and set(x.column("v2").to_pylist()) <= set(range(1, 16))
    medium = ds.dataset(str(data.join["medium"])).to_table()
    assert medium.num_rows == join_sizes(10_000)["medium"] == len(set(medium.column("id2").to_pylist()))
    assert medium.column("id5").to_pylist() == [f"id{k}" for k in medium.column("id2").to_pylist()]
    # Cached: a second call reuses the files.
    before = sorted(p.stat().st_mtime_ns for p in data.groupby["x"].iterdir())
    assert sorted(p.stat().st_mtime_ns for p in ensure_data(tmp_path, 10_000).groupby["x"].iterdir()) == before


def test_only_the_asked_workloads_tables_are_written(tmp_path: Path) -> None:
    data = ensure_data(tmp_path, 10_000, workloads={"groupby"})
    assert data.groupby["x"].is_dir() and data.join == {}
    assert [p.name.split("_")[0] for p in (tmp_path / "data").iterdir()] == ["G1"]


def test_selection_and_engine_names() -> None:
    assert [q.key for q in select_questions("join")] == [f"join.q{i}" for i in range(1, 6)]
    assert len(select_questions("all")) == 15
    names = [e.name for e in expand_engines("spillway,dask-cudf,dask-cpu,duckdb", "cudf", [1, 2], 32)]
    assert names == ["spillway-1gpu", "spillway-2gpu", "dask-cudf-1gpu", "dask-cudf-2gpu", "dask-cpu", "duckdb"]
    with pytest.raises(ValueError, match="unknown question"):
        select_questions("groupby.q11")


def test_mismatch_is_reported() -> None:
    answer = {"rows": 2, "sums": {"v": {"sum": 3.0, "nulls": 0}}}
    entries = {"duckdb": {"check": answer}, "polars": {"check": {**answer, "rows": 3}}}
    verdict = check_answers(entries, rel_tol=1e-6)
    assert verdict["status"] == "MISMATCH" and verdict["problems"] == {"polars": ["rows 3 vs 2"]}


def test_tiny_run_answers_agree(tmp_path: Path) -> None:
    report = main([
        "--rows", "1e4", "--threads", "2", "--runs", "1", "--engines", "spillway,duckdb,polars",
        "--questions", ",".join(QUESTIONS_RUN), "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"),
        "--deadline", "300",
    ])
    assert (tmp_path / "out" / "dbbench_pandas_1e4.json").exists()
    for key in QUESTIONS_RUN:
        result = report["results"][key]
        assert set(result["engines"]) == {"spillway", "duckdb", "polars"}
        for name, entry in result["engines"].items():
            assert len(entry["runs"]) == 1, (key, name, entry.get("error"))
        assert result["check"]["status"] == "agree", (key, result["check"])
    assert "| q1 sum v1 by id1 |" in report["tables_markdown"]
