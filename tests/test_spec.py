"""JobSpec shape and the schema check that runs before any cluster work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from spillway.jobs.errors import ExpressionError, SourceNotFound, SpecError, UnknownColumn
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import check_spec


def spec(data: dict[str, Path], steps: list[dict[str, Any]], **sink: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "source": {"format": "parquet", "path": str(data["sales"])},
            "steps": steps,
            "sink": {"path": "/tmp/unused-sink", **sink},
        }
    )


def test_extra_fields_are_forbidden(sample_data: dict[str, Path]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        JobSpec.model_validate({"source": {"format": "parquet", "path": "x"}, "sink": {"path": "y"}, "color": "red"})


def test_unknown_step_is_rejected_by_the_union() -> None:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate({"source": {"format": "parquet", "path": "x"}, "steps": [{"op": "explode"}], "sink": {"path": "y"}})
    assert info.value.errors()[0]["type"] == "union_tag_invalid"


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"op": "join", "right": {"format": "csv", "path": "p"}}, "give 'on'"),
        ({"op": "join", "right": {"format": "csv", "path": "p"}, "on": ["a"], "left_on": ["a"]}, "not both"),
        ({"op": "join", "right": {"format": "csv", "path": "p"}, "left_on": ["a"], "right_on": ["a", "b"]}, "same number"),
        ({"op": "sort", "by": ["a", "b"], "descending": [True]}, "1 flags for 2 sort keys"),
        ({"op": "groupby", "by": ["a"], "aggs": {"n": {"func": "size", "column": "a"}}}, "takes no column"),
        ({"op": "groupby", "by": ["a"], "aggs": {"n": {"func": "sum"}}}, "needs a column"),
        ({"op": "limit", "n": -1}, "greater than or equal to 0"),
        ({"op": "select", "columns": []}, "at least 1"),
    ],
)
def test_step_shape_errors(step: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobSpec.model_validate({"source": {"format": "parquet", "path": "x"}, "steps": [step], "sink": {"path": "y"}})


def test_valid_spec_yields_output_schema(sample_data: dict[str, Path]) -> None:
    job = spec(
        sample_data,
        [
            {"op": "filter", "expr": "amount > 0"},
            {"op": "assign", "column": "net", "expr": "amount * (1 - fillna(discount, 0))"},
            {"op": "join", "right": {"format": "csv", "path": str(sample_data["products"])}, "on": ["product_id"]},
            {"op": "rename", "columns": {"category": "cat"}},
            {"op": "groupby", "by": ["region", "cat"], "aggs": {"revenue": {"func": "sum", "column": "net"}, "n": {"func": "size"}}},
        ],
    )
    assert list(check_spec(job)) == ["region", "cat", "revenue", "n"]


@pytest.mark.parametrize(
    ("steps", "field", "fragment"),
    [
        ([{"op": "filter", "expr": "amout > 0"}], "steps[0].expr", "step 0 (filter): unknown column 'amout'"),
        ([{"op": "select", "columns": ["region"]}, {"op": "filter", "expr": "amount > 0"}], "steps[1].expr", "unknown column 'amount'"),
        ([{"op": "rename", "columns": {"amount": "amt"}}, {"op": "sort", "by": ["amount"]}], "steps[1].by", "step 1 (sort)"),
        ([{"op": "groupby", "by": ["regio"], "aggs": {"n": {"func": "size"}}}], "steps[0].by", "unknown column 'regio'"),
        ([{"op": "groupby", "by": ["region"], "aggs": {"n": {"func": "sum", "column": "nope"}}}], "steps[0].aggs.n.column", "'nope'"),
        ([{"op": "drop_duplicates", "subset": ["x"]}], "steps[0].subset", "unknown column 'x'"),
    ],
)
def test_unknown_columns_name_step_and_column(sample_data: dict[str, Path], steps: list[dict[str, Any]], field: str, fragment: str) -> None:
    with pytest.raises(UnknownColumn) as info:
        check_spec(spec(sample_data, steps))
    assert info.value.field == field
    assert fragment in info.value.message


def test_join_keys_checked_on_each_side(sample_data: dict[str, Path]) -> None:
    step = {"op": "join", "right": {"format": "csv", "path": str(sample_data["products"])}, "left_on": ["product_id"], "right_on": ["pid"]}
    with pytest.raises(UnknownColumn) as info:
        check_spec(spec(sample_data, [step]))
    assert info.value.field == "steps[0].right_on"
    assert "right side" in info.value.message


def test_sum_of_a_string_column_is_refused(sample_data: dict[str, Path]) -> None:
    with pytest.raises(SpecError, match="cannot sum column 'region' of kind string"):
        check_spec(spec(sample_data, [{"op": "groupby", "by": ["product_id"], "aggs": {"x": {"func": "sum", "column": "region"}}}]))


def test_missing_source_files(tmp_path: Path) -> None:
    job = JobSpec.model_validate({"source": {"format": "parquet", "path": str(tmp_path / "nothing/*.parquet")}, "sink": {"path": "y"}})
    with pytest.raises(SourceNotFound) as info:
        check_spec(job)
    assert info.value.field == "source.path"


def test_source_columns_subset_checked(sample_data: dict[str, Path]) -> None:
    job = JobSpec.model_validate({"source": {"format": "parquet", "path": str(sample_data["sales"]), "columns": ["amount", "nope"]}, "sink": {"path": "y"}})
    with pytest.raises(UnknownColumn) as info:
        check_spec(job)
    assert info.value.field == "source.columns"


def test_unsafe_expression_is_refused_before_work(sample_data: dict[str, Path]) -> None:
    with pytest.raises(ExpressionError) as info:
        check_spec(spec(sample_data, [{"op": "filter", "expr": "amount.__class__ == 1"}]))
    assert info.value.field == "steps[0].expr"


def test_partition_on_must_exist(sample_data: dict[str, Path]) -> None:
    with pytest.raises(UnknownColumn) as info:
        check_spec(spec(sample_data, [], partition_on=["nope"]))
    assert info.value.field == "sink.partition_on"
