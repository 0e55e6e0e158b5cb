"""Join keys that the kinds' check let through but that an engine cannot join are refused at submit.

A comparison lets a bool meet a number, and "other" columns (durations, times, bytes, a parquet column of
nulls) meet anything, but pandas' merge and Polars' join refused such keys at run time (ValueError, or
SchemaError). Two datetimes, or two "other" columns, pass as kinds but their files' types may still not meet:
a naive timestamp with a zoned one (both engines), a duration with a time, a list or struct (pandas cannot
hash it). Each is a 422 naming the step's key field, both keys and their kinds (and files' types).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import TypeMismatch
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import check_spec
from tests.conftest import ServiceProcess
from tests.test_bad_input import error_of, post

_MOMENTS = [datetime.datetime(2024, 1, 1), None]
_COLUMNS = {
    "int": pa.array([1, None], pa.int64()),
    "float": pa.array([1.0, None]),
    "bool": pa.array([True, None]),
    "text": pa.array(["1", None]),
    "naive": pa.array(_MOMENTS, pa.timestamp("us")),
    "utc": pa.array(_MOMENTS, pa.timestamp("us", tz="UTC")),
    "paris": pa.array(_MOMENTS, pa.timestamp("ns", tz="Europe/Paris")),
    "date": pa.array([datetime.date(2024, 1, 1), None]),
    "micros": pa.array([datetime.timedelta(seconds=1), None], pa.duration("us")),
    "clock": pa.array([datetime.time(0, 0, 1), None]),
    "bytes": pa.array([b"1", None]),
    "nulls": pa.array([None, None], pa.null()),
    "lists": pa.array([[1], None], pa.list_(pa.int64())),
}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One parquet file per key type, each with the key k and a label v."""
    root = tmp_path_factory.mktemp("join_key_checks")
    for name, values in _COLUMNS.items():
        pq.write_table(pa.table({"k": values, "v": [f"{name}1", f"{name}n"]}), root / f"{name}.parquet")
    return root


def parquet(keys: Path, name: str) -> dict[str, str]:
    return {"format": "parquet", "path": str(keys / f"{name}.parquet")}


def body(keys: Path, left: str, right: str, sink: Path, **step: Any) -> dict[str, Any]:
    """A job body: the file ``left`` joined with the file ``right`` as ``step`` says (on k unless it says otherwise)."""
    join = {"op": "join", "right": parquet(keys, right), **(step or {"on": ["k"]})}
    return {"source": parquet(keys, left), "steps": [join], "sink": {"path": str(sink)}}


def refused(spec: dict[str, Any]) -> TypeMismatch:
    with pytest.raises(TypeMismatch) as caught:
        check_spec(JobSpec.model_validate(spec))
    return caught.value


_NAIVE_WITH_ZONED = "neither engine joins a datetime with a time zone to one without"
REFUSED: list[tuple[str, str, str]] = [
    ("bool", "int", "left key 'k' (bool) with right key 'k' (numeric): join keys must have matching kinds (make the bool a number first, "
                    "as x * 1: 1 for true, 0 for false)"),
    ("float", "bool", "left key 'k' (numeric) with right key 'k' (bool)"),
    ("nulls", "int", "left key 'k' (other) with right key 'k' (numeric): join keys must have matching kinds"),
    ("text", "micros", "left key 'k' (string) with right key 'k' (other)"),
    ("naive", "utc", f"left key 'k' (datetime, timestamp[us] in its file) with right key 'k' (datetime, timestamp[us, tz=UTC] in its file): "
                     f"{_NAIVE_WITH_ZONED}"),
    ("paris", "date", f"(datetime, timestamp[ns, tz=Europe/Paris] in its file) with right key 'k' (datetime, date32[day] in its file): "
                      f"{_NAIVE_WITH_ZONED}"),
    ("micros", "clock", "(other, duration[us] in its file) with right key 'k' (other, time64[us] in its file): neither engine joins two such types"),
    ("bytes", "nulls", "left key 'k' (binary) with right key 'k' (other): join keys must have matching kinds"),
    ("lists", "lists", "pandas' merge cannot hash a list or struct"),
]


@pytest.mark.parametrize(("left", "right", "fragment"), REFUSED)
def test_keys_an_engine_cannot_join_are_refused(keys: Path, tmp_path: Path, left: str, right: str, fragment: str) -> None:
    error = refused(body(keys, left, right, tmp_path / "out"))
    assert error.field == "steps[0].on"
    assert error.message.startswith("step 0 (join): cannot match ") and fragment in error.message
    error = refused(body(keys, left, right, tmp_path / "out", how="semi", left_on=["k"], right_on=["k"]))
    assert error.field == "steps[0].left_on" and fragment in error.message


@pytest.mark.parametrize(("left", "right"), [("int", "float"), ("naive", "date"), ("utc", "paris"), ("micros", "micros"),
                                             ("clock", "clock"), ("bytes", "bytes"), ("nulls", "nulls")])
def test_keys_both_engines_join_pass(keys: Path, tmp_path: Path, left: str, right: str) -> None:
    check_spec(JobSpec.model_validate(body(keys, left, right, tmp_path / "out")))


def test_a_zoned_key_is_traced_through_steps_and_sources(keys: Path, tmp_path: Path) -> None:
    """The zone of a key that a derived source renamed, a join brought from its right side (suffixed or not), an assign copied."""
    sources = {"utc": parquet(keys, "utc"), "late": {"from": "utc", "steps": [{"op": "rename", "columns": {"k": "at"}}]}}
    steps = [{"op": "join", "right": "late", "on": ["v"], "how": "left"},  # brings at (zoned) beside k (naive)
             {"op": "assign", "column": "when", "expr": "at"}, {"op": "filter", "expr": "notnull(when)"},
             {"op": "join", "right": parquet(keys, "naive"), "left_on": ["when"], "right_on": ["k"]}]
    spec = {"sources": sources, "source": parquet(keys, "naive"), "steps": steps, "sink": {"path": str(tmp_path / "out")}}
    error = refused(spec)
    assert error.field == "steps[3].left_on"
    assert "left key 'when' (datetime, timestamp[us, tz=UTC] in its file) with right key 'k' (datetime, timestamp[us] in its file)" in error.message
    # The right side's k comes out as k_right beside the left's k.
    steps = [{"op": "join", "right": "utc", "on": ["v"]}, {"op": "join", "right": parquet(keys, "date"), "left_on": ["k_right"], "right_on": ["k"]}]
    error = refused({**spec, "steps": steps})
    assert error.field == "steps[1].left_on" and "left key 'k_right' (datetime, timestamp[us, tz=UTC] in its file)" in error.message
    # A derived source on the right, and the naive k on the left: no zone is lost on the way.
    steps = [{"op": "join", "right": "late", "left_on": ["k"], "right_on": ["at"]}]
    assert "right key 'at' (datetime, timestamp[us, tz=UTC] in its file)" in refused({**spec, "steps": steps}).message


def test_the_api_answers_422_naming_the_key_field(service: ServiceProcess, keys: Path, tmp_path: Path) -> None:
    error = error_of(post(service, json=body(keys, "bool", "int", tmp_path / "bools")), 422)
    assert error["code"] == "type_mismatch" and error["field"] == "steps[0].on"
    assert "left key 'k' (bool) with right key 'k' (numeric)" in error["message"]
    error = error_of(post(service, json=body(keys, "utc", "naive", tmp_path / "zones", left_on=["k"], right_on=["k"])), 422)
    assert error["code"] == "type_mismatch" and error["field"] == "steps[0].left_on" and _NAIVE_WITH_ZONED in error["message"]
