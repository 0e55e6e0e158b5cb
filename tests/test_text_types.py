"""CSV and JSON-lines column types: one rule for the checker and both engines, and the source's ``types``.

The types come from a file's first ``TEXT_HEAD_ROWS`` rows (a source's first file), unless the source declares
them in ``types``; both engines read exactly those types. A value further down that its column's type cannot
hold fails the job on both engines alike, naming the column and the file and saying how to declare it.
"""

from __future__ import annotations

import gzip
import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from spillway.jobs.dask_read import TextBlock, TextBlockReader
from spillway.jobs.errors import SpecError, SpillwayError, TypeMismatch, UnknownColumn
from spillway.jobs.expr import CAST_TYPES
from spillway.jobs.sandbox import enforce_roots
from spillway.jobs.sink import SinkWriter
from spillway.jobs.sources import TEXT_HEAD_ROWS, read_schema
from spillway.jobs.spec import JobSpec, ReadType, SinkSpec, SourceSpec
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import plan_spec
from spillway.service.client import SpillwayClient
from tests.conftest import ServiceProcess, wait_terminal
from tests.test_bad_input import error_of, post
from tests.sinks_both import write_with
from tests.test_engines import assert_same_rows, run_both
from tests.test_reader_agreement import kinds_of

#: Rows of the files whose column changes after the head: past the head, and the change well past it.
ROWS = TEXT_HEAD_ROWS + 100
LATE = TEXT_HEAD_ROWS + 10


def _late_values(late: Any) -> list[Any]:
    return [late if i == LATE else i for i in range(ROWS)]


def values(column: pd.Series) -> list[Any]:
    """A result column's values, nulls as None."""
    return column.astype(object).where(column.notna(), None).tolist()


def _write_csv(path: Path, columns: dict[str, list[Any]]) -> None:
    """Each value as its text (pandas would write a column of integers with a gap as floats), a null as nothing."""
    rows = zip(*columns.values(), strict=True)
    path.write_text("\n".join([",".join(columns), *(",".join("" if v is None else str(v) for v in row) for row in rows)]) + "\n")


def _write_jsonl(path: Path, columns: dict[str, list[Any]]) -> None:
    names = list(columns)
    with open(path, "w") as out:
        for values in zip(*columns.values(), strict=True):
            out.write(json.dumps(dict(zip(names, values, strict=True))) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text_types")
    ids = list(range(ROWS))
    for name, late in (("late_text", "abc"), ("late_float", 1.5), ("late_bool", True)):
        _write_jsonl(root / f"{name}.jsonl", {"id": ids, "n": _late_values(late)})
    for name, late in (("late_text", "abc"), ("late_float", "1.5")):
        _write_csv(root / f"{name}.csv", {"id": ids, "n": _late_values(late)})
    for fmt, write in (("csv", _write_csv), ("jsonl", _write_jsonl)):  # the head's file is fine, the second file is not
        (root / f"many_{fmt}").mkdir()
        write(root / f"many_{fmt}" / f"a.{fmt}", {"id": [1, 2], "n": [1, 2]})
        write(root / f"many_{fmt}" / f"b.{fmt}", {"id": [3, 4], "n": [3, "x"]})
    with gzip.open(root / "late_text.csv.gz", "wt") as out:
        out.write((root / "late_text.csv").read_text())
    _write_csv(root / "days.csv", {"id": [1, 2, 3], "day": ["2024-01-05", None, "2024-02-29 10:30:00"], "na": ["NA", "null", None]})
    _write_jsonl(root / "days.jsonl", {"id": [1, 2, 3], "day": ["2024-01-05", None, "2024-02-29 10:30:00"]})
    _write_csv(root / "bad_day.csv", {"id": [1, 2], "day": ["2024-01-05", "soon"]})
    _write_jsonl(root / "nulls.jsonl", {"id": [1, 2, 3], "e": [None, None, None], "t": ["a", None, "c"]})
    _write_csv(root / "ints.csv", {"id": [1, 2, 3], "n": [7, None, 9]})
    _write_jsonl(root / "ints.jsonl", {"id": [1, 2, 3], "n": [7, None, 9]})
    pq.write_table(pa.table({"id": [1, 2], "n": [3, 4]}), root / "ints.parquet")
    return root


def job(data: Path, name: str, steps: list[dict[str, Any]] | None = None, *, types: dict[str, str] | None = None,
        sink: dict[str, Any] | None = None, blocksize: str | None = None) -> JobSpec:
    source: dict[str, Any] = {"format": "jsonl" if "jsonl" in name else "csv" if "csv" in name else "parquet", "path": str(data / name)}
    if types is not None:
        source["types"] = types
    if blocksize is not None:
        source["blocksize"] = blocksize
    return JobSpec.model_validate({"source": source, "steps": steps or [], "sink": sink or {"path": str(data / "unused")}})


@pytest.fixture()
def within_roots(data: Path) -> Iterator[None]:
    """The data roots a job the manager runs has: the files the engines read are the checked ones."""
    with enforce_roots([str(data)]):
        yield


def run_on(engine: str, spec: JobSpec, out: Path) -> None:
    """``spec`` run to its sink as the engine's worker task runs it (tests.sinks_both.write_with)."""
    write_with(engine, spec, SinkWriter(SinkSpec(path=str(out / engine)), engine))


# 1. A column that changes after the head: both engines fail alike, naming it; declared as text, the same rows.


@pytest.mark.parametrize("engine", ["dask", "polars"])
@pytest.mark.parametrize("name", ["late_text.csv", "late_text.jsonl", "late_float.csv", "late_float.jsonl", "late_bool.jsonl"])
def test_a_value_the_head_type_cannot_hold_fails_the_job_naming_the_column_and_file(
        data: Path, name: str, engine: str, within_roots: None, tmp_path: Path) -> None:
    with pytest.raises(SpillwayError) as failed:
        run_on(engine, job(data, name), tmp_path)
    error = failed.value
    assert error.code == "read_type_mismatch"
    assert "column 'n'" in error.message and name in error.message and "int64" in error.message
    assert "types: {n: string}" in error.message
    assert error.field == "source.types"


@pytest.mark.parametrize("engine", ["dask", "polars"])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_file_named_is_the_one_holding_the_value(data: Path, fmt: str, engine: str, within_roots: None, tmp_path: Path) -> None:
    with pytest.raises(SpillwayError) as failed:
        run_on(engine, job(data, f"many_{fmt}"), tmp_path)
    message = failed.value.message
    assert failed.value.code == "read_type_mismatch" and f"b.{fmt}" in message and f"a.{fmt}" not in message and "'x'" in message


@pytest.mark.parametrize("engine", ["dask", "polars"])
def test_a_gzipped_csv_file_fails_alike(data: Path, engine: str, within_roots: None, tmp_path: Path) -> None:
    with pytest.raises(SpillwayError) as failed:
        run_on(engine, job(data, "late_text.csv.gz"), tmp_path)
    assert failed.value.code == "read_type_mismatch" and "late_text.csv.gz" in failed.value.message and "column 'n'" in failed.value.message


@pytest.mark.parametrize("name", ["late_text.csv", "late_text.jsonl"])
@pytest.mark.parametrize("steps", [
    [{"op": "select", "columns": ["id"]}],
    [{"op": "groupby", "by": [], "aggs": {"rows": {"func": "size"}, "top": {"func": "max", "column": "id"}}}],
])
def test_a_column_the_job_does_not_read_fails_neither_engine(data: Path, name: str, steps: list[dict[str, Any]]) -> None:
    """Polars parses only the columns a query reads; the Dask engine's reader is given dask's projection, so it does too."""
    on_dask, on_polars = run_both(job(data, name, steps))
    assert_same_rows(on_dask, on_polars, ordered=False)


@pytest.mark.parametrize("name", ["late_text.csv", "late_text.jsonl", "late_float.csv", "late_float.jsonl", "late_bool.jsonl"])
def test_declared_as_text_the_changing_column_reads_the_same_rows_on_both_engines(data: Path, name: str) -> None:
    spec = job(data, name, [{"op": "assign", "column": "m", "expr": "n + '!'"}], types={"n": "string"})
    assert read_schema(spec.source)["n"] == "string"  # type: ignore[arg-type]
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert len(on_dask) == ROWS
    assert on_dask.set_index("id").loc[7, "m"] == "7!"


@pytest.mark.parametrize("name", ["late_float.csv", "late_float.jsonl"])
def test_declared_as_float_the_changing_column_reads_the_same_numbers_on_both_engines(data: Path, name: str) -> None:
    spec = job(data, name, [{"op": "filter", "expr": "n != floor(n)"}], types={"n": "float64"})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert on_dask["n"].tolist() == [1.5]


@pytest.mark.parametrize("name", ["late_text.csv", "late_text.jsonl"])
def test_a_file_read_in_many_blocks_reads_the_same_rows_and_fails_alike(data: Path, name: str, within_roots: None, tmp_path: Path) -> None:
    """Blocks after a file's first have no header (CSV) and start mid-file: the Dask engine reads each one itself."""
    spec = job(data, name, [{"op": "assign", "column": "m", "expr": "n + '!'"}], types={"n": "string"}, blocksize="1KiB")
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert len(on_dask) == ROWS and on_dask["id"].nunique() == ROWS
    for engine in ("dask", "polars"):
        with pytest.raises(SpillwayError) as failed:
            run_on(engine, job(data, name, blocksize="1KiB"), tmp_path)
        assert failed.value.code == "read_type_mismatch" and "column 'n'" in failed.value.message and name in failed.value.message


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_block_read_for_its_rows_alone_keeps_them(data: Path, fmt: str) -> None:
    """dask may ask for no column (a count of rows): pandas would read no rows."""
    path = str(data / f"late_text.{fmt}")
    reader = TextBlockReader(fmt, {"id": "int64", "n": "string"}, None, "source")
    assert reader(TextBlock(path, 0, None), columns=[]).shape == (ROWS, 0)


@pytest.mark.parametrize("name", ["days.csv", "days.jsonl"])
def test_a_column_declared_datetime_reads_the_same_instants_on_both_engines(data: Path, name: str) -> None:
    spec = job(data, name, [{"op": "assign", "column": "m", "expr": "month(day)"}], types={"day": "datetime64[ns]"})
    assert read_schema(spec.source)["day"] == "datetime"  # type: ignore[arg-type]
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert values(on_dask.sort_values("id")["m"]) == [1, None, 2]


@pytest.mark.parametrize("engine", ["dask", "polars"])
def test_a_date_time_that_does_not_parse_fails_alike(data: Path, engine: str, within_roots: None, tmp_path: Path) -> None:
    with pytest.raises(SpillwayError) as failed:
        run_on(engine, job(data, "bad_day.csv", types={"day": "datetime64[ns]"}), tmp_path)
    assert failed.value.code == "read_type_mismatch" and "column 'day'" in failed.value.message and "'soon'" in failed.value.message


def test_only_an_empty_csv_field_is_null_on_both_engines(data: Path) -> None:
    """pandas' default also nulls NA, null, n/a…, which Polars reads as text."""
    spec = job(data, "days.csv", [{"op": "assign", "column": "x", "expr": "isnull(na)"}])
    assert read_schema(spec.source)["na"] == "string"  # type: ignore[arg-type]
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert on_dask.sort_values("id")["x"].tolist() == [False, False, True]


def test_the_declarable_types_are_the_cast_types() -> None:
    assert set(typing.get_args(ReadType)) == set(CAST_TYPES)


# 2. A JSON-lines column of only nulls is text, as a CSV column without a value and a parquet column of type null are.


def test_a_json_lines_column_of_only_nulls_is_text_on_the_checker_and_both_engines(data: Path) -> None:
    checker, polars_kinds, dask_kinds = kinds_of(data, "nulls.jsonl")
    assert (checker["e"], polars_kinds["e"], dask_kinds["e"]) == ("string", "string", "string")


@pytest.mark.parametrize("expr", ["upper(e)", "coalesce(e, t)", "isnull(e)", "e == 'a'"])
def test_text_functions_on_a_json_lines_column_of_only_nulls_agree(data: Path, expr: str) -> None:
    on_dask, on_polars = run_both(job(data, "nulls.jsonl", [{"op": "assign", "column": "x", "expr": expr}]))
    assert_same_rows(on_dask, on_polars, ordered=False)


def test_arithmetic_on_a_json_lines_column_of_only_nulls_is_refused_before_the_job(data: Path) -> None:
    with pytest.raises(TypeMismatch) as refused:
        plan_spec(job(data, "nulls.jsonl", [{"op": "assign", "column": "x", "expr": "e + 1"}]))
    assert refused.value.field == "steps[0].expr"


# 3. Declared types: they win over the head on the checker and both engines.


@pytest.mark.parametrize("name", ["ints.csv", "ints.jsonl"])
@pytest.mark.parametrize(("declared", "kind", "expr", "want"), [
    ("string", "string", "n + '!'", ["7!", None, "9!"]),
    ("float64", "numeric", "n / 2", [3.5, None, 4.5]),
    ("int64", "numeric", "n * 2", [14, None, 18]),
    ("int32", "numeric", "n * 2", [14, None, 18]),
])
def test_a_declared_type_is_what_the_checker_and_both_engines_read(
        data: Path, name: str, declared: str, kind: str, expr: str, want: list[Any]) -> None:
    spec = job(data, name, [{"op": "assign", "column": "x", "expr": expr}], types={"n": declared})
    assert read_schema(spec.source)["n"] == kind  # type: ignore[arg-type]
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert values(on_dask.sort_values("id")["x"]) == want


@pytest.mark.parametrize("engine", ["dask", "polars"])
def test_an_integer_column_declared_bool_fails_on_both_engines(data: Path, engine: str, within_roots: None, tmp_path: Path) -> None:
    assert read_schema(SourceSpec(format="csv", path=str(data / "ints.csv"), types={"n": "bool"}))["n"] == "bool"  # type: ignore[call-arg]
    with pytest.raises(SpillwayError) as failed:
        run_on(engine, job(data, "ints.csv", types={"n": "bool"}), tmp_path)
    assert failed.value.code == "read_type_mismatch" and "column 'n'" in failed.value.message and "bool" in failed.value.message


def test_declared_types_of_a_named_source_are_read_by_both_engines(data: Path) -> None:
    spec = JobSpec.model_validate({
        "sources": {"c": {"format": "csv", "path": str(data / "late_text.csv"), "types": {"n": "string"}}},
        "source": "c", "steps": [{"op": "filter", "expr": "n == 'abc'"}], "sink": {"path": str(data / "unused")},
    })
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert on_dask["id"].tolist() == [LATE]


# 4. Checking types at submit: a 422 naming the field.


def test_an_unknown_type_name_is_refused_naming_the_column(data: Path) -> None:
    with pytest.raises(ValidationError) as refused:
        job(data, "ints.csv", types={"n": "integer"})
    (error,) = refused.value.errors()
    assert error["loc"] == ("source", "types", "n") and "'int64'" in error["msg"]


def test_types_on_a_parquet_source_are_refused(data: Path) -> None:
    with pytest.raises(ValidationError) as refused:
        job(data, "ints.parquet", types={"n": "string"})
    (error,) = refused.value.errors()
    assert error["loc"] == ("source", "types") and "parquet" in error["msg"]


def test_a_declared_column_the_file_does_not_have_is_refused_naming_it(data: Path) -> None:
    with pytest.raises(UnknownColumn) as refused:
        plan_spec(job(data, "ints.csv", types={"nope": "string"}))
    assert refused.value.field == "source.types.nope" and "'nope'" in refused.value.message


def test_a_named_source_names_its_own_field(data: Path) -> None:
    spec = JobSpec.model_validate({
        "sources": {"c": {"format": "csv", "path": str(data / "ints.csv"), "types": {"nope": "string"}}},
        "source": "c", "sink": {"path": str(data / "unused")},
    })
    with pytest.raises(SpecError) as refused:
        plan_spec(spec)
    assert refused.value.field == "sources.c.types.nope"


def test_a_json_key_first_met_after_the_head_is_read_where_declared(data: Path, tmp_path: Path) -> None:
    """A key the first rows lack is no column unless ``types`` declares it; declared, both engines read its values."""
    path = tmp_path / "late_key.jsonl"
    path.write_text("".join(json.dumps({"id": i, **({"late": 7} if i == LATE else {})}) + "\n" for i in range(ROWS)))
    steps = [{"op": "filter", "expr": "late == 7"}]
    with pytest.raises(UnknownColumn):
        plan_spec(JobSpec.model_validate({"source": {"format": "jsonl", "path": str(path)}, "steps": steps, "sink": {"path": str(data / "unused")}}))
    spec = JobSpec.model_validate({"source": {"format": "jsonl", "path": str(path), "types": {"late": "int64"}}, "steps": steps,
                                   "sink": {"path": str(data / "unused")}})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=True)
    assert values(on_polars["id"]) == [LATE] and values(on_polars["late"]) == [7]


@pytest.mark.parametrize(("types", "fmt", "field"), [
    ({"n": "integer"}, "csv", "source.types.n"),
    ({"nope": "string"}, "csv", "source.types.nope"),
    ({"n": "string"}, "parquet", "source.types"),
])
def test_bad_types_are_a_422_naming_the_field(service: ServiceProcess, data: Path, types: dict[str, str], fmt: str, field: str,
                                              tmp_path: Path) -> None:
    spec = {"source": {"format": fmt, "path": str(data / f"ints.{fmt}"), "types": types}, "sink": {"path": str(tmp_path / "out")}}
    error = error_of(post(service, json=spec), 422)
    assert error["field"] == field


# 5. Through the service, on each engine: the job fails with the error a user reads.


@pytest.mark.parametrize("name", ["late_text.csv", "late_text.jsonl"])
def test_through_the_service_a_late_value_fails_the_job_naming_column_and_file(api: SpillwayClient, engine: str, data: Path, name: str,
                                                                                tmp_path: Path) -> None:
    spec = job(data, name, sink={"path": str(tmp_path / "out")}).model_dump(mode="json", exclude_none=True)
    done = wait_terminal(api, api.submit(spec).id)
    assert done.state == JobStatus.FAILED and done.error is not None
    assert (done.error.code, done.error.field) == ("read_type_mismatch", "source.types"), done.error
    assert "column 'n'" in done.error.message and name in done.error.message and "types: {n: string}" in done.error.message
    assert not (tmp_path / "out").exists()
    declared = {**spec, "source": {**spec["source"], "types": {"n": "string"}}, "sink": {"path": str(tmp_path / "declared")}}
    assert wait_terminal(api, api.submit(declared).id).state == JobStatus.SUCCEEDED


@pytest.mark.parametrize("layout", ["one.jsonl.gz", "mixed_csv"])
def test_a_compressed_file_is_read_whole_on_both_engines(tmp_path: Path, layout: str) -> None:
    """A compressed file's size is not its text's: split by it, the Dask engine read its first ~1/5 and dropped the rest."""
    rows = 5000
    if layout == "one.jsonl.gz":
        path = tmp_path / layout
        with gzip.open(path, "wt") as out:
            out.writelines(json.dumps({"id": i, "s": f"row {i}"}) + "\n" for i in range(rows))
    else:  # a plain CSV file first, a gzipped one after it
        path = tmp_path / "csvs"
        path.mkdir()
        (path / "a.csv").write_text("id,s\n-1,first\n")
        with gzip.open(path / "b.csv.gz", "wt") as out:
            out.write("id,s\n" + "".join(f"{i},row {i}\n" for i in range(rows)))
    fmt = "jsonl" if "jsonl" in layout else "csv"
    spec = JobSpec.model_validate({"source": {"format": fmt, "path": str(path), "blocksize": "16KiB"}, "sink": {"path": str(tmp_path / "unused")}})
    on_dask, on_polars = run_both(spec)
    assert len(on_dask) == len(on_polars) == rows + (layout == "mixed_csv")
    assert_same_rows(on_dask, on_polars, ordered=False)


def test_a_declared_datetime_with_an_offset_is_that_instant_in_utc_on_both_engines(tmp_path: Path) -> None:
    path = tmp_path / "offsets.csv"
    path.write_text("id,ts\n1,2024-01-05T00:00:00+02:00\n2,2024-01-05T10:30:00-01:00\n3,2024-01-02T23:30:00+00:00\n")
    spec = JobSpec.model_validate({"source": {"format": "csv", "path": str(path), "types": {"ts": "datetime64[ns]"}},
                                   "steps": [{"op": "assign", "column": "d", "expr": "day(ts)"},
                                             {"op": "filter", "expr": "ts > timestamp('2024-01-03 00:00:00')"}],
                                   "sink": {"path": str(tmp_path / "unused")}})
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    assert sorted(values(on_polars["d"])) == [4, 5]  # 2024-01-05 00:00 at +02:00 is the 4th at 22:00 UTC


def test_a_source_without_types_is_written_as_before_the_field(data: Path) -> None:
    """A client built before ``types`` existed refuses unknown fields: job views and stored specs that do not use it leave it out."""
    plain, typed = job(data, "ints.csv"), job(data, "ints.csv", types={"n": "string"})
    assert "types" not in plain.model_dump(mode="json")["source"] and "types" not in json.loads(plain.model_dump_json())["source"]
    assert typed.model_dump(mode="json")["source"]["types"] == {"n": "string"}
    assert JobSpec.model_validate(plain.model_dump(mode="json")) == plain


# CSV fields pandas read where Polars refused them, and the reverse: both engines now parse CSV with Polars' reader.
_FIELDS = [  # (declared type, the field's text, its value on both engines; None: both refuse it)
    ("int64", "2.0", None), ("int64", "1e3", None), ("int64", "0x10", None), ("int64", "+5", 5),
    ("bool", "1", None), ("bool", "yes", None), ("bool", "TRUE", True),
    ("datetime64[ns]", "20240101", None), ("datetime64[ns]", "2024-01-02T03:04:05", pd.Timestamp("2024-01-02 03:04:05")),
    ("float64", "NaN", float("nan")), ("float64", "-inf", float("-inf")), ("float64", "1e3", 1000.0),
]


@pytest.mark.parametrize(("read_type", "text", "value"), _FIELDS, ids=[f"{t}:{x}" for t, x, _ in _FIELDS])
@pytest.mark.parametrize("blocks", ["one block", "many blocks"])
def test_a_csv_field_is_read_or_refused_alike_by_both_engines(tmp_path: Path, read_type: str, text: str, value: Any, blocks: str) -> None:
    """Each field is past the file's first block when split: a later block has no header and is read by position."""
    first = {"int64": "1", "bool": "false", "datetime64[ns]": "2024-01-01T00:00:00", "float64": "0.5"}[read_type]
    path = tmp_path / "fields.csv"
    path.write_text("id,v,w\n" + "".join(f"{i},{first},a\n" for i in range(300)) + f"300,{text},b\n")
    spec = JobSpec.model_validate({"source": {"format": "csv", "path": str(path), "types": {"v": read_type},
                                              **({"blocksize": "1KiB"} if blocks == "many blocks" else {})},
                                   "steps": [{"op": "filter", "expr": "id == 300"}], "sink": {"path": str(tmp_path / "unused")}})
    if value is None:
        for engine in ("dask", "polars"):
            with pytest.raises(SpillwayError) as failed:
                run_on(engine, spec, tmp_path)
            assert failed.value.code == "read_type_mismatch", engine
            assert "column 'v'" in failed.value.message and f"'{text}'" in failed.value.message, (engine, failed.value.message)
        return
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=True)
    got = on_dask["v"].tolist()
    assert len(got) == 1 and (got[0] == value or (value != value and got[0] != got[0])), got
