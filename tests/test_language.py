"""The spec language's analytical features on pandas-backed dask, each against a
reference written in plain pandas (never through the spec code), and the errors a
bad spec gets before any cluster work."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from spillway.jobs.errors import SourceNotFound, UnknownColumn
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.sandbox import PathNotAllowed, check_paths
from spillway.jobs.sources import read_schema
from spillway.jobs.spec import JobSpec, SourceSpec
from spillway.jobs.validate import check_spec
from spillway.service.errors import field_path

ROWS = 3_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Orders in 6 parquet files (so dask has 6 partitions), customers and a key list with
    nulls and repeats, a JSON-lines file, a hive-partitioned directory and a parquet file
    of decimals and dates."""
    root = tmp_path_factory.mktemp("language")
    orders = orders_frame()
    (root / "orders").mkdir()
    for index in range(6):
        orders.iloc[index * ROWS // 6 : (index + 1) * ROWS // 6].to_parquet(root / "orders" / f"part-{index}.parquet", index=False)
    customers_frame().to_parquet(root / "customers.parquet", index=False)
    keys_frame().to_parquet(root / "keys.parquet", index=False)
    with open(root / "events.jsonl", "w") as out:
        for row in events_rows():
            out.write(json.dumps(row) + "\n")
    hive = orders.assign(year=2020 + orders.order_id % 3, shard=np.where(orders.order_id % 2 == 0, "even", "odd"))
    pq.write_to_dataset(pa.Table.from_pandas(hive, preserve_index=False), root / "hive", partition_cols=["year", "shard"])
    pq.write_table(typed_table(), root / "typed.parquet")
    return {
        "orders": root / "orders",
        "customers": root / "customers.parquet",
        "keys": root / "keys.parquet",
        "events": root / "events.jsonl",
        "hive": root / "hive",
        "typed": root / "typed.parquet",
    }


def orders_frame() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    customer = rng.integers(0, 120, ROWS).astype("float64")
    customer[::37] = np.nan  # null join keys
    return pd.DataFrame(
        {
            "order_id": np.arange(ROWS, dtype="int64"),
            "customer": customer,
            "shop": rng.choice(["a", "b", "c", "d"], ROWS),
            "price": np.round(rng.uniform(1, 500, ROWS), 2),
            "discount": rng.choice([0.0, 0.05, 0.1], ROWS),
            "quantity": rng.integers(1, 20, ROWS),
        }
    )


def customers_frame() -> pd.DataFrame:
    ids = np.arange(0, 120, dtype="int64")
    return pd.DataFrame({"cid": ids.astype("float64"), "segment": np.where(ids % 4 == 0, "retail", "trade"), "score": ids * 1.5})


def keys_frame() -> pd.DataFrame:
    """(customer, shop) pairs to match on two keys with other names: repeats and nulls included."""
    return pd.DataFrame(
        {
            "cust": [1.0, 1.0, 2.0, 5.0, 7.0, np.nan, 9.0, 9.0, 30.0, 31.0],
            "store": ["a", "a", "b", "c", None, "a", "d", "d", "a", "b"],
        }
    )


def events_rows() -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    return [{"id": i, "kind": ["click", "view", "buy"][i % 3], "value": round(float(rng.uniform(0, 10)), 3)} for i in range(500)]


def typed_table() -> pa.Table:
    days = [datetime.date(2023, 12, 30) + datetime.timedelta(days=i) for i in range(40)]
    return pa.table(
        {
            "day": pa.array(days, pa.date32()),
            "price": pa.array([decimal.Decimal(f"{i}.{i % 100:02d}") for i in range(40)], pa.decimal128(15, 2)),
            "rate": pa.array([decimal.Decimal("0.05") if i % 2 else decimal.Decimal("0.07") for i in range(40)], pa.decimal128(15, 2)),
            "tag": pa.array(["x", "y"] * 20, pa.string_view()),
        }
    )


def job(source: Any, steps: list[dict[str, Any]], **sources: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate({"sources": sources, "source": source, "steps": steps, "sink": {"path": "/tmp/unused-sink"}})


def parquet(path: Path, **options: Any) -> dict[str, Any]:
    return {"format": "parquet", "path": str(path), **options}


def run(spec: JobSpec) -> pd.DataFrame:
    check_spec(spec)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(spec).compute().reset_index(drop=True)


def same(actual: pd.DataFrame, expected: pd.DataFrame, sort_by: list[str] | None = None) -> None:
    if sort_by:
        actual = actual.sort_values(sort_by, na_position="last")
        expected = expected.sort_values(sort_by, na_position="last")
    pd.testing.assert_frame_equal(actual.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False, rtol=1e-9)


# Several named sources


def test_named_sources_for_the_source_and_a_join(data: dict[str, Path]) -> None:
    spec = job(
        "orders",
        [{"op": "join", "right": "customers", "left_on": ["customer"], "right_on": ["cid"]}, {"op": "select", "columns": ["order_id", "segment"]}],
        orders=parquet(data["orders"]),
        customers=parquet(data["customers"]),
    )
    orders, customers = orders_frame(), customers_frame()
    ref = orders.merge(customers, left_on="customer", right_on="cid")[["order_id", "segment"]]
    same(run(spec), ref, ["order_id"])
    assert list(check_spec(spec)) == ["order_id", "segment"]


def test_inline_and_named_sources_mix_and_one_name_serves_twice(data: dict[str, Path]) -> None:
    spec = job(
        parquet(data["orders"]),
        [
            {"op": "join", "right": "customers", "left_on": ["customer"], "right_on": ["cid"]},
            {"op": "join", "right": "customers", "left_on": ["customer"], "right_on": ["cid"], "right_suffix": "_again"},
        ],
        customers=parquet(data["customers"]),
    )
    out = run(spec)
    assert {"segment", "segment_again", "score_again"} <= set(out.columns)
    assert (out.segment == out.segment_again).all() and len(out) == orders_frame().customer.notnull().sum()


# Semi and anti joins on two keys with different names


def _pairs_in_keys(orders: pd.DataFrame) -> pd.Series:
    keys = keys_frame()
    present = {(c, s) for c, s in zip(keys.cust, keys.store) if not pd.isna(c) and s is not None}
    return pd.Series([(c, s) in present for c, s in zip(orders.customer, orders.shop)], index=orders.index)


@pytest.mark.parametrize("how", ["semi", "anti"])
def test_semi_and_anti_joins_on_two_keys(data: dict[str, Path], how: str) -> None:
    spec = job(
        "orders",
        [{"op": "join", "how": how, "right": "keys", "left_on": ["customer", "shop"], "right_on": ["cust", "store"]}],
        orders=parquet(data["orders"]),
        keys=parquet(data["keys"]),
    )
    orders = orders_frame()
    matched = _pairs_in_keys(orders)
    ref = orders[matched if how == "semi" else ~matched]
    out = run(spec)
    assert list(out.columns) == list(orders.columns)  # no column from the right side
    same(out, ref, ["order_id"])
    assert list(check_spec(spec)) == list(orders.columns)
    if how == "anti":  # like SQL's NOT EXISTS: a null key matches nothing, so the row stays
        assert out.customer.isnull().sum() == orders.customer.isnull().sum() > 0
    else:
        assert len(out) == matched.sum() > 0  # repeated right keys do not repeat left rows


# Aggregations: median, over an expression, HAVING, over all rows


def test_median_and_aggregations_over_expressions(data: dict[str, Path]) -> None:
    aggs = {
        "revenue": {"func": "sum", "expr": "price * (1 - discount)"},
        "avg_revenue": {"func": "mean", "expr": "price * (1 - discount)"},
        "med_price": {"func": "median", "column": "price"},
        "med_revenue": {"func": "median", "expr": "price * (1 - discount)"},
        "big": {"func": "sum", "expr": "1 if quantity >= 10 else 0"},
        "with_customer": {"func": "count", "column": "customer"},
        "rows": {"func": "size"},
        "customers": {"func": "nunique", "column": "customer"},
    }
    out = run(job(parquet(data["orders"]), [{"op": "groupby", "by": ["shop"], "aggs": aggs}]))
    orders = orders_frame()
    orders["revenue"] = orders.price * (1 - orders.discount)
    grouped = orders.groupby("shop")
    ref = pd.DataFrame(
        {
            "revenue": grouped.revenue.sum(),
            "avg_revenue": grouped.revenue.mean(),
            "med_price": grouped.price.median(),
            "med_revenue": grouped.revenue.median(),
            "big": grouped.quantity.apply(lambda q: int((q >= 10).sum())),
            "with_customer": grouped.customer.count(),
            "rows": grouped.size(),
            "customers": grouped.customer.nunique(),
        }
    ).reset_index()
    same(out, ref, ["shop"])


def test_having_is_a_filter_after_groupby(data: dict[str, Path]) -> None:
    steps = [
        {"op": "groupby", "by": ["customer"], "aggs": {"spent": {"func": "sum", "column": "price"}, "n": {"func": "size"}}},
        {"op": "filter", "expr": "spent > 13000 and n >= 20"},
        {"op": "sort", "by": ["spent"], "descending": True},
    ]
    out = run(job(parquet(data["orders"]), steps))
    grouped = orders_frame().groupby("customer", dropna=False)
    ref = pd.DataFrame({"spent": grouped.price.sum(), "n": grouped.size()}).reset_index()
    ref = ref[(ref.spent > 13000) & (ref.n >= 20)].sort_values("spent", ascending=False)
    assert 0 < len(ref) < 60
    same(out, ref)


def test_groupby_without_keys_aggregates_all_rows(data: dict[str, Path]) -> None:
    aggs = {"revenue": {"func": "sum", "expr": "price * discount"}, "n": {"func": "size"}, "med": {"func": "median", "column": "quantity"}}
    out = run(job(parquet(data["orders"]), [{"op": "filter", "expr": "quantity < 10"}, {"op": "groupby", "by": [], "aggs": aggs}]))
    orders = orders_frame()
    kept = orders[orders.quantity < 10]
    ref = pd.DataFrame({"revenue": [(kept.price * kept.discount).sum()], "n": [len(kept)], "med": [kept.quantity.median()]})
    same(out, ref)


# Top-k per group, ordering, limit


def test_top_k_rows_per_group(data: dict[str, Path]) -> None:
    step = {"op": "top_k", "by": ["shop"], "order": [{"column": "quantity", "descending": True}, {"column": "order_id"}], "k": 3}
    out = run(job(parquet(data["orders"]), [step]))
    orders = orders_frame()
    ref = orders.sort_values(["quantity", "order_id"], ascending=[False, True]).groupby("shop").head(3)
    assert len(ref) == 12
    same(out, ref)  # in the step's order, across groups


def test_top_k_groups_on_two_keys_with_nulls(data: dict[str, Path]) -> None:
    step = {"op": "top_k", "by": ["customer", "shop"], "order": [{"column": "price"}], "k": 1}
    out = run(job(parquet(data["orders"]), [step]))
    ref = orders_frame().sort_values("price").groupby(["customer", "shop"], dropna=False).head(1)
    same(out, ref, ["order_id"])


def test_sort_on_mixed_directions_then_limit_is_the_global_top(data: dict[str, Path]) -> None:
    steps = [{"op": "sort", "by": ["discount", "price", "order_id"], "descending": [True, False, True]}, {"op": "limit", "n": 40}]
    out = run(job(parquet(data["orders"]), steps))
    ref = orders_frame().sort_values(["discount", "price", "order_id"], ascending=[False, True, False]).head(40)
    same(out, ref)


# Sources: JSON lines, hive partitions, decimals and dates


def test_jsonl_source_with_columns(data: dict[str, Path]) -> None:
    source = {"format": "jsonl", "path": str(data["events"]), "columns": ["kind", "value"]}
    out = run(job(source, [{"op": "groupby", "by": ["kind"], "aggs": {"total": {"func": "sum", "column": "value"}}}]))
    events = pd.DataFrame(events_rows())
    ref = events.groupby("kind").value.sum().reset_index(name="total")
    same(out, ref, ["kind"])
    assert read_schema(SourceSpec.model_validate(source)) == {"kind": "string", "value": "numeric"}


def test_jsonl_source_in_small_blocks(data: dict[str, Path]) -> None:
    source = {"format": "jsonl", "path": str(data["events"]), "blocksize": "4KiB"}
    spec = job(source, [{"op": "filter", "expr": "kind == 'buy'"}])
    with backend_config("pandas"):
        assert build_frame(spec).npartitions > 1
    events = pd.DataFrame(events_rows())
    same(run(spec), events[events.kind == "buy"], ["id"])


def test_hive_partition_columns_are_in_schema_and_data(data: dict[str, Path]) -> None:
    source = parquet(data["hive"])
    schema = read_schema(SourceSpec.model_validate(source))
    assert schema["year"] == "numeric" and schema["shard"] == "string" and "price" in schema
    steps = [
        {"op": "filter", "expr": "year >= 2021 and shard != 'odd'"},
        {"op": "groupby", "by": ["year", "shard"], "aggs": {"total": {"func": "sum", "column": "price"}}},
    ]
    out = run(job(source, steps))
    orders = orders_frame()
    orders = orders.assign(year=2020 + orders.order_id % 3, shard=np.where(orders.order_id % 2 == 0, "even", "odd"))
    kept = orders[(orders.year >= 2021) & (orders.shard != "odd")]
    ref = kept.groupby(["year", "shard"]).price.sum().reset_index(name="total")
    same(out, ref, ["year"])


def test_decimals_and_dates_from_parquet(data: dict[str, Path]) -> None:
    steps = [
        {"op": "filter", "expr": "day >= date('2024-01-02') and day < date('2024-01-02') + interval(1, 'month') and rate <= 0.05"},
        {"op": "assign", "column": "net", "expr": "price * (1 - rate)"},
        {"op": "assign", "column": "month", "expr": "month(day)"},
        {"op": "groupby", "by": ["month", "tag"], "aggs": {"net": {"func": "sum", "column": "net"}, "first_day": {"func": "min", "column": "day"}}},
    ]
    out = run(job(parquet(data["typed"]), steps))
    typed = typed_table().to_pandas()
    typed = typed.assign(day=pd.to_datetime(typed.day), price=typed.price.astype(float), rate=typed.rate.astype(float))
    kept = typed[(typed.day >= "2024-01-02") & (typed.day < "2024-02-02") & (typed.rate <= 0.05)]
    kept = kept.assign(net=kept.price * (1 - kept.rate), month=kept.day.dt.month, tag=kept.tag.astype(str))
    ref = kept.groupby(["month", "tag"]).agg(net=("net", "sum"), first_day=("day", "min")).reset_index()
    same(out, ref, ["month", "tag"])
    schema = read_schema(SourceSpec.model_validate(parquet(data["typed"])))
    assert schema == {"day": "datetime", "price": "numeric", "rate": "numeric", "tag": "string"}


# Errors a bad spec gets, each naming its field


def test_unknown_source_name_in_a_join_names_the_step(data: dict[str, Path]) -> None:
    with pytest.raises(ValidationError) as info:
        job("orders", [{"op": "filter", "expr": "price > 1"}, {"op": "join", "right": "custs", "on": ["x"]}], orders=parquet(data["orders"]))
    error = info.value.errors()[0]
    assert field_path(error["loc"]) == "steps[1].right"
    assert "no source named 'custs'" in error["msg"] and "defined: orders" in error["msg"]


def test_unknown_source_name_for_the_source() -> None:
    with pytest.raises(ValidationError) as info:
        job("nope", [])
    assert field_path(info.value.errors()[0]["loc"]) == "source"


@pytest.mark.parametrize(
    ("source", "field"),
    [({"format": "xlsx", "path": "x"}, "source.format"), ("bad name", "source"), (5, "source")],
)
def test_source_shape_errors_keep_their_field(source: Any, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        job(source, [])
    assert field_path(info.value.errors()[0]["loc"]) == field


def test_inline_right_errors_keep_their_field() -> None:
    with pytest.raises(ValidationError) as info:
        job({"format": "csv", "path": "x"}, [{"op": "join", "right": {"format": "csv", "path": "p", "colour": 1}, "on": ["a"]}])
    assert field_path(info.value.errors()[0]["loc"]) == "steps[0].right.colour"


def test_missing_files_of_a_named_source_name_it(data: dict[str, Path], tmp_path: Path) -> None:
    spec = job("orders", [{"op": "join", "right": "gone", "on": ["order_id"]}], orders=parquet(data["orders"]), gone=parquet(tmp_path / "none/*.parquet"))
    with pytest.raises(SourceNotFound) as info:
        check_spec(spec)
    assert info.value.field == "sources.gone.path"


def test_named_sources_are_inside_the_data_roots(data: dict[str, Path]) -> None:
    spec = job("orders", [], orders=parquet(data["orders"]), secret={"format": "csv", "path": "/etc/passwd"})
    with pytest.raises(PathNotAllowed) as info:
        check_paths(spec, ["/tmp"])
    assert info.value.field == "sources.secret.path"


@pytest.mark.parametrize(
    ("step", "field", "fragment"),
    [
        ({"op": "groupby", "by": ["shop"], "aggs": {"r": {"func": "sum", "expr": "prise * 2"}}}, "steps[0].aggs.r.expr", "unknown column 'prise'"),
        ({"op": "groupby", "by": ["shop"], "aggs": {"m": {"func": "median", "column": "cost"}}}, "steps[0].aggs.m.column", "'cost'"),
        ({"op": "top_k", "by": ["shp"], "order": [{"column": "price"}], "k": 2}, "steps[0].by", "unknown column 'shp'"),
        ({"op": "top_k", "by": ["shop"], "order": [{"column": "price"}, {"column": "qty"}], "k": 2}, "steps[0].order[1].column", "'qty'"),
        ({"op": "join", "how": "semi", "right": "keys", "left_on": ["customer"], "right_on": ["customer"]}, "steps[0].right_on", "right side"),
    ],
)
def test_bad_columns_name_the_step_and_field(data: dict[str, Path], step: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(UnknownColumn) as info:
        check_spec(job("orders", [step], orders=parquet(data["orders"]), keys=parquet(data["keys"])))
    assert info.value.field == field
    assert fragment in info.value.message


def test_columns_after_a_semi_join_are_the_left_ones(data: dict[str, Path]) -> None:
    steps = [{"op": "join", "how": "anti", "right": "keys", "left_on": ["customer"], "right_on": ["cust"]}, {"op": "select", "columns": ["store"]}]
    with pytest.raises(UnknownColumn) as info:
        check_spec(job("orders", steps, orders=parquet(data["orders"]), keys=parquet(data["keys"])))
    assert info.value.field == "steps[1].columns"


@pytest.mark.parametrize(
    ("agg_or_step", "message"),
    [
        ({"op": "groupby", "by": ["a"], "aggs": {"x": {"func": "sum", "column": "a", "expr": "a + 1"}}}, "not both"),
        ({"op": "groupby", "by": ["a"], "aggs": {"x": {"func": "size", "expr": "a + 1"}}}, "takes no column"),
        ({"op": "groupby", "by": ["a"], "aggs": {"x": {"func": "median"}}}, "needs a column or an expr"),
        ({"op": "top_k", "by": ["a"], "order": [{"column": "b"}], "k": 0}, "greater than or equal to 1"),
        ({"op": "top_k", "by": ["a"], "order": [], "k": 2}, "at least 1"),
        ({"op": "join", "right": "x", "how": "full", "on": ["a"]}, "'inner', 'left', 'right', 'outer', 'semi', 'anti' or 'cross'"),
        ({"op": "join", "right": "x", "how": "cross", "on": ["a"]}, "a cross join pairs every row with every right row and takes no keys"),
    ],
)
def test_step_shape_errors(agg_or_step: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        job({"format": "csv", "path": "p"}, [agg_or_step], x={"format": "csv", "path": "q"})


def test_old_specs_still_read_the_same() -> None:
    old = {"source": {"format": "parquet", "path": "s"}, "steps": [{"op": "join", "right": {"format": "csv", "path": "p"}, "on": ["a"]}], "sink": {"path": "o"}}
    spec = JobSpec.model_validate(old)
    assert spec.sources == {} and isinstance(spec.source, SourceSpec)
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec
    assert [field for field, _ in spec.source_fields()] == ["source", "steps[0].right"]
