"""The window step on both engines, each function against a row-by-row Python reference
(written without pandas' or Polars' window machinery), and the errors a bad window gets."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_series_equal
from pydantic import ValidationError

from spillway.jobs.errors import SpecError, TypeMismatch, UnknownColumn
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec, WindowColumn
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import check_spec, plan_spec
from spillway.service.client import SpillwayClient
from tests.conftest import wait_terminal
from tests.test_engines import assert_same_rows, run_both

ROWS = 240


def rows_frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    value = rng.normal(10, 5, ROWS).round(2)
    value[rng.random(ROWS) < 0.25] = np.nan  # nulls inside frames, and frames with only nulls
    return pd.DataFrame({
        "k": pd.Series(rng.choice(["a", "b", "c", "d", None], ROWS, p=[0.4, 0.3, 0.2, 0.05, 0.05]), dtype="str"),
        "o": rng.permutation(ROWS),  # a unique order: row_number, lag and frames are then defined
        "t": rng.integers(0, 6, ROWS),  # a tied order, for rank and dense_rank
        "v": value,
        "i": rng.integers(-5, 9, ROWS),
        "s": rng.choice(["x", "y", "zz"], ROWS),
    })


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("window")
    frame = rows_frame()
    for index in range(6):  # six dask partitions, so a partition's rows start out spread over them
        frame.iloc[index * ROWS // 6 : (index + 1) * ROWS // 6].to_parquet(root / f"part-{index}.parquet", index=False)
    return root


def job(data: Path, steps: list[dict[str, Any]]) -> JobSpec:
    return JobSpec.model_validate({"source": {"format": "parquet", "path": str(data)}, "steps": steps, "sink": {"path": "/tmp/unused"}})


def window(partition_by: list[str], order_by: list[dict[str, Any]], columns: dict[str, Any]) -> dict[str, Any]:
    return {"op": "window", "partition_by": partition_by, "order_by": order_by, "columns": columns}


# A reference: each partition's rows as Python lists, in order.


def _null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _frame_values(values: list[Any], position: int, frame: str, preceding: int, following: int = 0) -> list[Any]:
    start = 0 if frame != "rolling" else max(0, position - preceding)
    chosen = values if frame == "partition" else values[start : position + 1 + following]
    return [v for v in chosen if not _null(v)]


def _aggregate(func: str, values: list[Any]) -> Any:
    if func == "count":
        return len(values)
    if not values:
        return None
    return {"sum": sum, "min": min, "max": max, "mean": lambda vs: sum(vs) / len(vs)}[func](values)


def reference(frame: pd.DataFrame, keys: list[str], order: list[tuple[str, bool]], name: str, spec: dict[str, Any]) -> pd.Series:
    """The window column ``name`` computed partition by partition, row by row."""
    out = pd.Series([None] * len(frame), index=frame.index, dtype=object)
    groups = frame.groupby(keys[0] if len(keys) == 1 else keys, dropna=False, sort=False).groups if keys else {None: frame.index}
    for members in groups.values():
        part = frame.loc[list(members)]
        for column, descending in reversed(order):  # a stable sort per key, last key first
            part = part.sort_values(column, ascending=not descending, kind="stable")
        ordered = list(part.index)
        order_values = [tuple(part.loc[i, c] for c, _ in order) for i in ordered]
        values = list(part[spec["column"]]) if "column" in spec else []
        for position, index in enumerate(ordered):
            func = spec["func"]
            if func == "row_number":
                result: Any = position + 1
            elif func == "rank":
                result = order_values.index(order_values[position]) + 1
            elif func == "dense_rank":
                result = len(dict.fromkeys(order_values[: position + 1]))
            elif func == "percent_rank":  # SQL: (rank - 1) / (rows - 1), 0 for a single row
                result = order_values.index(order_values[position]) / (len(ordered) - 1) if len(ordered) > 1 else 0.0
            elif func == "cume_dist":  # SQL: rows up to this one's last peer, over the rows
                result = (len(order_values) - order_values[::-1].index(order_values[position])) / len(ordered)
            elif func == "ntile":  # SQL: deal the rows out in order, the first (rows % n) buckets one row larger
                size, larger = divmod(len(ordered), spec["buckets"])
                edges = [sum(size + (b < larger) for b in range(bucket)) for bucket in range(spec["buckets"] + 1)]
                result = next(b for b in range(spec["buckets"]) if edges[b] <= position < edges[b + 1]) + 1
            elif func in ("first_value", "last_value"):  # the frame's first or last row, null or not
                frame_kind, back = spec.get("frame", "partition"), spec.get("preceding", 0)
                start = 0 if frame_kind != "rolling" else max(0, position - back)
                end = len(values) - 1 if frame_kind == "partition" else min(position + spec.get("following", 0), len(values) - 1)
                result = values[start if func == "first_value" else end]
                result = None if _null(result) else result
            elif func in ("lag", "lead"):
                other = position + (-1 if func == "lag" else 1) * spec.get("offset", 1)
                result = values[other] if 0 <= other < len(values) else spec.get("default")
            else:
                result = _aggregate(func, _frame_values(values, position, spec.get("frame", "partition"), spec.get("preceding", 0),
                                                        spec.get("following", 0)))
            out[index] = result
    return out


COLUMNS: dict[str, dict[str, Any]] = {
    "row_number": {"func": "row_number"},
    "lag": {"func": "lag", "column": "v"},
    "lag_text": {"func": "lag", "column": "s", "default": "none"},
    "lead_2": {"func": "lead", "column": "i", "offset": 2, "default": -1},
    "share": {"func": "sum", "column": "v"},
    "present": {"func": "count", "column": "v"},
    "lowest_text": {"func": "min", "column": "s"},
    "average": {"func": "mean", "column": "v"},
    "highest": {"func": "max", "column": "i"},
    "running_sum": {"func": "sum", "column": "v", "frame": "running"},
    "running_count": {"func": "count", "column": "v", "frame": "running"},
    "running_min": {"func": "min", "column": "v", "frame": "running"},
    "running_max": {"func": "max", "column": "v", "frame": "running"},
    "running_mean": {"func": "mean", "column": "v", "frame": "running"},
    "rolling_sum": {"func": "sum", "column": "v", "frame": "rolling", "preceding": 2},
    "rolling_count": {"func": "count", "column": "v", "frame": "rolling", "preceding": 3},
    "rolling_min": {"func": "min", "column": "v", "frame": "rolling", "preceding": 1},
    "rolling_max": {"func": "max", "column": "i", "frame": "rolling", "preceding": 4},
    "rolling_mean": {"func": "mean", "column": "v", "frame": "rolling", "preceding": 2},
    "first": {"func": "first_value", "column": "v"},
    "last_text": {"func": "last_value", "column": "s"},
    "running_first": {"func": "first_value", "column": "i", "frame": "running"},
    "running_last": {"func": "last_value", "column": "v", "frame": "running"},
    "rolling_first": {"func": "first_value", "column": "v", "frame": "rolling", "preceding": 3},
    "rolling_last_text": {"func": "last_value", "column": "s", "frame": "rolling", "preceding": 1},
    "centred_sum": {"func": "sum", "column": "v", "frame": "rolling", "preceding": 2, "following": 2},
    "ahead_count": {"func": "count", "column": "v", "frame": "rolling", "preceding": 0, "following": 3},
    "centred_min": {"func": "min", "column": "v", "frame": "rolling", "preceding": 1, "following": 4},
    "centred_max": {"func": "max", "column": "i", "frame": "rolling", "preceding": 3, "following": 1},
    "centred_mean": {"func": "mean", "column": "v", "frame": "rolling", "preceding": 2, "following": 1},
    "ahead_first": {"func": "first_value", "column": "v", "frame": "rolling", "preceding": 2, "following": 2},
    "ahead_last": {"func": "last_value", "column": "v", "frame": "rolling", "preceding": 0, "following": 2},
}
UNIQUE_ORDER = [{"column": "t"}, {"column": "o", "descending": True}]


def _expected(frame: pd.DataFrame, keys: list[str], order: list[dict[str, Any]], columns: dict[str, Any]) -> pd.DataFrame:
    pairs = [(key["column"], key.get("descending", False)) for key in order]
    return frame.assign(**{name: reference(frame, keys, pairs, name, spec) for name, spec in columns.items()})


@pytest.mark.parametrize("keys", [["k"], [], ["k", "s"]], ids=["one key", "no key", "two keys"])
def test_every_window_function_matches_the_reference_on_both_engines(data: Path, keys: list[str]) -> None:
    spec = job(data, [window(keys, UNIQUE_ORDER, COLUMNS)])
    on_dask, on_polars = run_both(spec)
    expected = _expected(rows_frame(), keys, UNIQUE_ORDER, COLUMNS)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert_same_rows(on_dask, expected[list(on_dask.columns)], ordered=False)


def test_rank_and_dense_rank_give_ties_one_number(data: Path) -> None:
    columns = {"rank": {"func": "rank"}, "dense": {"func": "dense_rank"}}
    order = [{"column": "t", "descending": True}]
    spec = job(data, [window(["k"], order, columns)])
    expected = _expected(rows_frame(), ["k"], order, columns)
    for result in run_both(spec):
        assert_same_rows(result, expected[list(result.columns)], ordered=False)
        assert result["rank"].max() > result["dense"].max()  # there were ties


@pytest.mark.parametrize("keys", [["k"], []], ids=["one key", "no key"])
def test_ntile_percent_rank_and_cume_dist_match_the_reference_on_both_engines(data: Path, keys: list[str]) -> None:
    columns = {"quartile": {"func": "ntile", "buckets": 4}, "tenth": {"func": "ntile", "buckets": 10},
               "many": {"func": "ntile", "buckets": 500}, "pct": {"func": "percent_rank"}, "cume": {"func": "cume_dist"}}
    order = [{"column": "t", "descending": True}]  # ties: percent_rank and cume_dist count peers
    spec = job(data, [window(keys, order, {**columns, "o_first": {"func": "row_number"}})])
    # ntile deals tied rows out in row order, which ties leave open: check it over a unique order.
    unique = job(data, [window(keys, UNIQUE_ORDER, {name: columns[name] for name in ("quartile", "tenth", "many")})])
    for result in run_both(spec):
        expected = _expected(rows_frame(), keys, order, {name: columns[name] for name in ("pct", "cume")})
        assert_same_rows(result[[*rows_frame().columns, "pct", "cume"]], expected, ordered=False)
    for result in run_both(unique):
        expected = _expected(rows_frame(), keys, UNIQUE_ORDER, {name: columns[name] for name in ("quartile", "tenth", "many")})
        assert_same_rows(result, expected[list(result.columns)], ordered=False)
    assert check_spec(spec)["quartile"] == "numeric"


def test_ntile_needs_its_buckets_and_only_it_takes_them() -> None:
    with pytest.raises(ValidationError, match="'ntile' needs 'buckets'"):
        WindowColumn.model_validate({"func": "ntile"})
    with pytest.raises(ValidationError, match="only it takes one"):
        WindowColumn.model_validate({"func": "rank", "buckets": 3})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        WindowColumn.model_validate({"func": "ntile", "buckets": 0})


def test_window_over_an_expression_after_a_filter_and_a_share_of_the_total(data: Path) -> None:
    steps = [
        {"op": "filter", "expr": "i >= 0"},
        window(["k"], [], {"total": {"func": "sum", "expr": "fillna(v, 0) * 2"}, "n": {"func": "count", "column": "i"}}),
        {"op": "assign", "column": "share", "expr": "fillna(v, 0) * 2 / total"},
    ]
    on_dask, on_polars = run_both(job(data, steps))
    assert_same_rows(on_dask, on_polars, ordered=False)
    frame = rows_frame()
    frame = frame[frame.i >= 0]
    sums = frame.assign(x=frame.v.fillna(0) * 2).groupby("k", dropna=False).x.sum()
    assert np.isclose(on_polars.groupby("k", dropna=False).share.sum(), 1).all() and len(sums) == on_polars.k.nunique(dropna=False)


def test_window_columns_are_in_the_schema_and_an_output_may_replace_a_column(data: Path) -> None:
    spec = job(data, [window(["k"], UNIQUE_ORDER, {"v": {"func": "lag", "column": "v"}, "n": {"func": "row_number"}})])
    assert check_spec(spec) == {"k": "string", "o": "numeric", "t": "numeric", "v": "numeric", "i": "numeric", "s": "string", "n": "numeric"}
    on_dask, on_polars = run_both(spec)
    assert list(on_dask.columns) == ["k", "o", "t", "v", "i", "s", "n"]
    assert_same_rows(on_dask, on_polars, ordered=False)


@pytest.mark.parametrize(
    ("step", "error", "field", "fragment"),
    [
        (window(["k"], [], {"p": {"func": "lag", "column": "v"}}), SpecError, "steps[0].order_by", "give order_by"),
        (window([], [], {"r": {"func": "sum", "column": "v", "frame": "running"}}), SpecError, "steps[0].order_by", "running frame"),
        (window(["kk"], [], {"n": {"func": "count", "column": "v"}}), UnknownColumn, "steps[0].partition_by", "unknown column 'kk'"),
        (window([], [{"column": "oo"}], {"n": {"func": "row_number"}}), UnknownColumn, "steps[0].order_by[0].column", "'oo'"),
        (window([], [], {"n": {"func": "sum", "column": "vv"}}), UnknownColumn, "steps[0].columns.n.column", "'vv'"),
        (window([], [], {"n": {"func": "sum", "expr": "vv + 1"}}), UnknownColumn, "steps[0].columns.n.expr", "'vv'"),
        (window([], [], {"n": {"func": "sum", "column": "s"}}), TypeMismatch, "steps[0].columns.n.func", "of kind string"),
        (window([], [{"column": "o"}], {"n": {"func": "max", "column": "s", "frame": "running"}}), TypeMismatch, "steps[0].columns.n.func", "numbers only"),
        (window([], [{"column": "o"}], {"n": {"func": "lag", "column": "v", "default": "none"}}), TypeMismatch, "steps[0].columns.n.default", "'none'"),
        (window(["k"], [], {"k": {"func": "count", "column": "v"}}), SpecError, "steps[0].columns.k", "partition_by or order_by column"),
    ],
)
def test_bad_windows_name_their_field(data: Path, step: dict[str, Any], error: type[SpecError], field: str, fragment: str) -> None:
    with pytest.raises(error) as info:
        check_spec(job(data, [step]))
    assert info.value.field == field and fragment in info.value.message, info.value.message


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ({"func": "row_number", "column": "v"}, "takes no column"),
        ({"func": "sum"}, "needs a column or an expr"),
        ({"func": "sum", "column": "v", "expr": "v"}, "not both"),
        ({"func": "sum", "column": "v", "offset": 2}, "belong to lag and lead"),
        ({"func": "lag", "column": "v", "frame": "running"}, "belongs to the aggregates"),
        ({"func": "sum", "column": "v", "frame": "rolling"}, "needs 'preceding'"),
        ({"func": "sum", "column": "v", "preceding": 2}, "needs 'preceding'"),
        ({"func": "sum", "column": "v", "frame": "running", "following": 2}, "'following' .rows after this one. belongs to a 'rolling' frame"),
        ({"func": "sum", "column": "v", "frame": "rolling", "preceding": 1, "following": 0}, "greater than or equal to 1"),
        ({"func": "nth_value"}, "'row_number', 'rank'"),
        ({"func": "lag", "column": "v", "offset": 0}, "greater than or equal to 1"),
    ],
)
def test_window_shape_errors(column: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobSpec.model_validate({"source": {"format": "csv", "path": "p"}, "steps": [window([], [], {"x": column})], "sink": {"path": "o"}})


def test_a_window_job_through_the_service(api: SpillwayClient, data: Path, tmp_path: Path) -> None:
    """On the service's cluster the Dask engine's per-partition window function runs on real workers."""
    columns = {"n": {"func": "row_number"}, "running": {"func": "sum", "column": "v", "frame": "running"}}
    spec = job(data, [window(["k"], UNIQUE_ORDER, columns)]).model_dump(mode="json", exclude_none=True)
    spec["sink"] = {"path": str(tmp_path / "out")}
    done = wait_terminal(api, api.submit(spec).id)
    assert done.state == JobStatus.SUCCEEDED, done.error
    written = pq.read_table(tmp_path / "out").to_pandas()
    expected = _expected(rows_frame(), ["k"], UNIQUE_ORDER, columns)
    assert_same_rows(written[list(expected.columns)], expected, ordered=False)


def test_rolling_aggregates_of_integers_are_integers_on_both_engines(data: Path) -> None:
    # pandas' rolling computes in floats: the Dask engine gave 7.0 where Polars gives 7.
    columns = {"s": {"func": "sum", "column": "i", "frame": "rolling", "preceding": 2},
               "lo": {"func": "min", "column": "i", "frame": "rolling", "preceding": 1, "following": 1},
               "hi": {"func": "max", "column": "i", "frame": "rolling", "preceding": 0, "following": 3}}
    for result in run_both(job(data, [window(["k"], UNIQUE_ORDER, columns)])):
        assert all(pd.api.types.is_integer_dtype(result[name]) for name in columns), result.dtypes


# Frames with rows after this one, at the partitions' edges.

EDGE_FRAMES = [(0, 1), (0, 5), (1, 1), (3, 3), (1, 4), (5, 1), (2, 3)]  # (preceding, following): one window each side, centred, uneven
EDGE_COLUMNS: dict[str, dict[str, Any]] = {
    f"{func}_{back}_{ahead}": {"func": func, "column": column, "frame": "rolling", "preceding": back, "following": ahead}
    for func, column in (("sum", "v"), ("count", "v"), ("mean", "v"), ("min", "v"), ("max", "i"), ("first_value", "v"), ("last_value", "v"))
    for back, ahead in EDGE_FRAMES
}


def edge_frame() -> pd.DataFrame:
    """Partitions of one, two and three rows (frames wider than them), one whose values are all null, a null
    key, and one of twelve rows; the first order key has nulls and ties, the second breaks them."""
    keys = ["one", "two", "two", "three", "three", "three", "nulls", "nulls", "nulls", None, None, *["big"] * 12]
    rng = np.random.default_rng(11)
    value = rng.normal(0, 10, len(keys)).round(2)
    value[[1, 4, 6, 7, 8, 13, 14, 20]] = np.nan  # the "nulls" partition has none, "big" a run of them
    return pd.DataFrame({
        "k": pd.Series(keys, dtype="str"),
        "t": pd.array(rng.choice([1, 2, None], len(keys)), dtype="Int64"),
        "o": rng.permutation(len(keys)),
        "v": value,
        "i": rng.integers(-5, 9, len(keys)),
    })


@pytest.fixture(scope="module")
def edge_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("window-edges")
    frame = edge_frame()
    for index in range(3):  # a partition's rows spread over the Dask engine's partitions
        frame.iloc[index::3].to_parquet(root / f"part-{index}.parquet", index=False)
    return root


@pytest.mark.parametrize("keys", [["k"], []], ids=["one key", "no key"])
@pytest.mark.parametrize("descending", [True, False], ids=["descending", "ascending"])
def test_frames_with_following_rows_match_the_reference_at_the_partitions_edges(edge_data: Path, keys: list[str], descending: bool) -> None:
    order = [{"column": "t", "descending": descending}, {"column": "o"}]  # nulls last either way, as the sort step
    on_dask, on_polars = run_both(job(edge_data, [window(keys, order, EDGE_COLUMNS)]))
    expected = _expected(edge_frame(), keys, order, EDGE_COLUMNS)
    assert list(on_polars.columns) == list(expected.columns)  # the helper columns are dropped
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert_same_rows(on_dask, expected[list(on_dask.columns)], ordered=False)


def test_frames_with_following_rows_lower_to_forms_cudf_polars_translates(data: Path) -> None:
    """cudf-polars 26.10 has no ``reverse`` inside ``over`` (it refused these frames: bench/results/gpu_tests_2026-12-02f.log)
    nor a bare column inside it (a ``last_value`` frame ending at its row): the lowering uses neither."""
    columns = {**{name: COLUMNS[name] for name in COLUMNS if "following" in COLUMNS[name]},
               "running_last": COLUMNS["running_last"], "rolling_last_text": COLUMNS["rolling_last_text"]}
    for keys in (["k"], []):
        plan = build_lazyframe(plan_spec(job(data, [window(keys, UNIQUE_ORDER, columns)]))).explain()
        assert ".reverse()" not in plan and 'col("v").over(' not in plan and 'col("s").over(' not in plan, plan


@pytest.mark.gpu
@pytest.mark.parametrize("keys", [["k"], []], ids=["one key", "no key"])
def test_frames_with_following_rows_on_cudf_polars_match_the_reference(edge_data: Path, keys: list[str]) -> None:
    """cudf-polars runs them (its translation refused them before: bench/results/gpu_tests_2026-12-02f.log), with the
    reference's answers; nothing falls back to the CPU."""
    pytest.importorskip("cudf_polars")
    from tests.cudf_polars_run import on_cudf_polars

    order = [{"column": "t", "descending": True}, {"column": "o"}]
    columns = {**EDGE_COLUMNS, "running_last": {"func": "last_value", "column": "v", "frame": "running"}}
    got = on_cudf_polars(build_lazyframe(plan_spec(job(edge_data, [window(keys, order, columns)]))), f"window_edges_{'-'.join(keys)}")
    assert got is not None, "cudf-polars refused the window step"
    expected = _expected(edge_frame(), keys, order, columns)
    assert_same_rows(got.to_pandas(), expected[list(got.columns)], ordered=False)


@pytest.mark.gpu
@pytest.mark.parametrize("keys", [["k"], []], ids=["one key", "no key"])
def test_running_extremes_on_cudf_polars_match_the_reference(edge_data: Path, keys: list[str]) -> None:
    """A running min or max over a partition: cudf-polars 26.10 ran the first lowering (the extreme, then a fill
    over nulls) with the fill over the whole frame, a wrong minimum on the H200 (-5.27 for -2.03), and refused
    the second (the fill, then the extreme) inside ``over``. The rolling form it has now runs there, with the
    reference's answers."""
    pytest.importorskip("cudf_polars")
    from tests.cudf_polars_run import on_cudf_polars

    order = [{"column": "t", "descending": True}, {"column": "o"}]
    columns = {"running_min": {"func": "min", "column": "v", "frame": "running"}, "running_max": {"func": "max", "column": "i", "frame": "running"}}
    got = on_cudf_polars(build_lazyframe(plan_spec(job(edge_data, [window(keys, order, columns)]))), f"running_extremes_{'-'.join(keys)}")
    assert got is not None, "cudf-polars refused the running extremes"
    expected = _expected(edge_frame(), keys, order, columns)
    assert_same_rows(got.to_pandas(), expected[list(got.columns)], ordered=False)


def _nan_job(tmp_path: Path) -> JobSpec:
    """Window frames over a float column holding NaN and a null."""
    table = pa.table({"k": [1, 1, 1, 1, 2, 2], "o": [1, 2, 3, 4, 1, 2], "v": pa.array([3.0, float("nan"), 1.0, None, float("nan"), 2.0])})
    path = tmp_path / "nan.parquet"
    pq.write_table(table, path)
    columns = {"running_min": {"func": "min", "column": "v", "frame": "running"},
               "rolling_max": {"func": "max", "column": "v", "frame": "rolling", "preceding": 1},
               "running_sum": {"func": "sum", "column": "v", "frame": "running"},
               "partition_min": {"func": "min", "column": "v"},
               "around_min": {"func": "min", "column": "v", "frame": "rolling", "preceding": 1, "following": 2}}
    return job(path, [window(["k"], [{"column": "o"}], columns)])


def test_nan_is_a_value_on_polars_and_null_on_dask_as_docs_spec_says(tmp_path: Path) -> None:
    """docs/spec.md, "Null tests and fills": the one documented difference between the engines' answers on floats."""
    on_dask, on_polars = (frame.sort_values(["k", "o"]).reset_index(drop=True) for frame in run_both(_nan_job(tmp_path)))
    nan = float("nan")
    # Polars: NaN is a value; the running frames that reach it are NaN, the whole partition's min skips it.
    assert on_polars["running_min"].tolist() == pytest.approx([3.0, nan, nan, nan, nan, nan], nan_ok=True)
    assert on_polars["rolling_max"].tolist() == pytest.approx([3.0, nan, nan, 1.0, nan, nan], nan_ok=True)
    assert on_polars["running_sum"].isna().tolist() == [False, True, True, True, True, True]
    assert on_polars["partition_min"].tolist() == [1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    assert on_polars["around_min"].tolist() == pytest.approx([nan, nan, nan, 1.0, nan, nan], nan_ok=True)  # 1 preceding, 2 following
    # Dask on pandas: a NaN is read as null and skipped.
    assert on_dask["running_min"].tolist() == pytest.approx([3.0, 3.0, 1.0, 1.0, nan, 2.0], nan_ok=True)
    assert on_dask["running_sum"].tolist() == pytest.approx([3.0, 3.0, 4.0, 4.0, nan, 2.0], nan_ok=True)


def _differing_columns(got: pl.DataFrame, expected: pl.DataFrame, keys: list[str]) -> list[str]:
    """The columns where ``got`` and ``expected`` differ, rows in ``keys`` order: nulls and NaN apart, NaN equal to NaN."""
    got, expected = got.sort(keys), expected.sort(keys)

    def same(name: str) -> bool:
        try:
            assert_series_equal(got[name], expected[name], check_dtypes=False)
        except AssertionError:
            return False
        return True

    return [name for name in expected.columns if not same(name)]


@pytest.mark.gpu
@pytest.mark.parametrize("steps", ["window", "groupby"])
def test_nan_on_cudf_polars_as_on_polars(tmp_path: Path, steps: str) -> None:
    """The Polars engine's NaN rules (docs/spec.md, "Null tests and fills") hold on cudf-polars too: window frames,
    and a group's aggregates."""
    pytest.importorskip("cudf_polars")
    from tests.cudf_polars_run import on_cudf_polars

    spec = _nan_job(tmp_path)
    if steps == "groupby":
        aggs = {name: {"func": name, "column": "v"} for name in ("min", "max", "sum", "mean", "count")}
        spec = spec.model_copy(update={"steps": JobSpec.model_validate(
            {"source": spec.source.model_dump(), "steps": [{"op": "groupby", "by": ["k"], "aggs": aggs}], "sink": {"path": "/tmp/unused"}}).steps})
    query = build_lazyframe(plan_spec(spec))
    got = on_cudf_polars(query, f"nan_{steps}")
    assert got is not None, "cudf-polars refused it"
    expected = query.collect()
    differ = _differing_columns(got, expected, ["k", "o"] if steps == "window" else ["k"])
    assert not differ, f"cudf-polars differs in {differ}:\n{got}\nPolars:\n{expected}"
