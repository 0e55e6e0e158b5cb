"""The docs' pivot, unpivot, cross/range join and new aggregation examples on cudf-polars (``-m gpu``).

Each query either runs on the GPU with the CPU's answer, or cudf-polars' translation refuses it
with a reason, which sends an ``engine: auto`` job to dask-cudf at submit (jobs.gpu_support).
The test prints which, so a device run records what cudf-polars takes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.cudf_polars_run import on_cudf_polars
from tests.test_docs_spec import RUNS, docs_root  # noqa: F401 - docs_root is a fixture

pytestmark = pytest.mark.gpu

NEW_EXAMPLES = ["pivot_status", "pivot_count_by_month", "unpivot_measures", "unpivot_include_nulls", "join_cross", "join_range",
                "join_keys_and_where", "groupby_any_all_mode", "groupby_corr"]


@pytest.mark.parametrize("name", NEW_EXAMPLES)
def test_new_example_runs_on_cudf_polars_or_is_refused_with_a_reason(name: str, docs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.chdir(docs_root)
    example = next(e for e in RUNS if e.name == name)
    query = build_lazyframe(plan_spec(JobSpec.model_validate(example.spec)))
    on_gpu = on_cudf_polars(query, name)
    if on_gpu is None:
        return
    on_cpu = query.collect()
    key = list(on_cpu.columns)
    assert_frame_equal(on_gpu.sort(key, nulls_last=True), on_cpu.sort(key, nulls_last=True), check_exact=False, rel_tol=1e-9)
