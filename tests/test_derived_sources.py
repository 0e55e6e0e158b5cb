"""Derived sources: ``sources: {name: {from: other, steps: [...]}}``.

Results are checked against plain pandas on the conftest sample data (sales in 4 parquet
files, products as CSV); errors keep the user's path under ``sources``; cycles are refused;
a derived source is checked and built once however often it is used.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pytest
from pydantic import ValidationError

import spillway.jobs.validate
from spillway.jobs.errors import SourceNotFound, TypeMismatch, UnknownColumn
from spillway.jobs.pipeline import NamedFrames, backend_config, build_frame
from spillway.jobs.sandbox import PathNotAllowed, check_paths
from spillway.jobs.sources import read_schema
from spillway.jobs.spec import DerivedSource, JobSpec, SourceSpec
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import check_spec
from spillway.service.client import ApiError, SpillwayClient
from spillway.service.errors import field_path
from tests.conftest import wait_terminal


def files(data: dict[str, Path], name: str = "sales") -> dict[str, Any]:
    path = data[name]
    return {"format": "csv" if path.suffix == ".csv" else "parquet", "path": str(path)}


def job(source: Any, steps: list[dict[str, Any]], sink: str = "/tmp/unused-sink", **sources: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate({"sources": sources, "source": source, "steps": steps, "sink": {"path": sink}})


def run(spec: JobSpec) -> pd.DataFrame:
    check_spec(spec)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(spec).compute().reset_index(drop=True)


def same(actual: pd.DataFrame, expected: pd.DataFrame, sort_by: list[str]) -> None:
    actual = actual.sort_values(sort_by).reset_index(drop=True)
    expected = expected.sort_values(sort_by).reset_index(drop=True)
    pd.testing.assert_frame_equal(actual, expected, check_dtype=False, rtol=1e-9)


def validation_errors(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(field, error type, message) of each problem the model finds in ``document``."""
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(document)
    return [(field_path(e["loc"]), e["type"], e["msg"]) for e in info.value.errors()]


@pytest.fixture(scope="module")
def products() -> pd.DataFrame:
    from spillway.jobs.samples import products_frame

    return products_frame()


# Semantics, against plain pandas


def test_a_filtered_source_in_a_semi_join_is_exists_with_a_condition(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    spec = job(
        "sales",
        [{"op": "join", "how": "semi", "right": "big_north", "on": ["customer_id"]}, {"op": "select", "columns": ["order_id", "customer_id"]}],
        sales=files(sample_data),
        big_north={"from": "sales", "steps": [{"op": "filter", "expr": "region == 'north' and amount > 120"}]},
    )
    big = sales_frame.loc[(sales_frame.region == "north") & (sales_frame.amount > 120), "customer_id"]
    expected = sales_frame.loc[sales_frame.customer_id.isin(big), ["order_id", "customer_id"]]
    assert 0 < len(expected) < len(sales_frame)
    same(run(spec), expected, ["order_id"])


def test_an_aggregated_source_joined_back_is_a_correlated_subquery(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    spec = job(
        "sales",
        [
            {"op": "join", "right": "product_average", "on": ["product_id"]},
            {"op": "filter", "expr": "quantity > avg_quantity"},
            {"op": "select", "columns": ["order_id", "quantity", "avg_quantity"]},
        ],
        sales=files(sample_data),
        product_average={
            "from": "sales",
            "steps": [{"op": "groupby", "by": ["product_id"], "aggs": {"avg_quantity": {"func": "mean", "column": "quantity"}}}],
        },
    )
    average = sales_frame.groupby("product_id").quantity.mean().rename("avg_quantity").reset_index()
    merged = sales_frame.merge(average, on="product_id")
    expected = merged.loc[merged.quantity > merged.avg_quantity, ["order_id", "quantity", "avg_quantity"]]
    same(run(spec), expected, ["order_id"])


def test_derived_from_derived_with_joins_inside_and_used_twice(
    sample_data: dict[str, Path], sales_frame: pd.DataFrame, products: pd.DataFrame
) -> None:
    # priced joins a file source inside its steps; per_category is derived from priced; the
    # job reads priced as its source and joins per_category: priced serves twice.
    spec = job(
        "priced",
        [
            {"op": "join", "right": "per_category", "on": ["category"]},
            {"op": "assign", "column": "share", "expr": "net / category_net"},
            {"op": "select", "columns": ["order_id", "category", "share"]},
        ],
        sales=files(sample_data),
        products=files(sample_data, "products"),
        priced={
            "from": "sales",
            "steps": [
                {"op": "filter", "expr": "region != 'test' and amount > 0"},
                {"op": "join", "right": "products", "on": ["product_id"]},
                {"op": "assign", "column": "net", "expr": "amount * (1 - fillna(discount, 0))"},
            ],
        },
        per_category={"from": "priced", "steps": [{"op": "groupby", "by": ["category"], "aggs": {"category_net": {"func": "sum", "column": "net"}}}]},
    )
    priced = sales_frame[(sales_frame.region != "test") & (sales_frame.amount > 0)].merge(products, on="product_id")
    priced = priced.assign(net=priced.amount * (1 - priced.discount.fillna(0)))
    totals = priced.groupby("category").net.sum().rename("category_net").reset_index()
    merged = priced.merge(totals, on="category")
    expected = merged.assign(share=merged.net / merged.category_net)[["order_id", "category", "share"]]
    assert list(check_spec(spec)) == ["order_id", "category", "share"]
    same(run(spec), expected, ["order_id"])


def test_a_scalar_subquery_is_one_row_joined_on_a_constant(sample_data: dict[str, Path], sales_frame: pd.DataFrame) -> None:
    spec = job(
        "sales",
        [
            {"op": "assign", "column": "one", "expr": "1"},
            {"op": "join", "right": "overall", "on": ["one"]},
            {"op": "filter", "expr": "amount > 3 * average"},
            {"op": "select", "columns": ["order_id", "amount"]},
        ],
        sales=files(sample_data),
        overall={
            "from": "sales",
            "steps": [
                {"op": "groupby", "by": [], "aggs": {"average": {"func": "mean", "column": "amount"}}},
                {"op": "assign", "column": "one", "expr": "1"},
            ],
        },
    )
    expected = sales_frame.loc[sales_frame.amount > 3 * sales_frame.amount.mean(), ["order_id", "amount"]]
    assert len(expected) > 0
    same(run(spec), expected, ["order_id"])


# Errors keep the user's path


@pytest.mark.parametrize(
    ("derived", "field", "fragment"),
    [
        ({"from": "sales", "steps": [{"op": "limit", "n": -1}]}, "sources.d.steps[0].n", "greater than or equal to 0"),
        ({"from": "sales", "steps": [{"op": "filter", "expr": ""}]}, "sources.d.steps[0].expr", "at least 1 character"),
        ({"from": "sales", "steps": [{"op": "sort", "by": ["a"], "descnding": True}]}, "sources.d.steps[0].descnding", "Extra inputs"),
        ({"from": "sales", "steps": [], "path": "x"}, "sources.d.path", "Extra inputs"),
        ({"from": "sales"}, "sources.d.steps", "Field required"),
        ({"from": "no such name", "steps": []}, "sources.d.from", "should match pattern"),
    ],
)
def test_shape_errors_inside_a_derived_source_name_its_field(derived: dict[str, Any], field: str, fragment: str) -> None:
    problems = validation_errors({"sources": {"sales": {"format": "parquet", "path": "s"}, "d": derived}, "source": "d", "sink": {"path": "o"}})
    assert problems[0][0] == field and fragment in problems[0][2]


def test_undefined_names_in_a_derived_source_name_the_field_and_the_defined_names() -> None:
    derived = {"from": "sale", "steps": [{"op": "join", "right": "product", "on": ["product_id"]}]}
    problems = validation_errors({"sources": {"sales": {"format": "parquet", "path": "s"}, "d": derived}, "source": "d", "sink": {"path": "o"}})
    assert problems == [
        ("sources.d.from", "unknown_source", "no source named 'sale' under sources; defined: sales, d"),
        ("sources.d.steps[0].right", "unknown_source", "no source named 'product' under sources; defined: sales, d"),
    ]


def test_check_errors_inside_a_derived_source_name_the_step_and_field(sample_data: dict[str, Path]) -> None:
    def check(*steps: dict[str, Any], main: list[dict[str, Any]] | None = None) -> Any:
        return check_spec(job("d", main or [], sales=files(sample_data), products=files(sample_data, "products"), d={"from": "sales", "steps": list(steps)}))

    with pytest.raises(UnknownColumn) as unknown:
        check({"op": "select", "columns": ["order_id"]}, {"op": "filter", "expr": "amout > 1"})
    assert unknown.value.field == "sources.d.steps[1].expr"
    assert unknown.value.message == "source 'd' step 1 (filter): unknown column 'amout'; available: order_id"
    with pytest.raises(TypeMismatch) as mismatch:
        check({"op": "filter", "expr": "region > 5"})
    assert mismatch.value.field == "sources.d.steps[0].expr" and mismatch.value.message.startswith("source 'd' step 0 (filter): cannot compare")
    with pytest.raises(TypeMismatch) as keys:
        check({"op": "join", "right": "products", "left_on": ["region"], "right_on": ["product_id"]})
    assert keys.value.field == "sources.d.steps[0].left_on"
    with pytest.raises(UnknownColumn) as after:  # the job's own steps see the derived source's columns
        check({"op": "select", "columns": ["order_id"]}, main=[{"op": "select", "columns": ["amount"]}])
    assert after.value.field == "steps[0].columns"


def test_missing_files_under_a_derived_source_name_the_file_source(sample_data: dict[str, Path], tmp_path: Path) -> None:
    spec = job("d", [], gone={"format": "parquet", "path": str(tmp_path / "none/*.parquet")}, d={"from": "gone", "steps": []})
    with pytest.raises(SourceNotFound) as info:
        check_spec(spec)
    assert info.value.field == "sources.gone.path"


def test_an_unused_derived_source_is_checked_too(sample_data: dict[str, Path]) -> None:
    spec = job("sales", [], sales=files(sample_data), unused={"from": "sales", "steps": [{"op": "filter", "expr": "nope > 1"}]})
    with pytest.raises(UnknownColumn) as info:
        check_spec(spec)
    assert info.value.field == "sources.unused.steps[0].expr"


# Cycles


def _derived(source: str, *joins: str) -> dict[str, Any]:
    return {"from": source, "steps": [{"op": "join", "right": name, "on": ["k"]} for name in joins]}


@pytest.mark.parametrize(
    ("sources", "field", "cycle"),
    [
        ({"a": _derived("a")}, "sources.a.from", "a → a"),
        ({"a": _derived("b"), "b": _derived("a")}, "sources.b.from", "a → b → a"),
        ({"a": _derived("b"), "b": _derived("c"), "c": _derived("a")}, "sources.c.from", "a → b → c → a"),
        ({"a": _derived("files", "a")}, "sources.a.steps[0].right", "a → a"),
        ({"a": _derived("files", "b"), "b": _derived("files", "files", "a")}, "sources.b.steps[1].right", "a → b → a"),
        ({"ok": _derived("files"), "a": _derived("ok", "b"), "b": _derived("ok", "a")}, "sources.b.steps[0].right", "a → b → a"),
    ],
)
def test_cycles_are_refused_naming_the_cycle(sources: dict[str, Any], field: str, cycle: str) -> None:
    document = {"sources": {"files": {"format": "csv", "path": "f"}, **sources}, "source": "files", "sink": {"path": "o"}}
    assert validation_errors(document) == [
        (field, "source_cycle", f"sources form a cycle: {cycle}; a derived source cannot depend on itself")
    ]


def test_shared_ancestors_are_not_a_cycle() -> None:
    # A diamond: left and right both start from base; top joins them; the job joins base again.
    sources = {"files": {"format": "csv", "path": "f"}, "base": _derived("files"), "left": _derived("base"), "right": _derived("base"), "top": _derived("left", "right", "base")}
    spec = JobSpec.model_validate({"sources": sources, "source": "top", "steps": [{"op": "join", "right": "base", "on": ["k"]}], "sink": {"path": "o"}})
    assert set(spec.derived_sources()) == {"base", "left", "right", "top"}


# Checked once, built once, read once


def test_each_source_is_read_and_each_derived_source_checked_once(sample_data: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    reads: Counter[str] = Counter()
    parsed: Counter[str] = Counter()

    def counting_read(source: SourceSpec, *, field: str = "source") -> Any:
        reads[field] += 1
        return read_schema(source, field=field)

    real_parse = spillway.jobs.validate.parse_expression

    def counting_parse(text: str, *, field: str | None = None) -> Any:
        parsed[text] += 1
        return real_parse(text, field=field)

    monkeypatch.setattr(spillway.jobs.validate, "parse_expression", counting_parse)
    spec = job(
        "north",
        [{"op": "join", "right": "north", "on": ["order_id"], "right_suffix": "_1"}, {"op": "join", "right": "per_region", "on": ["region"]}],
        sales=files(sample_data),
        north={"from": "sales", "steps": [{"op": "filter", "expr": "region == 'north'"}]},
        per_region={"from": "north", "steps": [{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "size"}}}]},
    )
    check_spec(spec, counting_read)
    assert reads == {"sources.sales": 1}
    assert parsed == {"region == 'north'": 1}


def test_a_name_is_built_once_and_its_files_are_read_once(sample_data: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    engine = pytest.importorskip("dask.dataframe.io.parquet.arrow").ArrowDatasetEngine
    read_partition = engine.read_partition.__func__
    pieces: Counter[str] = Counter()

    def counting(cls: Any, fs: Any, parts: Any, *args: Any, **kwargs: Any) -> Any:
        # One piece is (path, row groups, partition keys); several files may make one partition.
        pieces.update(str(part[0]) for part in (parts if isinstance(parts, list) else [parts]))
        return read_partition(cls, fs, parts, *args, **kwargs)

    spec = job(
        "north",
        [{"op": "assign", "column": "one", "expr": "1"}, {"op": "join", "right": "total", "on": ["one"]}],
        sales=files(sample_data),
        north={"from": "sales", "steps": [{"op": "filter", "expr": "region == 'north'"}]},
        total={"from": "north", "steps": [{"op": "groupby", "by": [], "aggs": {"n": {"func": "size"}}}, {"op": "assign", "column": "one", "expr": "1"}]},
    )
    frames = NamedFrames(spec)
    assert frames.frame_of("north", "source") is frames.frame_of("north", "steps[1].right")
    monkeypatch.setattr(engine, "read_partition", classmethod(counting))
    out = run(spec)
    assert len(out) == out.n.iloc[0] > 0
    sales_files = sorted(str(p) for p in sample_data["sales"].glob("*.parquet"))
    assert sorted(pieces) == sales_files and set(pieces.values()) == {1}, pieces


# The model's other faces: serialisation, schema, sandbox


def test_round_trip_keeps_from_and_the_schema_documents_it(sample_data: dict[str, Path]) -> None:
    spec = job("d", [], sales=files(sample_data), d={"from": "sales", "steps": [{"op": "limit", "n": 5}]})
    dumped = spec.model_dump(mode="json")
    assert dumped["sources"]["d"] == {"from": "sales", "steps": [{"op": "limit", "n": 5}]}
    assert JobSpec.model_validate(dumped) == spec and isinstance(spec.sources["d"], DerivedSource)
    schema = JobSpec.model_json_schema()
    assert schema["$defs"]["DerivedSource"]["required"] == ["from", "steps"]


def test_the_sandbox_checks_file_sources_inside_derived_steps_once_each(sample_data: dict[str, Path]) -> None:
    secret = {"format": "csv", "path": "/etc/passwd"}
    spec = job("d", [], sales=files(sample_data), d={"from": "sales", "steps": [{"op": "join", "right": secret, "on": ["k"]}]}, e={"from": "d", "steps": []})
    assert [field for field, _ in spec.source_fields()] == ["sources.sales", "sources.d.steps[0].right"]
    with pytest.raises(PathNotAllowed) as info:
        check_paths(spec, ["/tmp"])
    assert info.value.field == "sources.d.steps[0].right.path"


# Through the live service


def test_a_job_with_derived_sources_through_the_service(
    api: SpillwayClient, sample_data: dict[str, Path], sales_frame: pd.DataFrame, products: pd.DataFrame, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    document = {
        "name": "derived_e2e",
        "sources": {
            "sales": files(sample_data),
            "products": files(sample_data, "products"),
            "priced": {"from": "sales", "steps": [{"op": "join", "right": "products", "on": ["product_id"]}, {"op": "filter", "expr": "amount > 0"}]},
            "per_category": {"from": "priced", "steps": [{"op": "groupby", "by": ["category"], "aggs": {"revenue": {"func": "sum", "column": "amount"}}}]},
        },
        "source": "priced",
        "steps": [
            {"op": "join", "how": "semi", "right": "per_category", "on": ["category"]},
            {"op": "groupby", "by": ["region"], "aggs": {"revenue": {"func": "sum", "column": "amount"}, "orders": {"func": "size"}}},
        ],
        "sink": {"path": str(out)},
    }
    job_view = wait_terminal(api, api.submit(document).id)
    assert job_view.state == JobStatus.SUCCEEDED, job_view.error
    assert job_view.spec.model_copy(update={"engine": None}) == JobSpec.model_validate(document)  # the api fixture names the engine
    assert job_view.progress.stages and all(stage.done == stage.total for stage in job_view.progress.stages)
    priced = sales_frame.merge(products, on="product_id").query("amount > 0")
    expected = priced.groupby("region").agg(revenue=("amount", "sum"), orders=("amount", "size")).reset_index()
    same(pd.read_parquet(out).astype({"region": "string"}), expected, ["region"])

    document["sources"]["per_category"]["steps"].append({"op": "join", "right": "priced_again", "on": ["category"]})
    document["sources"]["priced_again"] = {"from": "per_category", "steps": []}
    with pytest.raises(ApiError) as info:
        api.submit({**document, "sink": {"path": str(tmp_path / "never")}})
    assert info.value.status == 422 and info.value.detail.field == "sources.priced_again.from"
    assert "per_category → priced_again → per_category" in info.value.detail.message
