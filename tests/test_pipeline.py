"""Spec → Dask graph on the pandas backend, checked against plain pandas on the same data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from spillway.jobs.pipeline import Backend, backend_config, build_frame
from spillway.jobs.spec import JobSpec


def run(data: dict[str, Path], steps: list[dict[str, Any]], source: dict[str, Any] | None = None) -> pd.DataFrame:
    job = JobSpec.model_validate(
        {"source": source or {"format": "parquet", "path": str(data["sales"])}, "steps": steps, "sink": {"path": "/tmp/x"}}
    )
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(job).compute()


def same(actual: pd.DataFrame, expected: pd.DataFrame, sort_by: list[str] | None = None) -> None:
    if sort_by:
        actual = actual.sort_values(sort_by)
        expected = expected.sort_values(sort_by)
    pd.testing.assert_frame_equal(actual.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False, rtol=1e-9)


def test_filter_assign_select(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    out = run(
        sample_data,
        [
            {"op": "filter", "expr": "amount > 0 and region != 'test'"},
            {"op": "assign", "column": "net", "expr": "amount * (1 - fillna(discount, 0))"},
            {"op": "select", "columns": ["order_id", "net"]},
        ],
    )
    ref = sales_frame[(sales_frame.amount > 0) & (sales_frame.region != "test")]
    ref = ref.assign(net=ref.amount * (1 - ref.discount.fillna(0)))[["order_id", "net"]]
    same(out, ref, ["order_id"])


def test_groupby_every_aggregation(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    aggs = {
        "total": {"func": "sum", "column": "amount"},
        "avg": {"func": "mean", "column": "amount"},
        "lo": {"func": "min", "column": "amount"},
        "hi": {"func": "max", "column": "amount"},
        "n_disc": {"func": "count", "column": "discount"},
        "rows": {"func": "size"},
        "sd": {"func": "std", "column": "amount"},
        "customers": {"func": "nunique", "column": "customer_id"},
    }
    out = run(sample_data, [{"op": "groupby", "by": ["region", "quantity"], "aggs": aggs}])
    grouped = sales_frame.groupby(["region", "quantity"])
    ref = pd.DataFrame(
        {
            "total": grouped.amount.sum(),
            "avg": grouped.amount.mean(),
            "lo": grouped.amount.min(),
            "hi": grouped.amount.max(),
            "n_disc": grouped.discount.count(),
            "rows": grouped.size(),
            "sd": grouped.amount.std(),
            "customers": grouped.customer_id.nunique(),
        }
    ).reset_index()
    out["region"] = out["region"].astype(str)
    ref["region"] = ref["region"].astype(str)
    same(out, ref, ["region", "quantity"])


def test_sort_on_two_keys_then_limit(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    out = run(sample_data, [{"op": "sort", "by": ["quantity", "amount"], "descending": [True, False]}, {"op": "limit", "n": 25}])
    ref = sales_frame.sort_values(["quantity", "amount"], ascending=[False, True]).head(25)
    assert list(out.order_id) == list(ref.order_id)


def test_drop_duplicates_and_rename(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    out = run(sample_data, [{"op": "drop_duplicates", "subset": ["region", "quantity"]}, {"op": "rename", "columns": {"quantity": "qty"}}])
    assert len(out) == len(sales_frame.drop_duplicates(["region", "quantity"]))
    assert "qty" in out.columns and "quantity" not in out.columns


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_join_with_csv_source(sample_data: dict[str, Path], sales_frame: pd.DataFrame, how: str) -> None:
    products = pd.read_csv(sample_data["products"])
    products = products[products.product_id % 3 != 0]  # so left/right/outer differ from inner
    small = sample_data["products"].parent / "products_subset.csv"
    products.to_csv(small, index=False)
    out = run(
        sample_data,
        [
            {"op": "select", "columns": ["order_id", "product_id"]},
            {"op": "join", "right": {"format": "csv", "path": str(small)}, "on": ["product_id"], "how": how},
        ],
    )
    ref = sales_frame[["order_id", "product_id"]].merge(products, on="product_id", how=how)
    out = out.sort_values(["order_id", "product_id"], na_position="last")
    ref = ref.sort_values(["order_id", "product_id"], na_position="last")
    same(out, ref)


def test_join_with_differently_named_keys(sample_data: dict[str, Path], sales_frame: pd.DataFrame, tmp_path: Path) -> None:
    products = pd.read_csv(sample_data["products"]).rename(columns={"product_id": "pid"})
    path = tmp_path / "p.csv"
    products.to_csv(path, index=False)
    out = run(
        sample_data,
        [{"op": "join", "right": {"format": "csv", "path": str(path)}, "left_on": ["product_id"], "right_on": ["pid"]}],
    )
    assert len(out) == len(sales_frame)
    assert (out.product_id == out.pid).all()


def test_csv_source_with_column_subset(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": np.arange(100), "b": np.arange(100) * 2.0, "c": ["x"] * 100})
    frame.to_csv(tmp_path / "f.csv", index=False)
    out = run({}, [{"op": "filter", "expr": "a >= 90"}], source={"format": "csv", "path": str(tmp_path / "*.csv"), "columns": ["a", "b"]})
    assert list(out.columns) == ["a", "b"]
    assert list(out.a) == list(range(90, 100))


def test_a_job_reads_only_the_columns_it_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Decimals and dates are cast on read (jobs.sources.plain_types); the casts must not stop
    # dask from pushing the job's two columns into the parquet read.
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq
    from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

    days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 60) for i in range(300)]
    table = pa.table(
        {
            "id": pa.array(range(300), pa.int64()),
            "day": pa.array(days, pa.date32()),
            "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(300)], pa.decimal128(10, 2)),
            "rate": pa.array([decimal.Decimal("0.05")] * 300, pa.decimal128(4, 2)),
            "note": pa.array([f"n{i}" for i in range(300)]),
        }
    )
    for part in range(3):
        pq.write_table(table.slice(part * 100, 100), tmp_path / f"part-{part}.parquet")
    read_partition = ArrowDatasetEngine.read_partition.__func__
    columns_read: list[list[str]] = []

    def recording(cls: Any, fs: Any, pieces: Any, columns: Any, *args: Any, **kwargs: Any) -> Any:
        columns_read.append(sorted(columns))
        return read_partition(cls, fs, pieces, columns, *args, **kwargs)

    monkeypatch.setattr(ArrowDatasetEngine, "read_partition", classmethod(recording))
    steps = [
        {"op": "filter", "expr": "day >= date('2024-02-01')"},
        {"op": "groupby", "by": [], "aggs": {"total": {"func": "sum", "column": "price"}}},
    ]
    out = run({}, steps, source={"format": "parquet", "path": str(tmp_path)})
    frame = table.to_pandas()
    assert out.total.iloc[0] == pytest.approx(float(frame.price[frame.day >= datetime.date(2024, 2, 1)].sum()))
    assert columns_read == [["day", "price"]] * 3


@pytest.mark.parametrize("separate", ["median", "nunique"])
def test_separate_aggregation_beside_others_keeps_one_row_per_group(separate: str) -> None:
    """Regression: median or nunique (each its own reduction) merged with a tree-reduced agg
    over several partitions gave unmatched copies of most groups (db-benchmark groupby q6)."""
    from spillway.jobs.pipeline import _groupby, backend_config
    from spillway.jobs.spec import GroupByStep

    rng = np.random.default_rng(0)
    rows = 50_000
    pdf = pd.DataFrame({"a": rng.integers(1, 31, rows), "b": rng.integers(1, 31, rows), "v": rng.random(rows)})
    step = GroupByStep.model_validate(
        {"op": "groupby", "by": ["a", "b"], "aggs": {"med": {"func": separate, "column": "v"}, "sd": {"func": "std", "column": "v"}}}
    )
    with backend_config("pandas"):
        out = _groupby(dd.from_pandas(pdf, npartitions=8), step, "steps[0]").compute(scheduler="sync")
    expected = pdf.groupby(["a", "b"]).v.agg([separate, "std"]).reset_index()
    got = out.sort_values(["a", "b"]).reset_index(drop=True)
    assert len(got) == len(expected) == 900
    np.testing.assert_allclose(got.med, expected[separate])
    np.testing.assert_allclose(got.sd, expected["std"])


def test_csv_columns_come_in_the_listed_order(tmp_path: Path) -> None:
    pd.DataFrame({"a": [1, 2], "b": ["x", "y"], "c": [0.5, 1.5]}).to_csv(tmp_path / "t.csv", index=False)
    spec = JobSpec.model_validate(
        {"source": {"format": "csv", "path": str(tmp_path / "t.csv"), "columns": ["c", "a"]}, "sink": {"path": str(tmp_path / "out")}}
    )
    with backend_config("pandas"):
        frame = build_frame(spec)
    assert list(frame.columns) == ["c", "a"]
    assert list(frame.compute(scheduler="sync").columns) == ["c", "a"]


@pytest.mark.parametrize("backend", ["pandas", pytest.param("cudf", marks=pytest.mark.gpu)])
def test_min_per_key_from_a_shuffled_groupby_joins_back_on_renamed_keys(tmp_path: Path, backend: Backend) -> None:
    """Regression (TPC-H q02 at SF 1): a groupby over enough partitions to be shuffled, renamed,
    then joined on two keys failed in dask's optimiser (KeyError on the (column, func) columns)."""
    rng = np.random.default_rng(1)
    offers = tmp_path / "offers"
    offers.mkdir()
    for index in range(48):  # enough partitions for dask to shuffle the groupby (split_out > 1)
        pd.DataFrame({"part": rng.integers(0, 2_000, 500), "cost": rng.integers(1, 1_000, 500).astype(float)}).to_parquet(
            offers / f"{index:02d}.parquet", index=False
        )
    spec = JobSpec.model_validate(
        {
            "sources": {
                "offers": {"format": "parquet", "path": str(offers)},
                "cheapest": {
                    "from": "offers",
                    "steps": [
                        {"op": "groupby", "by": ["part"], "aggs": {"min_cost": {"func": "min", "column": "cost"}}},
                        {"op": "rename", "columns": {"part": "m_part"}},
                    ],
                },
            },
            "source": "offers",
            "steps": [{"op": "join", "how": "semi", "right": "cheapest", "left_on": ["part", "cost"], "right_on": ["m_part", "min_cost"]}],
            "sink": {"path": str(tmp_path / "out")},
        }
    )
    with backend_config(backend):
        out = build_frame(spec).optimize().compute(scheduler="sync")
    if backend == "cudf":
        out = out.to_pandas()
    everything = pd.concat(pd.read_parquet(f) for f in sorted(offers.iterdir()))
    expected = everything[everything.cost == everything.groupby("part").cost.transform("min")]
    assert len(out) == len(expected) > 0
    assert sorted(zip(out.part, out.cost)) == sorted(zip(expected.part, expected.cost))


def test_two_outputs_of_the_same_aggregation(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    aggs = {"total": {"func": "sum", "column": "amount"}, "again": {"func": "sum", "column": "amount"}, "rows": {"func": "size"}}
    out = run(sample_data, [{"op": "groupby", "by": ["region"], "aggs": aggs}])
    assert list(out.columns) == ["region", "total", "again", "rows"]
    expected = sales_frame.groupby("region").amount.sum()
    for _, row in out.iterrows():
        assert row.total == pytest.approx(expected[row.region]) and row.again == row.total
