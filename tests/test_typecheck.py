"""Type checking before any work: expressions and join keys whose kinds cannot meet are a
422 naming the step, the part of the expression and both kinds; nothing valid is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spillway.jobs.errors import SpecError, TypeMismatch
from spillway.jobs.expr import parse_expression
from spillway.jobs.kinds import kinds_compatible
from spillway.jobs.sources import Schema, pandas_kind
from spillway.jobs.spec import JobSpec, SourceSpec
from spillway.jobs.validate import check_spec
from spillway.service.client import ApiError
from spillway.service.documents import read_mapping
from tests.conftest import ROOT, ServiceProcess
from tests.test_bad_input import base_spec, error_of, post
from tests.test_expr import FEATURES, make_frame

FIELD = "steps[1].expr"
SCHEMA: Schema = {
    "name": "string", "amount": "numeric", "qty": "numeric", "flag": "bool", "shipped": "datetime",
    "blob": "other", "later": "unknown",
}


def kind_of(text: str, schema: Schema = SCHEMA) -> str:
    return parse_expression(text, field=FIELD).infer_kind(schema)


# Expressions on their own


ACCEPTED: list[tuple[str, str]] = [
    ("amount * (1 - qty) / 2 ** qty % 3 // 1", "numeric"),
    ("flag * amount", "numeric"),  # bools compute as 0 and 1
    ("name + '!'", "string"),
    ("shipped + interval(3, 'days')", "datetime"),
    ("interval(1, 'month') + shipped", "datetime"),
    ("shipped - interval(1, 'year')", "datetime"),
    ("shipped - shipped", "unknown"),  # a duration: no kind of its own outside the expression
    ("(shipped - shipped) > interval(2, 'days')", "bool"),
    ("abs(shipped - date('2020-01-01')) < interval(1, 'week') * 2", "bool"),
    ("name == 'x' and amount >= 5 or not flag", "bool"),
    ("0 < qty <= 5.5", "bool"),
    ("flag == 1", "bool"),
    ("shipped < date('1995-03-15')", "bool"),
    ("shipped >= timestamp('1995-03-15 10:00')", "bool"),
    ("shipped > '1995-03-15'", "bool"),  # pandas parses a date-shaped literal
    ("shipped in (date('2020-01-01'), timestamp('2020-01-02 10:00'))", "bool"),
    ("name in ('a', 'b', None)", "bool"),
    ("qty not in (1, 2.5, True)", "bool"),
    ("amount == None", "bool"),
    ("isnull(name) or notnull(shipped) or isnull(blob)", "bool"),
    ("fillna(amount, 0)", "numeric"),
    ("fillna(name, 'none')", "string"),
    ("coalesce(None, name, 'x')", "string"),
    ("coalesce(qty, flag, 0.5)", "numeric"),
    ("round(amount, 2) + abs(qty) + length(name)", "numeric"),
    ("year(shipped) * 100 + month(shipped) + day(shipped)", "numeric"),
    ("lower(upper(substr(name, 1, 2)))", "string"),
    ("contains(name, 'a') or startswith(name, 'b') or endswith(name, 'c')", "bool"),
    ("between(qty, 1, 2.5)", "bool"),
    ("between(shipped, date('2020-01-01'), '2021-01-01')", "bool"),
    ("'big' if amount > 100 else None", "string"),
    ("1 if flag else 0.5", "numeric"),
    ("case(amount > 1, 'a', flag, 'b', 'c')", "string"),
    ("case(flag, shipped, None)", "datetime"),
    ("cast(name, 'int64')", "numeric"),  # a bad value fails on the workers, naming the part
    ("cast(amount, 'string')", "string"),
    ("cast(name, 'datetime64[ns]')", "datetime"),
    ("cast(qty, 'bool')", "bool"),
    ("date('2020-01-01') + interval(1, 'day')", "datetime"),
    ("None", "unknown"),
    ("-flag", "unknown"),  # numpy keeps it a bool column
    ("flag + flag", "unknown"),
]
LOOSE: list[str] = [  # "unknown" and "other" never cause a rejection
    "later + 1", "later + 'x'", "later > 5", "lower(later)", "year(later)", "later and flag", "not later",
    "blob * 2", "blob == 'x'", "blob > shipped", "amount if flag else later", "fillna(blob, 'x')", "later in (1, 'a')",
    "missing_column == 'x'",
]


@pytest.mark.parametrize(("text", "kind"), ACCEPTED)
def test_accepted_expressions_yield_their_kind(text: str, kind: str) -> None:
    assert kind_of(text) == kind


@pytest.mark.parametrize("text", LOOSE)
def test_unknown_kinds_never_reject(text: str) -> None:
    kind_of(text)


def test_columns_carry_their_kind() -> None:
    for column, kind in SCHEMA.items():
        assert kind_of(column) == kind == kind_of(f"col('{column}')")
    assert kind_of('col("unit price")', {"unit price": "numeric"}) == "numeric"


REJECTED: list[tuple[str, str]] = [
    # comparisons, in-lists and between: the two parts and both kinds, where the comparison starts
    ("name > 5", "cannot compare 'name' (string) with 5 (numeric) at col 0"),
    ("name == 5", "cannot compare 'name' (string) with 5 (numeric) at col 0"),
    ("5 != name", "cannot compare 5 (numeric) with 'name' (string) at col 0"),
    ("amount > 1 and lower(name) < amount", "cannot compare 'lower(name)' (string) with 'amount' (numeric) at col 15"),
    ("0 < qty <= 'a'", "cannot compare 'qty' (numeric) with 'a' (string) at col 4"),
    ("shipped > 5", "cannot compare 'shipped' (datetime) with 5 (numeric) at col 0"),
    ("shipped > 'soon'", "cannot compare 'shipped' (datetime) with 'soon' (string) at col 0: write dates as date(\"YYYY-MM-DD\")"),
    ("shipped == name", "cannot compare 'shipped' (datetime) with 'name' (string) at col 0: write dates as date("),
    # isin() does not parse text, so a date written as text never matches
    ("shipped in ('2020-01-02',)", "cannot compare 'shipped' (datetime) with '2020-01-02' (string) at col 0"),
    ("flag == 'yes'", "cannot compare 'flag' (bool) with 'yes' (string) at col 0"),
    ("(shipped - shipped) > 5", "cannot compare 'shipped - shipped' (duration) with 5 (numeric) at col 1"),
    ("name in ('a', 1)", "cannot compare 'name' (string) with 1 (numeric) at col 0"),
    ("qty not in (1, '2')", "cannot compare 'qty' (numeric) with '2' (string) at col 0"),
    ("between(name, 1, 5)", "cannot compare 'name' (string) with 1 (numeric) at col 8"),
    ("between(shipped, date('2020-01-01'), 7)", "cannot compare 'shipped' (datetime) with 7 (numeric) at col 8"),
    # arithmetic
    ("amount + name", "cannot apply '+' to 'amount' (numeric) and 'name' (string) at col 0"),
    ("name * 2", "cannot apply '*' to 'name' (string) and 2 (numeric) at col 0"),
    ("qty - shipped", "cannot apply '-' to 'qty' (numeric) and 'shipped' (datetime) at col 0"),
    ("shipped + shipped", "cannot apply '+' to 'shipped' (datetime) and 'shipped' (datetime) at col 0"),
    ("shipped * 2", "cannot apply '*' to 'shipped' (datetime) and 2 (numeric) at col 0"),
    ("interval(1, 'day') - shipped", "cannot apply '-' to 'interval(1, 'day')' (duration) and 'shipped' (datetime)"),
    ("shipped + 1", "cannot apply '+' to 'shipped' (datetime) and 1 (numeric) at col 0"),
    ("1 + (amount ** name)", "cannot apply '**' to 'amount' (numeric) and 'name' (string) at col 5"),
    ("-name", "cannot apply '-' to 'name' (string) at col 0"),
    # conditions
    ("amount and flag", "'and' needs a condition (bool), got 'amount' (numeric) at col 0"),
    ("flag or name", "'or' needs a condition (bool), got 'name' (string) at col 8"),
    ("not qty", "'not' needs a condition (bool), got 'qty' (numeric) at col 4"),
    ("1 if amount else 0", "'if' needs a condition (bool), got 'amount' (numeric) at col 5"),
    ("case(flag, 1, qty, 2, 0)", "case() needs a condition (bool), got 'qty' (numeric) at col 14"),
    # functions
    ("lower(amount)", "argument 1 of lower() must be of kind string, got 'amount' (numeric) at col 6"),
    ("upper(shipped)", "argument 1 of upper() must be of kind string, got 'shipped' (datetime) at col 6"),
    ("contains(qty, 'a')", "argument 1 of contains() must be of kind string, got 'qty' (numeric) at col 9"),
    ("startswith(flag, 'a')", "argument 1 of startswith() must be of kind string, got 'flag' (bool)"),
    ("endswith(amount, 'a')", "argument 1 of endswith() must be of kind string"),
    ("substr(qty, 1, 2)", "argument 1 of substr() must be of kind string, got 'qty' (numeric)"),
    ("length(amount + 1)", "argument 1 of length() must be of kind string, got 'amount + 1' (numeric) at col 7"),
    ("year(name)", "argument 1 of year() must be of kind datetime, got 'name' (string) at col 5"),
    ("month(amount)", "argument 1 of month() must be of kind datetime, got 'amount' (numeric)"),
    ("day(name + '-01')", "argument 1 of day() must be of kind datetime, got 'name + '-01'' (string) at col 4"),
    ("round(name, 1)", "argument 1 of round() must be of kind numeric, got 'name' (string) at col 6"),
    ("abs(shipped)", "argument 1 of abs() must be of kind numeric, got 'shipped' (datetime) at col 4"),
    # branches and fills must agree
    ("amount if flag else name", "cannot mix 'amount' (numeric) with 'name' (string) in 'if ... else' at col 20"),
    ("case(flag, 'a', amount > 1, 2, 'c')", "cannot mix 'a' (string) with 2 (numeric) in case() at col 28"),
    ("case(flag, shipped, name)", "cannot mix 'shipped' (datetime) with 'name' (string) in case() at col 20"),
    ("fillna(amount, 'none')", "cannot mix 'amount' (numeric) with 'none' (string) in fillna() at col 15"),
    ("fillna(shipped, 0)", "cannot mix 'shipped' (datetime) with 0 (numeric) in fillna() at col 16"),
    ("coalesce(None, name, qty)", "cannot mix 'name' (string) with 'qty' (numeric) in coalesce() at col 21"),
    # nested: the innermost offending part is named
    ("cast(lower(qty), 'string')", "argument 1 of lower() must be of kind string, got 'qty' (numeric) at col 11"),
    ("isnull(name + 1)", "cannot apply '+' to 'name' (string) and 1 (numeric) at col 7"),
]


@pytest.mark.parametrize(("text", "fragment"), REJECTED)
def test_mismatched_kinds_name_the_part_and_both_kinds(text: str, fragment: str) -> None:
    with pytest.raises(TypeMismatch) as caught:
        kind_of(text)
    assert fragment in caught.value.message
    assert caught.value.field == FIELD
    assert caught.value.code == "type_mismatch" and isinstance(caught.value, SpecError)  # hence a 422


def test_columns_are_counted_in_characters_after_leading_space() -> None:
    with pytest.raises(TypeMismatch, match=r"cannot compare 'é' \(string\) with 5 \(numeric\) at col 14"):
        kind_of("  é == 'x' or é > 5", {"é": "string"})


def test_every_expression_that_computes_on_pandas_passes_and_agrees_on_its_kind() -> None:
    # test_expr's features are the language's reference: each evaluates on a real frame
    frame = make_frame()
    schema = {str(column): pandas_kind(dtype) for column, dtype in frame.dtypes.items()}
    for text in FEATURES:
        inferred = kind_of(text, schema)
        actual = pandas_kind(parse_expression(text).evaluate(frame).dtype)
        assert inferred in (actual, "unknown"), text


@pytest.mark.parametrize("text", ["not amount", "lower(qty)", "year(name)"])
def test_what_used_to_fail_on_the_workers_now_fails_before_any_work(text: str) -> None:
    schema = {str(column): pandas_kind(dtype) for column, dtype in make_frame().dtypes.items()}
    with pytest.raises(TypeMismatch):
        kind_of(text, schema)


def test_kinds_compatible() -> None:
    assert kinds_compatible("numeric", "numeric") and kinds_compatible("numeric", "bool")
    assert kinds_compatible("string", "string") and kinds_compatible("datetime", "datetime")
    assert kinds_compatible("unknown", "string") and kinds_compatible("datetime", "other")
    assert not kinds_compatible("string", "numeric") and not kinds_compatible("datetime", "string")
    assert not kinds_compatible("datetime", "numeric") and not kinds_compatible("bool", "string")


# Steps: check_spec against the sample data's real schemas


def job(sample_data: dict[str, Path], steps: list[dict[str, Any]], **sources: Any) -> JobSpec:
    spec = {"sources": sources, "source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": steps}
    return JobSpec.model_validate({**spec, "sink": {"path": "/tmp/unused-sink"}})


def products(sample_data: dict[str, Path]) -> dict[str, Any]:
    return {"format": "csv", "path": str(sample_data["products"])}


@pytest.fixture(scope="module")
def text_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A CSV whose product_id and region hold words and whose ts holds numbers."""
    path = tmp_path_factory.mktemp("keys") / "keys.csv"
    pd.DataFrame({"product_id": ["p1", "p2"], "region": ["north", "south"], "ts": [1, 2]}).to_csv(path, index=False)
    return {"format": "csv", "path": str(path)}


def refused(spec: JobSpec) -> TypeMismatch:
    with pytest.raises(TypeMismatch) as caught:
        check_spec(spec)
    assert caught.value.code == "type_mismatch"
    return caught.value


STEP_REJECTED: list[tuple[list[dict[str, Any]], str, str]] = [
    (
        [{"op": "filter", "expr": "amount > 0"}, {"op": "filter", "expr": "region > 5"}],
        "steps[1].expr",
        "step 1 (filter): cannot compare 'region' (string) with 5 (numeric) at col 0",
    ),
    (
        [{"op": "filter", "expr": "amount * 2"}],
        "steps[0].expr",
        "step 0 (filter): a filter needs a condition (bool), got 'amount * 2' (numeric)",
    ),
    (
        [{"op": "filter", "expr": "lower(region)"}],
        "steps[0].expr",
        "a filter needs a condition (bool), got 'lower(region)' (string)",
    ),
    (
        [{"op": "assign", "column": "x", "expr": "region + quantity"}],
        "steps[0].expr",
        "step 0 (assign): cannot apply '+' to 'region' (string) and 'quantity' (numeric) at col 0",
    ),
    (
        [{"op": "groupby", "by": ["region"], "aggs": {"s": {"func": "sum", "expr": "upper(region)"}}}],
        "steps[0].aggs.s.func",
        "step 0 (groupby): cannot sum expression 'upper(region)' of kind string",
    ),
    (
        [{"op": "groupby", "by": [], "aggs": {"m": {"func": "mean", "expr": "ts + interval(1, 'day')"}}}],
        "steps[0].aggs.m.func",
        "cannot mean expression 'ts + interval(1, 'day')' of kind datetime",
    ),
    (
        [{"op": "groupby", "by": [], "aggs": {"s": {"func": "sum", "expr": "year(amount)"}}}],
        "steps[0].aggs.s.expr",
        "step 0 (groupby): argument 1 of year() must be of kind datetime, got 'amount' (numeric) at col 5",
    ),
    (
        [{"op": "groupby", "by": ["product_id"], "aggs": {"x": {"func": "var", "column": "ts"}}}],
        "steps[0].aggs.x.func",
        "step 0 (groupby): cannot var column 'ts' of kind datetime",
    ),
    # an assigned column carries the kind its expression yields into later steps
    (
        [{"op": "assign", "column": "day", "expr": "day(ts)"}, {"op": "filter", "expr": "day == 'monday'"}],
        "steps[1].expr",
        "step 1 (filter): cannot compare 'day' (numeric) with 'monday' (string) at col 0",
    ),
    # so does an aggregation over an expression
    (
        [{"op": "groupby", "by": ["region"], "aggs": {"last": {"func": "max", "expr": "ts - interval(1, 'day')"}}},
         {"op": "assign", "column": "y", "expr": "last * 2"}],
        "steps[1].expr",
        "cannot apply '*' to 'last' (datetime) and 2 (numeric)",
    ),
]


@pytest.mark.parametrize(("steps", "field", "fragment"), STEP_REJECTED)
def test_steps_with_mismatched_kinds_are_refused(
    sample_data: dict[str, Path], steps: list[dict[str, Any]], field: str, fragment: str
) -> None:
    error = refused(job(sample_data, steps))
    assert error.field == field
    assert fragment in error.message


def test_assign_and_groupby_record_the_inferred_kinds(sample_data: dict[str, Path]) -> None:
    steps = [
        {"op": "assign", "column": "label", "expr": "'big' if amount > 100 else 'small'"},
        {"op": "assign", "column": "month", "expr": "month(ts)"},
        {"op": "assign", "column": "due", "expr": "ts + interval(30, 'days')"},
        {"op": "assign", "column": "late", "expr": "due > date('2026-06-01')"},
        {"op": "assign", "column": "waited", "expr": "due - ts"},
        {"op": "groupby", "by": ["label", "month"], "aggs": {
            "late_orders": {"func": "sum", "expr": "late"}, "first_due": {"func": "min", "column": "due"},
            "net": {"func": "sum", "expr": "amount * (1 - fillna(discount, 0))"}, "wait": {"func": "sum", "column": "waited"},
            "n": {"func": "size"},
        }},
    ]
    assert check_spec(job(sample_data, steps)) == {
        "label": "string", "month": "numeric", "late_orders": "numeric", "first_due": "datetime", "net": "numeric",
        "wait": "unknown", "n": "numeric",
    }


def test_join_keys_of_different_kinds_are_refused(sample_data: dict[str, Path], text_keys: dict[str, Any]) -> None:
    steps = [{"op": "filter", "expr": "amount > 0"}, {"op": "join", "right": text_keys, "on": ["product_id"]}]
    error = refused(job(sample_data, steps))
    assert error.field == "steps[1].on"
    assert error.message == (
        "step 1 (join): cannot match left key 'product_id' (numeric) with right key 'product_id' (string): "
        "join keys must have matching kinds"
    )
    step = {"op": "join", "right": "keys", "how": "semi", "left_on": ["region", "ts"], "right_on": ["region", "ts"]}
    error = refused(job(sample_data, [step], keys=text_keys))
    assert error.field == "steps[0].left_on"
    assert "left key 'ts' (datetime) with right key 'ts' (numeric)" in error.message
    step = {"op": "join", "right": products(sample_data), "left_on": ["region"], "right_on": ["product_id"]}
    assert "'region' (string) with right key 'product_id' (numeric)" in refused(job(sample_data, [step])).message


def test_join_keys_of_matching_or_unknown_kinds_pass(sample_data: dict[str, Path], text_keys: dict[str, Any]) -> None:
    steps = [
        {"op": "assign", "column": "code", "expr": "cast(product_id, 'string')"},
        {"op": "join", "right": "keys", "left_on": ["code", "region"], "right_on": ["product_id", "region"]},
        {"op": "join", "right": "products", "on": ["product_id"]},  # int64 with int64
        {"op": "assign", "column": "gap", "expr": "ts - ts"},  # a duration: unknown outside expressions
        {"op": "join", "right": "keys", "how": "anti", "left_on": ["gap"], "right_on": ["ts"]},
        {"op": "assign", "column": "quantity", "expr": "(quantity > 5) * 1"},
        {"op": "join", "right": "keys", "how": "semi", "left_on": ["quantity"], "right_on": ["ts"]},  # a bool made a number, with int
    ]
    check_spec(job(sample_data, steps, keys=text_keys, products=products(sample_data)))


# Nothing valid is refused: every example spec


def read_example(path: Path, filled: Path, replacements: dict[str, str]) -> dict[str, Any]:
    """An example file with placeholders filled in, read as the CLI reads it."""
    text = path.read_text()
    for placeholder, value in replacements.items():
        text = text.replace(placeholder, value)
    filled.write_text(text)
    return read_mapping(filled, "a job spec or a pipeline")


def _tpch_schemas() -> dict[str, Schema]:
    """TPC-H's tables as tpchgen-cli writes them: int64 keys, decimals, dates and strings."""
    columns = {
        "region": "r_regionkey:n r_name:s r_comment:s",
        "nation": "n_nationkey:n n_name:s n_regionkey:n n_comment:s",
        "supplier": "s_suppkey:n s_name:s s_address:s s_nationkey:n s_phone:s s_acctbal:n s_comment:s",
        "customer": "c_custkey:n c_name:s c_address:s c_nationkey:n c_phone:s c_acctbal:n c_mktsegment:s c_comment:s",
        "part": "p_partkey:n p_name:s p_mfgr:s p_brand:s p_type:s p_size:n p_container:s p_retailprice:n p_comment:s",
        "partsupp": "ps_partkey:n ps_suppkey:n ps_availqty:n ps_supplycost:n ps_comment:s",
        "orders": "o_orderkey:n o_custkey:n o_orderstatus:s o_totalprice:n o_orderdate:d o_orderpriority:s o_clerk:s "
        "o_shippriority:n o_comment:s",
        "lineitem": "l_orderkey:n l_partkey:n l_suppkey:n l_linenumber:n l_quantity:n l_extendedprice:n l_discount:n l_tax:n "
        "l_returnflag:s l_linestatus:s l_shipdate:d l_commitdate:d l_receiptdate:d l_shipinstruct:s l_shipmode:s l_comment:s",
    }
    kinds = {"n": "numeric", "s": "string", "d": "datetime"}
    return {table: {name: kinds[k] for name, k in (c.split(":") for c in text.split())} for table, text in columns.items()}


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "tpch").glob("q*.yaml")), ids=lambda p: p.stem)
def test_tpch_examples_pass(path: Path, tmp_path: Path) -> None:
    schemas = _tpch_schemas()

    def read(source: SourceSpec, *, field: str = "source") -> Schema:  # the tables' kinds, without the data
        return schemas[Path(source.path).name]

    check_spec(JobSpec.model_validate(read_example(path, tmp_path / path.name, {"{data}": "/tpch"})), read)


@pytest.mark.parametrize("name", ["daily_orders", "revenue_by_region", "nightly_revenue_pipeline"])
def test_demo_examples_pass(sample_data: dict[str, Path], name: str, tmp_path: Path) -> None:
    # the pipeline's template filled in as its scheduler would, with params.min_amount = 0
    values = {"var/demo/data": str(sample_data["sales"].parent), "{{ params.min_amount }}": "0", "{{ ds }}": "2026-11-28"}
    document = read_example(ROOT / "examples" / f"{name}.yaml", tmp_path / f"{name}.yaml", values)
    check_spec(JobSpec.model_validate(document.get("spec", document)))


# Through the real service: the stable 422 body, before any job exists


def test_service_answers_a_type_mismatch_with_a_422(
    service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path
) -> None:
    steps = [{"op": "filter", "expr": "amount > 0"}, {"op": "filter", "expr": "region == 'north' or region > 5"}]
    error = error_of(post(service, json=base_spec(sample_data, tmp_path, steps=steps)), 422)
    assert error == {
        "code": "type_mismatch",
        "message": "step 1 (filter): cannot compare 'region' (string) with 5 (numeric) at col 21",
        "field": "steps[1].expr",
    }
    assert not (tmp_path / "out").exists()


def test_sdk_gets_the_join_key_mismatch(
    service: ServiceProcess, sample_data: dict[str, Path], text_keys: dict[str, Any], tmp_path: Path
) -> None:
    spec = base_spec(sample_data, tmp_path, steps=[{"op": "join", "right": text_keys, "on": ["product_id"]}])
    with service.client() as client, pytest.raises(ApiError) as caught:
        client.submit(spec)
    assert caught.value.status == 422
    assert caught.value.detail.code == "type_mismatch" and caught.value.detail.field == "steps[0].on"
    message = caught.value.detail.message
    assert message.startswith("step 0 (join): ") and "'product_id' (numeric)" in message and "'product_id' (string)" in message
