"""A groupby's row counts on the Polars engine are int64 from the first partial count to the answer.

Polars' ``len()`` and ``count()`` give its index type, a uint32, and cudf-polars' streaming groupby
adds the partitions' partial counts up in that type. On an H100 (bench/long_query.py over 3251
copies of TPC-H SF 10 lineitem, 195 billion rows) a group of 48,128,054,327 rows counted
883,414,071: the count modulo 2^32, a silent wrong answer, cast to int64 only after it had wrapped.
Billions of rows cannot be made here, so the CPU tests pin the plan (no uint32 count in it) and the
answers; the GPU test pins cudf-polars' translated groupby, whose schema held the uint32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec

AGGS = {
    "rows": {"func": "size"},
    "priced": {"func": "count", "column": "price"},
    "flagged": {"func": "sum", "column": "flag"},
    "total": {"func": "sum", "column": "qty"},
}


def _frame(tmp_path: Path, by: list[str], before: list[dict[str, Any]] | None = None) -> pl.LazyFrame:
    source = tmp_path / "in.parquet"
    pl.DataFrame({
        "k": ["a", "a", "b", "b", "b"],
        "price": [1.0, None, 2.0, None, None],
        "flag": [True, False, True, True, None],
        "qty": [1, 2, 3, 4, 5],
    }).write_parquet(source)
    spec: dict[str, Any] = {"name": "counts", "source": {"format": "parquet", "path": str(source)},
                            "steps": [*(before or []), {"op": "groupby", "by": by, "aggs": AGGS}], "sink": {"path": str(tmp_path / "out")}}
    return build_lazyframe(plan_spec(JobSpec.model_validate(spec)))


@pytest.mark.parametrize("by", [["k"], []], ids=["keys", "no-keys"])
def test_row_counts_are_sums_of_int64_never_a_uint32_count(tmp_path: Path, by: list[str]) -> None:
    frame = _frame(tmp_path, by)
    plan = frame.explain()
    assert "len()" not in plan and ".count()" not in plan, plan
    for dtype in frame.collect_schema().values():
        assert dtype != pl.UInt32
    rows = frame.collect().sort(by or "rows").to_dicts()
    if by:
        assert rows == [{"k": "a", "rows": 2, "priced": 1, "flagged": 1, "total": 3}, {"k": "b", "rows": 3, "priced": 1, "flagged": 2, "total": 12}]
    else:
        assert rows == [{"rows": 5, "priced": 2, "flagged": 3, "total": 15}]


def test_a_windows_count_over_its_partition_is_a_sum_of_int64(tmp_path: Path) -> None:
    window = {"op": "window", "partition_by": ["k"], "columns": {"n": {"func": "count", "column": "price"}}}
    spec: dict[str, Any] = {"name": "w", "source": {"format": "parquet", "path": str(tmp_path / "in.parquet")}, "steps": [window],
                            "sink": {"path": str(tmp_path / "out")}}
    _frame(tmp_path, ["k"])  # writes the source
    frame = build_lazyframe(plan_spec(JobSpec.model_validate(spec)))
    assert ".count()" not in frame.explain()
    assert frame.sort("k", "qty").collect()["n"].to_list() == [1, 1, 1, 1, 1]


def test_no_keys_over_no_rows_is_no_row_as_on_the_dask_engine(tmp_path: Path) -> None:
    assert _frame(tmp_path, [], before=[{"op": "filter", "expr": "qty > 100"}]).collect().height == 0


@pytest.mark.gpu
@pytest.mark.parametrize("by", [["k"], []], ids=["keys", "no-keys"])
def test_cudf_polars_groups_count_in_int64(tmp_path: Path, by: list[str]) -> None:
    """No uint32 in any groupby cudf-polars translates from the lowering (its streaming sums keep the type)."""
    pytest.importorskip("cudf_polars")
    from cudf_polars.dsl import ir as cudf_ir
    from cudf_polars.dsl.translate import Translator

    from spillway.jobs.gpu_support import GPU_EXECUTOR

    frame = _frame(tmp_path, by)
    translator = Translator(frame._ldf.visit(), pl.GPUEngine(executor=GPU_EXECUTOR, raise_on_fail=True))
    root = translator.translate_ir()
    assert not translator.errors, translator.errors
    pending, groupbys, selects = [root], 0, 0
    while pending:
        node = pending.pop()
        pending.extend(node.children)
        if isinstance(node, (cudf_ir.GroupBy, cudf_ir.Select)):
            groupbys += isinstance(node, cudf_ir.GroupBy)
            selects += isinstance(node, cudf_ir.Select)
            wrapping = {name: dtype.polars_type for name, dtype in node.schema.items() if dtype.polars_type == pl.UInt32}
            assert not wrapping, (type(node).__name__, wrapping)
    assert groupbys + selects > 0  # the aggregation was seen
