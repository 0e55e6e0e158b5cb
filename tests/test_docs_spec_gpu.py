"""Every example of docs/spec.md on the GPU engines (``-m gpu``): cudf-polars and dask-cudf.

The CPU suite checks each example's output on Polars and on Dask-pandas (test_docs_spec.py).
Here the same examples run where a GPU user's jobs run:

- the Polars lowering, collected by cudf-polars' in-memory executor with ``raise_on_fail=True``,
  must give the doc's output, or cudf-polars' translation must refuse it with a reason (such a
  job goes to dask-cudf under ``engine: auto``, jobs.gpu_support) — the refusals are printed, so
  a device run records what cudf-polars takes;
- the Dask lowering on cuDF partitions (the dask-cudf engine) must give the doc's output, or refuse
  it as it does on the CPU (SQL sources and exact decimals run on Polars only).
"""

from __future__ import annotations

from pathlib import Path

import dask
import pytest

from spillway.jobs.decimal_cast import decimal_casts
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.cudf_polars_run import on_cudf_polars
from tests.test_docs_spec import RUNS, Example, _id, assert_output, docs_root  # noqa: F401 - docs_root is a fixture

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("example", RUNS, ids=_id)
def test_example_on_cudf_polars_gives_the_doc_output_or_is_refused(example: Example, docs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.chdir(docs_root)
    frame = on_cudf_polars(build_lazyframe(plan_spec(JobSpec.model_validate(example.spec))), example.name)
    if frame is not None:
        assert_output(example, frame.to_pandas())


def _polars_only(job: JobSpec) -> bool:
    return bool(job.sql_sources() or job.exact_decimal_sources() or decimal_casts(plan_spec(job).expressions))


@pytest.mark.parametrize("example", RUNS, ids=_id)
def test_example_on_dask_cudf_gives_the_doc_output(example: Example, docs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.chdir(docs_root)
    job = JobSpec.model_validate(example.spec)
    if _polars_only(job):
        pytest.skip("runs on the Polars engine only (SQL source or exact decimals); test_docs_spec checks the Dask refusal")
    with backend_config("cudf"), dask.config.set(scheduler="sync"):
        frame = build_frame(job, plan_spec(job)).compute()
    assert type(frame).__module__.startswith("cudf"), f"ran on {type(frame)}, not cuDF"
    assert_output(example, frame.to_pandas().reset_index(drop=True))
