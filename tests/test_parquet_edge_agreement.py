"""Parquet edge cases: both engines read the same rows and write the same types, or refuse alike with a Spillway error.

Each case is a small parquet file (or a directory of them) written with pyarrow and run through both engines: the
Polars engine (jobs.polars_io.scan_source_as_stored / _scan_hive, then the read casts of jobs.polars_frame) and the
Dask engine on pandas (jobs.dask_read.read_source, PlainArrowEngine). ``agreed`` compares the rows each engine computes
(numbers within 1e-9); where a file's types matter, ``written_alike`` also compares what each engine's sink writes
(the parquet types and exact values a user reads back). A case the engines disagree on today, or where either one
fails with a raw pyarrow/pandas/Polars exception (a 500 to the user) instead of a ``SpillwayError``, is an
``xfail(strict=True)`` whose reason says what each engine does: it starts to pass once both give one answer.
"""

from __future__ import annotations

import datetime
import decimal
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import SpecError, SpillwayError, UnreadableSource
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.sandbox import enforce_roots
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from spillway.jobs.pandas_functions import DATETIME_OUT_OF_RANGE
from tests.conftest import ServiceProcess
from tests.sinks_both import write_on_both_engines
from tests.test_bad_input import error_of, post
from tests.test_csv_edge_agreement import ENGINES, _failure, agreed, refusal, rows_of
from tests.test_text_types import values

D = datetime.datetime
Dec = decimal.Decimal
#: A file: a table, raw bytes (not parquet), or a table with ``pq.write_table`` options.
File = pa.Table | bytes | tuple[pa.Table, dict[str, Any]]


@pytest.fixture()
def root(tmp_path: Path) -> Iterator[Path]:
    """A folder for the case's files, checked as the data roots a job the manager runs has."""
    with enforce_roots([str(tmp_path)]):
        yield tmp_path


def write(root: Path, files: dict[str, File]) -> None:
    """Each file written under ``root`` (parents made): a table as parquet, bytes as they are."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, tuple):
            pq.write_table(content[0], path, **content[1])
        else:
            pq.write_table(content, path)


def source(root: Path, path: str, **options: Any) -> dict[str, Any]:
    return {"format": "parquet", "path": str(root / path), **options}


def job(root: Path, path: str, steps: list[dict[str, Any]] | None = None, **options: Any) -> JobSpec:
    """A job over the parquet file or directory ``root / path``; ``options`` go into its source."""
    return JobSpec.model_validate({"source": source(root, path, **options), "steps": steps or [], "sink": {"path": str(root / "unused")}})


def one(column: pa.Array, **more: Any) -> dict[str, File]:
    """A file ``f.parquet`` of an ``id`` column (0, 1, …) and ``column`` as ``x`` (and ``more`` columns)."""
    return {"f.parquet": pa.table({"id": list(range(len(column))), "x": column, **more})}


def two(first: pa.Array, second: pa.Array) -> dict[str, File]:
    """A directory ``d`` of two files whose column ``x`` holds ``first``, then ``second`` (each beside an ``id``)."""
    return {"d/a.parquet": pa.table({"id": list(range(len(first))), "x": first}),
            "d/b.parquet": pa.table({"id": list(range(100, 100 + len(second))), "x": second})}


def hive(folders: dict[str, pa.Table]) -> dict[str, File]:
    """A directory ``d`` of ``key=value`` folders (``""``: ``d`` itself), one file in each."""
    return {f"d/{folder}/part.parquet" if folder else "d/part.parquet": table for folder, table in folders.items()}


def written_alike(root: Path, path: str, steps: list[dict[str, Any]] | None = None, **options: Any) -> pa.Table:
    """The job committed by each engine's parquet sink and read back: the same column types and the same exact values
    (as sets of rows); the Dask engine's table, returned."""
    def spec_for(sink: dict[str, Any]) -> JobSpec:
        return JobSpec.model_validate({"source": source(root, path, **options), "steps": steps or [], "sink": sink})
    tables = {}
    for engine, folder in zip(ENGINES, write_on_both_engines(spec_for, "parquet", root / "written"), strict=True):
        tables[engine] = pq.read_table(folder)
    on_dask, on_polars = tables["dask"], tables["polars"]
    types = {engine: [(f.name, str(f.type)) for f in table.schema] for engine, table in tables.items()}
    assert types["dask"] == types["polars"], types
    assert sorted(on_dask.to_pylist(), key=repr) == sorted(on_polars.to_pylist(), key=repr)
    return on_dask


def refused_naming(spec: JobSpec, out: Path, file: str) -> None:
    """Both engines refuse ``spec`` as ``unreadable_source``, naming ``file``."""
    assert refusal(agreed(spec, out)) == "unreadable_source"
    for engine in ENGINES:
        failure = _failure(engine, spec, out / f"named_{engine}")
        assert isinstance(failure, SpillwayError) and file in failure.message, (engine, failure)


def on_dask_alone(spec: JobSpec) -> pd.DataFrame:
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(spec, plan_spec(spec)).compute().reset_index(drop=True)


def refused_at_check(spec: JobSpec) -> SpecError:
    """The checker's refusal of ``spec`` (a type error in a step, before any work)."""
    with pytest.raises(SpecError) as refused:
        plan_spec(spec)
    return refused.value


def refused_at_submit(spec: JobSpec) -> SpecError:
    with pytest.raises(SpecError) as refused:
        plan_spec(spec)
    assert refused.value.field == "source.path"
    return refused.value


SIZE = {"op": "groupby", "by": ["x"], "aggs": {"n": {"func": "size"}}}


def assign(expr: str) -> dict[str, str]:
    return {"op": "assign", "column": "y", "expr": expr}


def where(expr: str) -> dict[str, str]:
    return {"op": "filter", "expr": expr}


# 1. Several files: non-data files, empty files, broken files.

_AB = pa.table({"id": [1, 2], "s": ["a", "b"]})


def test_markers_hidden_files_metadata_and_other_suffixes_are_skipped_alike(root: Path) -> None:
    write(root, {"d/a.parquet": _AB, "d/_SUCCESS": b"", "d/.hidden.parquet": b"junk", "d/_tmp.parquet": b"junk",
                 "d/readme.txt": b"x", "d/.a.parquet.crc": b"\x00", "d/_metadata": b"junk", "d/_common_metadata": b"junk",
                 "d/.staging/b.parquet": b"junk", "d/_temporary/0/c.parquet": b"junk"})
    assert values(rows_of(agreed(job(root, "d"), root)).sort_values("id")["s"]) == ["a", "b"]


def test_files_at_any_depth_with_any_parquet_suffix_or_a_glob_read_alike(root: Path) -> None:
    write(root, {"d/a.parquet": _AB, "d/sub/b.parq": _AB, "d/sub/deeper/c.pq": _AB})
    assert len(rows_of(agreed(job(root, "d"), root))) == 6
    assert len(rows_of(agreed(job(root, "d/*.parquet"), root))) == 2


@pytest.mark.parametrize("empty", ["first", "second", "both"])
def test_a_file_of_no_rows_adds_none_on_both_engines(root: Path, empty: str) -> None:
    files = {"first": (_AB.slice(0, 0), _AB), "second": (_AB, _AB.slice(0, 0)), "both": (_AB.slice(0, 0), _AB.slice(0, 0))}[empty]
    write(root, {"d/a.parquet": files[0], "d/b.parquet": files[1]})
    steps = [{"op": "groupby", "by": [], "aggs": {"n": {"func": "size"}, "t": {"func": "sum", "column": "id"}}}]
    got = rows_of(agreed(job(root, "d", steps), root))
    assert values(got["n"]) == ([] if empty == "both" else [2])  # a groupby by nothing gives no row without rows, on both


def test_a_zero_byte_first_file_is_refused_at_submit(root: Path) -> None:
    write(root, {"d/a.parquet": b"", "d/b.parquet": _AB})
    assert "a.parquet" in refused_at_submit(job(root, "d")).message


@pytest.mark.parametrize("content", [b"", b"PAR1garbagePAR1"], ids=["zero bytes", "garbage"])
def test_a_later_file_that_is_no_parquet_is_refused_alike_naming_it(root: Path, content: bytes) -> None:
    write(root, {"d/a.parquet": _AB, "d/b.parquet": content})
    refused_naming(job(root, "d"), root, "b.parquet")


# 2. Several files whose schemas differ (a nightly pipeline's columns change).


def test_a_later_file_with_its_columns_in_another_order_reads_by_name_on_both_engines(root: Path) -> None:
    write(root, {"d/a.parquet": _AB, "d/b.parquet": pa.table({"s": ["c"], "id": [3]})})
    assert values(rows_of(agreed(job(root, "d"), root)).sort_values("id")["s"]) == ["a", "b", "c"]


def test_a_later_file_missing_a_column_the_source_does_not_list_reads_alike(root: Path) -> None:
    write(root, {"d/a.parquet": _AB, "d/b.parquet": pa.table({"id": [3]})})
    assert values(rows_of(agreed(job(root, "d", columns=["id"]), root)).sort_values("id")["id"]) == [1, 2, 3]


def test_a_later_file_missing_a_column_is_refused_alike_unless_the_source_lists_its_columns(root: Path) -> None:
    """Whether a job reads the column is the plan's to say, on each engine its own way: one rule, the source's."""
    write(root, {"d/a.parquet": _AB, "d/b.parquet": pa.table({"id": [3]})})
    assert refusal(agreed(job(root, "d", [{"op": "select", "columns": ["id"]}]), root)) == "unreadable_source"


def test_a_later_file_whose_column_is_all_null_of_type_null_reads_alike(root: Path) -> None:
    write(root, {"d/a.parquet": _AB, "d/b.parquet": pa.table({"id": [3], "s": pa.nulls(1)})})
    got = rows_of(agreed(job(root, "d", [assign("upper(s)")]), root)).sort_values("id")
    assert values(got["y"]) == ["A", "B", None]


@pytest.mark.parametrize(("first", "second"), [
    (pa.array(["a"], pa.string()), pa.array(["b"], pa.large_string())),
    (pa.array(["a"], pa.large_string()), pa.array(["b"], pa.string())),
], ids=["string then large_string", "large_string then string"])
def test_string_and_large_string_files_read_alike(root: Path, first: pa.Array, second: pa.Array) -> None:
    write(root, two(first, second))
    assert values(rows_of(agreed(job(root, "d", [where("x == 'b'")]), root))["id"]) == [100]


def test_a_required_column_in_one_file_and_an_optional_one_in_the_next_read_alike(root: Path) -> None:
    required = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string(), nullable=False)])
    write(root, {"d/a.parquet": pa.table({"id": [1], "s": ["a"]}, schema=required), "d/b.parquet": pa.table({"id": [2], "s": [None]})})
    got = rows_of(agreed(job(root, "d", [assign("isnull(s)")]), root)).sort_values("id")
    assert values(got["y"]) == [False, True]


@pytest.mark.parametrize("steps", [[], [where("id == 3")]], ids=["reads all", "filters"])
def test_a_later_file_with_an_added_column_reads_or_is_refused_alike(root: Path, steps: list[dict[str, Any]]) -> None:
    write(root, {"d/a.parquet": _AB, "d/b.parquet": pa.table({"id": [3], "s": ["c"], "z": [9]})})
    agreed(job(root, "d", steps), root)


def test_a_later_file_missing_a_column_the_job_reads_reads_or_is_refused_alike(root: Path) -> None:
    write(root, {"d/a.parquet": _AB, "d/b.parquet": pa.table({"id": [3]})})
    agreed(job(root, "d"), root)


_DRIFTS = {  # id: (first file's x, later file's x, what the Dask engine does; Polars raises a raw SchemaError for each)
    "int32 then int64": (pa.array([1], pa.int32()), pa.array([2**40], pa.int64()),
                         "reads Int64 partitions under an Int32 meta; its sink then fails raw (ArrowInvalid: not in range)"),
    "int64 then int32": (pa.array([1], pa.int64()), pa.array([2], pa.int32()), "reads 1, 2"),
    "int64 then float64": (pa.array([1]), pa.array([2.5]), "reads a pandas Float64 column 1.0, 2.5; its sink fails raw"),
    "int64 then uint64": (pa.array([1]), pa.array([2**63], pa.uint64()),
                          "reads a Float64 column (2**63 as a float); its sink fails raw (not in range of int64)"),
    "float32 then float64": (pa.array([1.5], pa.float32()), pa.array([2.5]), "reads 1.5, 2.5"),
    "string then int64": (pa.array(["a"]), pa.array([5]), "reads an object column of 'a' and 5; its sink fails raw"),
    "bool then int64": (pa.array([True]), pa.array([2]), "reads an object column of True and 2"),
    "type null then string": (pa.nulls(1), pa.array(["b"]), "reads a string column None, 'b'"),
    "type null then int64": (pa.nulls(1), pa.array([5]), "reads an object column None, 5; its sink fails raw"),
    "date32 then timestamp": (pa.array([datetime.date(2024, 1, 1)]), pa.array([D(2024, 1, 2, 10)], pa.timestamp("us")), "reads both"),
    "timestamp ms then us": (pa.array([D(2024, 1, 1)], pa.timestamp("ms")), pa.array([D(2024, 1, 2)], pa.timestamp("us")), "reads both"),
    "timestamp UTC then Paris": (pa.array([D(2024, 1, 1)], pa.timestamp("us", tz="UTC")),
                                 pa.array([D(2024, 1, 2)], pa.timestamp("us", tz="Europe/Paris")), "reads an object column of both zones"),
    "decimal(10,2) then decimal(12,2)": (pa.array([Dec("1.25")], pa.decimal128(10, 2)), pa.array([Dec("2.5")], pa.decimal128(12, 2)),
                                         "reads 1.25, 2.5 (both as float64)"),
    "decimal(10,2) then decimal(10,3)": (pa.array([Dec("1.25")], pa.decimal128(10, 2)), pa.array([Dec("2.5")], pa.decimal128(10, 3)),
                                         "reads 1.25, 2.5 (both as float64)"),
    "string then dictionary": (pa.array(["a"]), pa.array(["b"]).dictionary_encode(), "reads 'a', 'b'"),
    "dictionary then string": (pa.array(["a"]).dictionary_encode(), pa.array(["b"]),
                               "raises a raw AttributeError ('StringDtype' object has no attribute 'categories'), its sink a raw "
                               "ValueError ('Unsupported cast from large_string to null')"),
}


@pytest.mark.parametrize("drift", list(_DRIFTS))
def test_a_column_whose_type_changes_in_a_later_file_reads_or_is_refused_alike(root: Path, drift: str) -> None:
    first, second, _ = _DRIFTS[drift]
    write(root, two(first, second))
    agreed(job(root, "d"), root)


def test_an_empty_first_file_written_by_pandas_then_rows_is_refused_alike_naming_the_later_file(root: Path) -> None:
    """pandas writes an object column of no rows as Arrow type null; Polars' scan takes no typed column after it."""
    empty = pa.Table.from_pandas(pd.DataFrame({"id": pd.Series([], dtype="int64"), "s": pd.Series([], dtype=object)}), preserve_index=False)
    assert pa.types.is_null(empty.schema.field("s").type)
    write(root, {"d/a.parquet": empty, "d/b.parquet": pa.table({"id": [1], "s": ["x"]})})
    refused_naming(job(root, "d"), root, "b.parquet")


def test_a_naive_then_a_zoned_timestamp_file_reads_or_is_refused_alike(root: Path) -> None:
    write(root, two(pa.array([D(2024, 1, 1)], pa.timestamp("us")), pa.array([D(2024, 1, 2)], pa.timestamp("us", tz="UTC"))))
    agreed(job(root, "d"), root)


# 3. Integers: unsigned, narrow, wide.

_UNSIGNED = {"uint8": (pa.uint8(), 255), "uint16": (pa.uint16(), 65535), "uint32": (pa.uint32(), 2**32 - 1),
             "uint64": (pa.uint64(), 2**64 - 1), "int8": (pa.int8(), -128), "int16": (pa.int16(), -32768)}


@pytest.mark.parametrize("name", list(_UNSIGNED))
@pytest.mark.parametrize("steps", [[], [where("x == {v}")], [SIZE]], ids=["reads", "filters", "groups"])
def test_narrow_and_unsigned_integers_read_filter_and_group_alike(root: Path, name: str, steps: list[dict[str, Any]]) -> None:
    dtype, extreme = _UNSIGNED[name]
    if extreme > 2**63 - 1 and steps and steps[0]["op"] == "filter":
        steps = [where("x > 9223372036854775807")]  # a literal outside int64 is refused at submit
    write(root, one(pa.array([1, extreme, None], dtype)))
    spec = job(root, "f.parquet", [{**step, "expr": step["expr"].format(v=extreme)} if "expr" in step else step for step in steps])
    got = rows_of(agreed(spec, root))
    assert extreme in values(got["x"])
    if not steps:
        assert written_alike(root, "f.parquet").column("x").to_pylist() == [1, extreme, None]


@pytest.mark.parametrize(("dtype", "data", "expr", "kept"), [
    (pa.int32(), [1, 2], "x == 4294967297", []),  # 2**32 + 1: 1 if wrapped to int32
    (pa.int32(), [1, 2], "x < 4294967297", [1, 2]),
    (pa.int8(), [-128, 127], "x == 384", []),  # 128 + 256
    (pa.uint8(), [0, 255], "x == 256", []),
    (pa.uint8(), [0, 255], "x == -1", []),
    (pa.uint8(), [0, 255], "x > -1", [0, 255]),
    (pa.uint8(), [0, 255], "x in (-1, 256)", []),
    (pa.uint64(), [0, 2**63, 2**64 - 1], "x > 0", [2**63, 2**64 - 1]),
    (pa.uint64(), [0, 2**63, 2**64 - 1], "x > 1.5", [2**63, 2**64 - 1]),
], ids=lambda v: str(v) if isinstance(v, (str, pa.DataType)) else None)
def test_a_narrow_integer_compared_with_a_literal_outside_its_range_keeps_the_same_rows(
        root: Path, dtype: pa.DataType, data: list[int], expr: str, kept: list[int]) -> None:
    write(root, one(pa.array(data, dtype)))
    assert sorted(values(rows_of(agreed(job(root, "f.parquet", [where(expr)]), root))["x"])) == kept


@pytest.mark.parametrize(("expr", "kept"), [("x > -1", [0, 2**64 - 1]), ("-1 < x", [0, 2**64 - 1]), ("x != -1", [0, 2**64 - 1]),
                                             ("x == -1", []), ("x < -5", [])])
def test_a_uint64_above_int64_compared_with_a_negative_literal_keeps_the_same_rows(root: Path, expr: str, kept: list[int]) -> None:
    """Polars dropped the row above int64's range (it cast the column to the literal's type: a null)."""
    write(root, one(pa.array([0, 2**64 - 1], pa.uint64())))
    assert sorted(values(rows_of(agreed(job(root, "f.parquet", [where(expr)]), root))["x"])) == kept


@pytest.mark.parametrize(("dtype", "data", "expr"), [
    pytest.param(pa.uint8(), [255, 1], "x + 1", id="uint8 + 1"),
    pytest.param(pa.uint8(), [0, 1], "x - 2", id="uint8 - 2"),
    pytest.param(pa.uint8(), [200, 1], "x + x", id="uint8 + uint8"),
    pytest.param(pa.uint16(), [65535, 1], "x * 2", id="uint16 * 2"),
    pytest.param(pa.uint32(), [2**32 - 1, 1], "x + 1", id="uint32 + 1"),
])
def test_unsigned_integer_arithmetic_gives_the_same_numbers(root: Path, dtype: pa.DataType, data: list[int], expr: str) -> None:
    write(root, one(pa.array(data, dtype)))
    agreed(job(root, "f.parquet", [assign(expr)]), root)


def test_a_filter_on_unsigned_arithmetic_keeps_the_same_rows(root: Path) -> None:
    write(root, one(pa.array([255, 1], pa.uint8())))
    assert values(rows_of(agreed(job(root, "f.parquet", [where("x + 1 > 255")]), root))["x"]) == [255]


def test_the_negation_of_an_unsigned_column_is_the_same_on_both_engines(root: Path) -> None:
    write(root, one(pa.array([255, 1], pa.uint8())))
    agreed(job(root, "f.parquet", [assign("-x")]), root)


def test_signed_narrow_integer_arithmetic_is_widened_on_both_engines(root: Path) -> None:
    write(root, one(pa.array([100, -128], pa.int8())))
    assert values(rows_of(agreed(job(root, "f.parquet", [assign("x * 2")]), root))["y"]) == [200, -256]


_SUM = [{"op": "groupby", "by": [], "aggs": {"s": {"func": "sum", "column": "x"}}}]


@pytest.mark.parametrize(("dtype", "value"), [(pa.int32(), 2**31 - 1), (pa.uint32(), 2**32 - 1)], ids=["int32", "uint32"])
def test_the_sum_of_a_32_bit_column_beyond_its_type_is_the_same_on_both_engines(root: Path, dtype: pa.DataType, value: int) -> None:
    write(root, one(pa.array([value, value], dtype)))
    assert values(rows_of(agreed(job(root, "f.parquet", _SUM), root))["s"]) == [2 * value]


@pytest.mark.parametrize(("dtype", "value"), [(pa.int8(), 1), (pa.int8(), 100), (pa.uint8(), 200), (pa.int16(), 30000), (pa.uint16(), 60000)],
                         ids=["int8 small", "int8", "uint8", "int16", "uint16"])
def test_the_sum_of_a_narrow_integer_column_is_written_alike(root: Path, dtype: pa.DataType, value: int) -> None:
    write(root, one(pa.array([value, value], dtype)))
    assert written_alike(root, "f.parquet", _SUM).column("s").to_pylist() == [2 * value]


def test_the_sum_of_an_int32_column_within_int32_is_written_alike(root: Path) -> None:
    write(root, one(pa.array([1, 2], pa.int32())))
    assert written_alike(root, "f.parquet", _SUM).column("s").to_pylist() == [3]


# 4. Floats and decimals.


@pytest.mark.parametrize("steps", [[], [where("x == 1.5")], [assign("x * 2")]], ids=["reads", "filters", "computes"])
def test_a_float16_column_reads_filters_and_computes_alike(root: Path, steps: list[dict[str, Any]]) -> None:
    write(root, one(pa.array(np.array([1.5, 2.25, np.nan], dtype=np.float16))))
    assert 1.5 in values(rows_of(agreed(job(root, "f.parquet", steps), root))["x"])


@pytest.mark.parametrize("how", ["groupby", "join"])
def test_a_float16_key_groups_and_joins_alike(root: Path, how: str) -> None:
    write(root, {**one(pa.array(np.array([1.5, 2.0], dtype=np.float16))), "r.parquet": pa.table({"x": [1.5], "b": [1]})})
    steps = [SIZE] if how == "groupby" else [{"op": "join", "right": source(root, "r.parquet"), "on": ["x"]}]
    agreed(job(root, "f.parquet", steps), root)


_DECIMALS = {
    "decimal128(38,10)": pa.array([Dec("12345678901234567890.1234567891"), Dec("-1.5"), None], pa.decimal128(38, 10)),
    "decimal128(9,4)": pa.array([Dec("12345.6789"), Dec("-1.5"), None], pa.decimal128(9, 4)),
    "decimal32(5,2)": pa.array([Dec("123.45"), Dec("-1.5"), None], pa.decimal32(5, 2)),
    "decimal64(18,0)": pa.array([Dec("123456789012345678"), Dec("-1.5").to_integral_value(), None], pa.decimal64(18, 0)),
}


@pytest.mark.parametrize("name", list(_DECIMALS))
@pytest.mark.parametrize("steps", [[], [where("x < 0")], [SIZE], [assign("x * 2")]], ids=["reads", "filters", "groups", "computes"])
def test_decimals_read_as_float64_alike(root: Path, name: str, steps: list[dict[str, Any]]) -> None:
    write(root, one(_DECIMALS[name]))
    got = rows_of(agreed(job(root, "f.parquet", steps), root))
    assert len(got) == (1 if steps and steps[0]["op"] == "filter" else 3)


def test_decimals_become_the_same_float64_exactly_on_both_engines(root: Path) -> None:
    """Each engine's float of a decimal is the double nearest it (jobs.dask_read._decimal_to_float64), read back exactly."""
    rng = random.Random(7)
    columns = {f"p{p}s{s}": pa.array([Dec(rng.randrange(-10**min(p, 15), 10**min(p, 15))).scaleb(-s) for _ in range(500)], pa.decimal128(p, s))
               for p, s in [(12, 2), (15, 2), (20, 2), (38, 10), (18, 9)]}
    write(root, {"f.parquet": pa.table(columns)})
    got = written_alike(root, "f.parquet")
    for name, column in columns.items():
        assert got.column(name).to_pylist() == [float(v) for v in column.to_pylist()]


@pytest.mark.parametrize("steps", [[], [where("x == 1.25")]], ids=["reads", "filters"])
def test_a_decimal_wider_than_38_digits_is_refused_on_polars_naming_it_and_read_as_float_on_dask(root: Path, steps: list[dict[str, Any]]) -> None:
    """Polars raised a raw InvalidOperationError ('precision must be between 1 and 38'); the Dask engine reads float64."""
    write(root, one(pa.array([Dec("1.25"), Dec("-1.5"), None], pa.decimal256(40, 2))))
    failure = _failure("polars", job(root, "f.parquet", steps), root / "polars_out")
    assert isinstance(failure, UnreadableSource) and "decimal256(40, 2), wider than the 38 digits" in failure.message, failure
    assert "engine: dask" in failure.message
    assert values(on_dask_alone(job(root, "f.parquet", steps))["x"]) == ([1.25] if steps else [1.25, -1.5, None])
    plan_spec(job(root, "f.parquet", steps))  # accepted at submit: the Dask engine reads it


# 5. Dates, timestamps, times and durations.


_DAYS = pa.array([datetime.date(2024, 1, 5), datetime.date(9999, 12, 31), datetime.date(1, 1, 1), None], pa.date32())


@pytest.mark.parametrize("steps", [[], [where("x == date('2024-01-05')")], [where("x < date('2000-01-01')")], [SIZE], [assign("year(x)")]],
                         ids=["reads", "equals", "before", "groups", "year"])
def test_date32_with_sentinels_reads_as_microsecond_datetimes_alike(root: Path, steps: list[dict[str, Any]]) -> None:
    write(root, one(_DAYS))
    rows_of(agreed(job(root, "f.parquet", steps), root))
    if not steps:
        assert written_alike(root, "f.parquet").schema.field("x").type == pa.timestamp("us")


def test_a_date64_column_is_written_as_the_same_type(root: Path) -> None:
    """timestamp[us], as every date (Polars read Datetime('ms') from the file's Arrow schema)."""
    write(root, one(pa.array([datetime.date(2024, 1, 5), None], pa.date64())))
    written_alike(root, "f.parquet")


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("steps", [[], [where("x == timestamp('2024-01-05 10:30:00')")], [SIZE], [assign("day(x)")]],
                         ids=["reads", "equals", "groups", "day"])
def test_naive_timestamps_of_every_unit_read_alike(root: Path, unit: str, steps: list[dict[str, Any]]) -> None:
    write(root, one(pa.array([D(2024, 1, 5, 10, 30), D(2024, 3, 1), None], pa.timestamp(unit))))
    rows_of(agreed(job(root, "f.parquet", steps), root))
    if not steps:
        written_alike(root, "f.parquet")


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/New_York", "Etc/GMT+5", "EST"])
@pytest.mark.parametrize("steps", [[], [where("x > timestamp('2024-01-01')")], [SIZE], [assign("day(x)")], [assign("date_trunc('day', x)")]],
                         ids=["reads", "compares", "groups", "day", "date_trunc"])
def test_zoned_timestamps_read_and_compute_alike(root: Path, zone: str, steps: list[dict[str, Any]]) -> None:
    instants = pa.array([D(2023, 12, 31, 23, 30), D(2024, 1, 1, 1), None], pa.timestamp("us", tz="UTC"))
    write(root, one(instants.cast(pa.timestamp("us", tz=zone))))
    rows_of(agreed(job(root, "f.parquet", steps), root))


def test_a_timestamp_zoned_by_a_fixed_offset_is_refused_alike_naming_the_file(root: Path) -> None:
    """Polars panicked (a Rust panic, a BaseException) building the scan's schema ('unable to parse time zone: +05:30'),
    where Dask read it: refused on both, at submit too."""
    instants = pa.array([D(2023, 12, 31, 23, 30), None], pa.timestamp("us", tz="UTC"))
    write(root, one(instants.cast(pa.timestamp("us", tz="+05:30"))))
    refused_naming(job(root, "f.parquet"), root, "f.parquet")
    assert "+05:30" in refused_at_submit(job(root, "f.parquet")).message


@pytest.mark.parametrize("column", [
    pa.array([datetime.date(2024, 1, 5)], pa.date32()),
    pa.array([D(2024, 1, 5)], pa.timestamp("ms")),
    pa.array([D(2024, 1, 5, 10, 30)], pa.timestamp("us")),
], ids=["date32", "timestamp ms at midnight", "timestamp us"])
def test_a_datetime_cast_to_text_is_the_same_text_on_both_engines(root: Path, column: pa.Array) -> None:
    """The unit's fraction always ('2024-01-05 00:00:00.000000'); Dask gave pandas' '2024-01-05' for a column of midnights."""
    write(root, one(column))
    got = rows_of(agreed(job(root, "f.parquet", [assign("cast(x, 'string')")]), root))
    assert values(got["y"])[0].startswith("2024-01-05 ") and "." in values(got["y"])[0]


def test_the_same_timestamp_cast_to_text_is_one_text_in_every_partition_on_the_dask_engine(root: Path) -> None:
    write(root, two(pa.array([D(2024, 1, 5)], pa.timestamp("us")), pa.array([D(2024, 1, 5), D(2024, 1, 5, 10, 30)], pa.timestamp("us"))))
    got = on_dask_alone(job(root, "d", [assign("cast(x, 'string')"), where("x == timestamp('2024-01-05')")]))
    assert len(set(values(got["y"]))) == 1, values(got["y"])


def test_a_sentinel_date_cast_to_nanoseconds_fails_alike_with_the_error_the_service_names(root: Path) -> None:
    """Dask raised a raw OutOfBoundsDatetime, Polars gave a null silently; the service turns the signal into
    datetime_out_of_range naming the expression (tests/test_overflow.py, through the service)."""
    write(root, one(pa.array([datetime.date(9999, 12, 31), datetime.date(2024, 1, 1)], pa.date32())))
    for engine in ENGINES:
        failure = _failure(engine, job(root, "f.parquet", [assign("cast(x, 'datetime64[ns]')")]), root / f"out_{engine}")
        assert DATETIME_OUT_OF_RANGE in str(failure), (engine, failure)


def test_int96_timestamps_within_the_nanosecond_range_read_alike(root: Path) -> None:
    table = pa.table({"id": [1, 2], "x": pa.array([D(2024, 1, 5, 10, 30), None], pa.timestamp("us"))})
    write(root, {"f.parquet": (table, {"use_deprecated_int96_timestamps": True})})
    assert values(rows_of(agreed(job(root, "f.parquet", [where("x > timestamp('2024-01-01')")]), root))["id"]) == [1]


@pytest.mark.parametrize("day", [D(9999, 12, 31), D(1500, 1, 1)], ids=["9999-12-31", "1500-01-01"])
def test_int96_timestamps_outside_the_nanosecond_range_read_alike(root: Path, day: datetime.datetime) -> None:
    table = pa.table({"id": [1, 2], "x": pa.array([day, D(2024, 1, 1)], pa.timestamp("us"))})
    write(root, {"f.parquet": (table, {"use_deprecated_int96_timestamps": True})})
    got = rows_of(agreed(job(root, "f.parquet", [where("x != timestamp('2024-01-01')")]), root))
    # Dask read nanoseconds that wrapped round silently (9999-12-31 became 1816-03-29); microseconds on both now.
    assert values(got["id"]) == [1] and str(values(got["x"])[0]).startswith(day.strftime("%Y-%m-%d"))


@pytest.mark.parametrize("column", [pa.array([datetime.time(10, 30), datetime.time(0, 0), None], pa.time64("us")),
                                    pa.array([datetime.timedelta(days=1), datetime.timedelta(seconds=5), None], pa.duration("us"))],
                         ids=["time64", "duration"])
@pytest.mark.parametrize("steps", [[], [where("isnull(x)")], [SIZE]], ids=["reads", "isnull", "groups"])
def test_times_and_durations_read_filter_and_group_alike(root: Path, column: pa.Array, steps: list[dict[str, Any]]) -> None:
    write(root, one(column))
    rows_of(agreed(job(root, "f.parquet", steps), root))


def test_durations_compare_and_add_alike(root: Path) -> None:
    write(root, one(pa.array([datetime.timedelta(days=1), datetime.timedelta(seconds=5), None], pa.duration("us"))))
    assert values(rows_of(agreed(job(root, "f.parquet", [where("x > interval(1, 'hour')"), assign("x + x")]), root))["id"]) == [0]


def test_a_duration_in_seconds_is_written_as_the_same_type(root: Path) -> None:
    """duration[ms] on both: Polars has no seconds (Dask kept duration[s])."""
    write(root, one(pa.array([datetime.timedelta(seconds=5), None], pa.duration("s"))))
    written_alike(root, "f.parquet")


# 6. Text, bytes and dictionary-encoded strings.


@pytest.mark.parametrize("dtype", [pa.large_string(), pa.string_view()], ids=["large_string", "string_view"])
@pytest.mark.parametrize("steps", [[], [where("x == 'a'")], [SIZE], [assign("upper(x)")]], ids=["reads", "filters", "groups", "upper"])
def test_large_strings_and_string_views_read_as_text_alike(root: Path, dtype: pa.DataType, steps: list[dict[str, Any]]) -> None:
    write(root, one(pa.array(["a", "b", None], dtype)))
    rows_of(agreed(job(root, "f.parquet", steps), root))
    if not steps:
        written_alike(root, "f.parquet")


@pytest.mark.parametrize("steps", [[], [where("x")], [SIZE], [assign("not x")], [assign("cast(x, 'string')")]],
                         ids=["reads", "filters", "groups", "not", "cast"])
def test_bools_with_nulls_read_alike(root: Path, steps: list[dict[str, Any]]) -> None:
    write(root, one(pa.array([True, False, None])))
    rows_of(agreed(job(root, "f.parquet", steps), root))


@pytest.mark.parametrize("dtype", [pa.binary(), pa.binary(2)], ids=["binary", "fixed_size_binary"])
@pytest.mark.parametrize("steps", [[], [where("isnull(x)")], [SIZE]], ids=["reads", "isnull", "groups"])
def test_bytes_read_filter_on_nulls_and_group_alike(root: Path, dtype: pa.DataType, steps: list[dict[str, Any]]) -> None:
    write(root, one(pa.array([b"ab", b"\xff\x00", None], dtype)))
    rows_of(agreed(job(root, "f.parquet", steps), root))


def test_bytes_compared_with_text_are_refused_at_submit(root: Path) -> None:
    """Dask kept no row (bytes never equal a str), Polars kept b'ab': a binary column is its own kind."""
    write(root, one(pa.array([b"ab", b"cd"], pa.binary())))
    assert "cannot compare 'x' (binary) with 'ab' (string)" in str(refused_at_check(job(root, "f.parquet", [where("x == 'ab'")])))


def test_the_length_of_bytes_is_refused_at_submit(root: Path) -> None:
    """Dask gave 2 (pandas' str accessor on bytes), Polars raised a raw SchemaError: text functions take text."""
    write(root, one(pa.array([b"ab", None], pa.binary())))
    refused = refused_at_check(job(root, "f.parquet", [assign("length(x)"), {"op": "select", "columns": ["id", "y"]}]))
    assert "length() must be of kind string, got 'x' (binary)" in str(refused)


_CATEGORIES = pa.array(["b", "a", "c", None, "a"]).dictionary_encode()  # its dictionary in first-seen order: b, a, c


@pytest.mark.parametrize("steps", [[where("x == 'a'")], [where("x in ('a', 'c')")], [SIZE], [assign("cast(x, 'string')")]],
                         ids=["equals", "in", "groups", "cast"])
def test_dictionary_encoded_strings_filter_and_group_alike(root: Path, steps: list[dict[str, Any]]) -> None:
    write(root, one(_CATEGORIES))
    rows_of(agreed(job(root, "f.parquet", steps), root))


def test_dictionary_encoded_strings_of_different_dictionaries_in_two_files_group_alike(root: Path) -> None:
    write(root, two(pa.array(["a", "b"]).dictionary_encode(), pa.array(["c", "a"]).dictionary_encode()))
    got = rows_of(agreed(job(root, "d", [SIZE]), root))
    assert dict(zip(values(got["x"]), values(got["n"]), strict=True)) == {"a": 2, "b": 1, "c": 1}


#: Steps on a dictionary-encoded text column, and what the engines did before both read such a column as plain text.
_DICTIONARY_CASES = {
    "sort": ([{"op": "sort", "by": ["x", "id"]}], "Dask sorts a pandas category by its dictionary's order (b, a, a, c), "
             "Polars' Categorical by text (a, a, b, c): the same job writes rows in another order"),
    "less than": ([where("x < 'b'")], "Dask refuses it as invalid_expression (\"Unordered Categoricals can only compare "
                  "equality or not\"), Polars keeps the a rows"),
    "min": ([{"op": "groupby", "by": [], "aggs": {"m": {"func": "min", "column": "x"}}}],
            "Dask raises a raw TypeError ('Cannot perform min with non-ordered Categorical'), Polars gives 'a'"),
    "concatenation": ([assign("x + '!'")], "Dask refuses it as invalid_expression (unsupported operand type(s) for +: "
                      "'Categorical' and 'str'), Polars gives 'b!'…"),
    "coalesce": ([assign("coalesce(x, 'z')")], "Dask raises a raw TypeError ('Cannot setitem on a Categorical with a new "
                 "category (z)'), Polars gives z for the null"),
    "upper": ([assign("upper(x)"), {"op": "select", "columns": ["id", "y"]}], "Dask computes B, A, … as an object "
              "column its sink cannot write (raw ArrowInvalid, 'did not recognize Python value type'); Polars raises a raw "
              "SchemaError ('expected `String`, got `cat`')"),
    "length": ([assign("length(x)"), {"op": "select", "columns": ["id", "y"]}], "Dask gives 1s; Polars raises a raw SchemaError ('expected `String`, got `cat`')"),
    "like": ([where("like(x, 'a%')"), {"op": "select", "columns": ["id"]}], "Dask keeps the a rows; Polars raises a raw InvalidOperationError ('expected String "
             "type, got: cat')"),
}


@pytest.mark.parametrize("case", list(_DICTIONARY_CASES))  # each failed before both engines read such a column as text
def test_dictionary_encoded_strings_compute_as_text_alike(root: Path, case: str) -> None:
    write(root, one(_CATEGORIES))
    steps = _DICTIONARY_CASES[case][0]
    agreed(job(root, "f.parquet", steps), root)
    if case == "sort":  # agreed compares rows as sets: the order is the point here
        spec = job(root, "f.parquet", steps)
        on_polars = build_lazyframe(plan_spec(spec), filters_before_casts=True).collect()
        assert values(on_dask_alone(spec)["x"]) == on_polars["x"].cast(str).to_list()


# 7. Columns pandas reads as objects, and nested columns.

_OBJECTS = {
    "time64": pa.array([datetime.time(10, 30), None], pa.time64("us")),
    "binary": pa.array([b"ab", None], pa.binary()),
    "fixed_size_binary": pa.array([b"ab", None], pa.binary(2)),
    "list": pa.array([[1, 2], None], pa.list_(pa.int64())),
    "large_list": pa.array([["a"], None], pa.large_list(pa.string())),
    "fixed_size_list": pa.array([[1, 2], None], pa.list_(pa.int64(), 2)),
    "struct": pa.array([{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int64()), ("b", pa.string())])),
    "map": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
    "dictionary": pa.array(["a", None]).dictionary_encode(),
}


@pytest.mark.parametrize("name", [n for n in _OBJECTS if n != "dictionary"])
def test_a_nested_or_object_column_the_job_never_reads_fails_neither_engine(root: Path, name: str) -> None:
    write(root, one(_OBJECTS[name]))
    got = rows_of(agreed(job(root, "f.parquet", [where("id > 0"), {"op": "select", "columns": ["id"]}]), root))
    assert values(got["id"]) == [1]
    assert written_alike(root, "f.parquet", [{"op": "select", "columns": ["id"]}]).column_names == ["id"]


@pytest.mark.parametrize("name", [n for n in _OBJECTS if n != "dictionary"])
def test_nulls_of_a_nested_or_object_column_are_counted_alike(root: Path, name: str) -> None:
    write(root, one(_OBJECTS[name]))
    got = rows_of(agreed(job(root, "f.parquet", [{"op": "groupby", "by": ["id"], "aggs": {"n": {"func": "count", "column": "x"}}}]), root))
    assert sorted(values(got["n"])) == [0, 1]


@pytest.mark.parametrize("name", list(_OBJECTS))
def test_a_column_pandas_holds_as_objects_is_written_alike(root: Path, name: str) -> None:
    """In Polars' Arrow types on both engines (Dask's sink failed with a raw ArrowInvalid: its metadata held placeholder
    objects for these columns)."""
    write(root, one(_OBJECTS[name]))
    written_alike(root, "f.parquet")


# 8. Hive directories.


_K = pa.table({"id": [1, 2]})
_J = pa.table({"id": [3]})


@pytest.mark.parametrize(("folders", "key", "expected"), [
    (["k=a b", "k=x%2Fy"], "k", ["a b", "x/y"]),
    (["k=a%20b", "k=c"], "k", ["a b", "c"]),
    (["k=007", "k=010"], "k", [7, 10]),
    (["k=-1", "k=2"], "k", [-1, 2]),
    (["k=1", "k=x"], "k", ["1", "x"]),
    (["my key=1", "my key=2"], "my key", [1, 2]),
], ids=["space and %2F", "%20", "leading zeros", "negative", "mixed text and number", "a key with a space"])
def test_hive_values_read_alike(root: Path, folders: list[str], key: str, expected: list[Any]) -> None:
    write(root, hive(dict(zip(folders, [_K, _J], strict=True))))
    got = rows_of(agreed(job(root, "d"), root))
    assert sorted(set(values(got[key])), key=str) == sorted(expected, key=str)
    if " " not in key:
        second = expected[1] if isinstance(expected[1], int) else repr(expected[1])
        assert values(rows_of(agreed(job(root, "d", [where(f"{key} == {second}")]), root))["id"]) == [3]


def test_two_hive_keys_filter_and_group_alike(root: Path) -> None:
    write(root, hive({"y=2024/m=01": _K, "y=2024/m=02": _J}))
    got = rows_of(agreed(job(root, "d", [where("m == 2"), {"op": "groupby", "by": ["y", "m"], "aggs": {"n": {"func": "size"}}}]), root))
    assert values(got["n"]) == [1]


def test_a_key_value_folder_above_the_source_path_is_a_column_on_both_engines(root: Path) -> None:
    write(root, {"run=5/d/a.parquet": _K, "run=5/d/b.parquet": _J})
    assert set(values(rows_of(agreed(job(root, "run=5/d"), root))["run"])) == {5}


def test_a_text_hive_key_also_in_the_files_is_the_files_value_on_both_engines(root: Path) -> None:
    write(root, hive({"s=zzz": pa.table({"id": [1], "s": ["a"]}), "s=c": pa.table({"id": [3], "s": ["c"]})}))
    assert sorted(values(rows_of(agreed(job(root, "d"), root))["s"])) == ["a", "c"]


def test_an_integer_hive_key_also_in_the_files_is_refused_at_submit(root: Path) -> None:
    write(root, hive({"id=1": pa.table({"id": [1]}), "id=3": pa.table({"id": [3]})}))
    assert "incompatible types" in refused_at_submit(job(root, "d")).message


def test_a_source_columns_list_of_a_hive_key_reads_alike(root: Path) -> None:
    write(root, hive({"k=1": _K, "k=2": _J}))
    assert sorted(values(rows_of(agreed(job(root, "d", columns=["k", "id"]), root))["k"])) == [1, 1, 2]


def test_an_integer_hive_key_is_written_as_the_same_type(root: Path) -> None:
    write(root, hive({"k=1": _K, "k=2": _J}))
    written_alike(root, "d")


@pytest.mark.parametrize("other", [
    pytest.param("k=1", id="integer key"),
    pytest.param("k=x", id="text key"),
])
def test_the_hive_null_folder_reads_alike(root: Path, other: str) -> None:
    write(root, hive({other: _K, "k=__HIVE_DEFAULT_PARTITION__": _J}))
    got = rows_of(agreed(job(root, "d"), root)).sort_values("id")
    assert values(got["k"])[-1] is None


# Hive values that look like other types: text on both engines, as the checker types them (an integer key is int64).
# Polars' own hive scan inferred Datetime, Float64, Boolean (failing raw) and Int128 (which its sink cannot write).
_TYPED_FOLDERS = {
    "date": (["day=2024-01-05", "day=2024-01-06"], [where("day == '2024-01-05'")]),
    "date length": (["day=2024-01-05", "day=2024-01-06"], [{"op": "assign", "column": "l", "expr": "length(day)"}]),
    "datetime": (["ts=2024-01-05 10:00:00", "ts=2024-01-06 00:00:00"], []),
    "float": (["k=1.5", "k=2"], [where("k == '2'")]),
    "bool": (["k=true", "k=false"], []),
    "beyond int64": (["k=99999999999999999999", "k=1"], []),
    "beyond int32": (["k=3000000000", "k=1"], []),
}


@pytest.mark.parametrize("case", list(_TYPED_FOLDERS))
def test_hive_values_that_look_like_other_types_read_as_text_alike(root: Path, case: str) -> None:
    folders, steps = _TYPED_FOLDERS[case]
    write(root, hive(dict(zip(folders, [_K, _J], strict=True))))
    agreed(job(root, "d", steps), root)
    key = folders[0].split("=")[0]
    assert pa.types.is_large_string(written_alike(root, "d", steps).schema.field(key).type)


def test_a_hive_value_holding_an_equals_sign_reads_alike(root: Path) -> None:
    """The value is what follows the folder's first '=': 'a=b' (Polars' own hive scan found no key at all)."""
    write(root, hive({"k=a=b": _K, "k=c": _J}))
    assert sorted(set(values(rows_of(agreed(job(root, "d"), root))["k"]))) == ["a=b", "c"]


@pytest.mark.parametrize("folders", [{"": _K, "k=1": _J}, {"k=1": _K, "z": _J}], ids=["top file first", "plain folder later"])
def test_files_outside_the_hive_layout_are_refused_alike(root: Path, folders: dict[str, pa.Table]) -> None:
    """Dask raised a raw KeyError ('k'), Polars a raw ShapeError; neither named the file."""
    write(root, hive(folders))
    assert refusal(agreed(job(root, "d"), root)) == "unreadable_source"
    assert "same key=value folders" in str(refused_at_submit(job(root, "d")))


def test_hive_folders_of_different_depths_are_refused_alike(root: Path) -> None:
    """Dask raised a raw KeyError ('j'), Polars a raw SchemaFieldNotFoundError."""
    write(root, hive({"k=1": _K, "k=2/j=3": _J}))
    assert refusal(agreed(job(root, "d"), root)) == "unreadable_source"
    assert "under the hive keys k, j" in str(refused_at_submit(job(root, "d")))


# 9. Column names, pandas' index columns, wide files.


def test_names_with_spaces_dots_and_unicode_read_and_group_alike(root: Path) -> None:
    write(root, {"f.parquet": pa.table({"my col": [1, 2], "a.b": [3, 4], "ñame→✓": ["x", "y"]})})
    got = rows_of(agreed(job(root, "f.parquet", [{"op": "groupby", "by": ["ñame→✓"], "aggs": {"s": {"func": "sum", "column": "a.b"}}}]), root))
    assert dict(zip(values(got["ñame→✓"]), values(got["s"]), strict=True)) == {"x": 3, "y": 4}
    assert list(rows_of(agreed(job(root, "f.parquet"), root)).columns) == ["my col", "a.b", "ñame→✓"]


def test_names_differing_only_in_case_are_two_columns_on_both_engines(root: Path) -> None:
    write(root, {"f.parquet": pa.table({"id": [1, 2], "ID": [3, 4]})})
    assert values(rows_of(agreed(job(root, "f.parquet", [where("ID == 3")]), root))["id"]) == [1]


def test_an_empty_column_name_reads_alike(root: Path) -> None:
    write(root, {"f.parquet": pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", ""])})
    assert list(rows_of(agreed(job(root, "f.parquet"), root)).columns) == ["a", ""]


def test_a_name_given_twice_is_refused_at_submit(root: Path) -> None:
    write(root, {"f.parquet": pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])})
    refused_at_submit(job(root, "f.parquet"))


def test_a_wide_file_read_for_two_columns_reads_alike(root: Path) -> None:
    write(root, {"f.parquet": pa.table({f"c{i}": [i] for i in range(2000)})})
    got = rows_of(agreed(job(root, "f.parquet", [{"op": "select", "columns": ["c0", "c1999"]}]), root))
    assert values(got["c1999"]) == [1999]


def test_a_file_pandas_wrote_with_its_default_index_reads_alike(root: Path) -> None:
    write(root, {"f.parquet": pa.Table.from_pandas(pd.DataFrame({"a": [1, 2]}))})
    assert list(written_alike(root, "f.parquet").column_names) == ["a"]


_INDEXED = {"named": pd.Index([5, 6], name="k"), "unnamed": pd.Index([5, 6])}


@pytest.mark.parametrize("index", list(_INDEXED))
def test_a_file_pandas_wrote_with_an_index_is_written_alike(root: Path, index: str) -> None:
    """The index is a column on both engines, as the checker lists it (Dask made it the frame's index; its sink dropped it)."""
    write(root, {"f.parquet": pa.Table.from_pandas(pd.DataFrame({"a": [1, 2]}, index=_INDEXED[index]))})
    written_alike(root, "f.parquet")


@pytest.mark.parametrize(("index", "step"), [("named", where("k == 5")), ("unnamed", {"op": "select", "columns": ["__index_level_0__", "a"]})],
                         ids=["filter on a named index", "select the unnamed one"])
def test_a_job_reading_a_pandas_index_column_reads_alike(root: Path, index: str, step: dict[str, Any]) -> None:
    """Dask refused `k == 5` as unknown_column and raised a raw KeyError for a select of '__index_level_0__'."""
    write(root, {"f.parquet": pa.Table.from_pandas(pd.DataFrame({"a": [1, 2]}, index=_INDEXED[index]))})
    agreed(job(root, "f.parquet", [step]), root)


# 10. Joins of parquet columns of unlike types.

_JOINS = {
    "int32 with int64": (pa.array([1, 2], pa.int32()), pa.array([2, 3], pa.int64())),
    "uint8 with int64": (pa.array([1, 255], pa.uint8()), pa.array([255, -1], pa.int64())),
    "date64 with date32": (pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)], pa.date64()), pa.array([datetime.date(2024, 1, 1)], pa.date32())),
    "timestamp s with ns": (pa.array([D(2024, 1, 1), D(2024, 1, 3)], pa.timestamp("s")), pa.array([D(2024, 1, 1)], pa.timestamp("ns"))),
    "dictionary with string": (pa.array(["a", "b", None]).dictionary_encode(), pa.array(["a", None])),
    "binary with binary": (pa.array([b"a", b"b"]), pa.array([b"a"])),
}


@pytest.mark.parametrize("how", ["inner", "outer"])
@pytest.mark.parametrize("pair", list(_JOINS))
def test_keys_of_unlike_parquet_types_join_alike(root: Path, pair: str, how: str) -> None:
    left, right = _JOINS[pair]
    write(root, {"l.parquet": pa.table({"k": left, "a": list(range(len(left)))}), "r.parquet": pa.table({"k": right, "b": list(range(len(right)))})})
    spec = job(root, "l.parquet", [{"op": "join", "right": source(root, "r.parquet"), "on": ["k"], "how": how}])
    assert len(rows_of(agreed(spec, root))) >= 1


@pytest.mark.parametrize("key", ["k=1", "k=x"], ids=["integer", "text"])
def test_a_hive_key_joins_a_file_column_alike(root: Path, key: str) -> None:
    value = key.split("=")[1]
    write(root, {"l.parquet": pa.table({"k": [int(value)] if value.isdigit() else [value], "a": [1]}),
                 f"r/{key}/p.parquet": pa.table({"b": [10]}), "r/k=2/p.parquet": pa.table({"b": [20]})})
    spec = job(root, "l.parquet", [{"op": "join", "right": source(root, "r"), "on": ["k"], "how": "left"}])
    assert values(rows_of(agreed(spec, root))["b"]) == [10]


# 11. A union of parquet sources of unlike types.


def _union(root: Path, first: pa.Array, second: pa.Array) -> list[dict[str, Any]]:
    write(root, {"a.parquet": pa.table({"x": first}), "b.parquet": pa.table({"x": second})})
    return [{"op": "union", "sources": [source(root, "b.parquet")]}]


@pytest.mark.parametrize(("first", "second"), [
    (pa.array([1], pa.int32()), pa.array([2**40])),
    (pa.array([255], pa.uint8()), pa.array([-1], pa.int8())),
    (pa.array([2**64 - 1], pa.uint64()), pa.array([-1])),
    (pa.array([1.5], pa.float32()), pa.array([Dec("2.25")], pa.decimal128(5, 2))),
], ids=["int32 and int64", "uint8 and int8", "uint64 and int64", "float32 and decimal"])
def test_a_union_of_unlike_numbers_is_written_alike(root: Path, first: pa.Array, second: pa.Array) -> None:
    steps = _union(root, first, second)
    rows_of(agreed(job(root, "a.parquet", steps), root))
    written_alike(root, "a.parquet", steps)


@pytest.mark.parametrize(("first", "second"), [
    pytest.param(pa.array(["a"]).dictionary_encode(), pa.array(["b"]), id="dictionary and string"),
    pytest.param(pa.array([D(2024, 1, 1)], pa.timestamp("us", tz="UTC")), pa.array([D(2024, 1, 1)], pa.timestamp("us", tz="Europe/Paris")),
                 id="UTC and Paris"),  # in UTC on both (Dask made an object column, Polars raised a raw SchemaError)
    # A column of type null reads as text: the union is text on both, '5' (Dask made an object column its sink could not write).
    pytest.param(pa.nulls(1), pa.array([5]), id="type null and int64"),
    # The finer unit on both (Polars wrote timestamp[ms]).
    pytest.param(pa.array([datetime.date(2024, 1, 1)]), pa.array([D(2024, 1, 2, 3)], pa.timestamp("ms")), id="date32 and timestamp ms"),
    pytest.param(pa.array([D(2024, 1, 1)], pa.timestamp("ms", tz="Asia/Tokyo")), pa.array([D(2024, 1, 1, 0, 0, 0, 5)], pa.timestamp("us", tz="Asia/Tokyo")),
                 id="one zone, ms and us"),
])
def test_a_union_of_unlike_columns_is_written_alike(root: Path, first: pa.Array, second: pa.Array) -> None:
    steps = _union(root, first, second)
    agreed(job(root, "a.parquet", steps), root)
    written_alike(root, "a.parquet", steps)


# Through the service: a later file of another type is a 422 at submit with the stable error shape, naming it.


def test_a_later_file_holding_a_column_in_another_type_is_a_422_naming_it(service: ServiceProcess, tmp_path: Path) -> None:
    write(tmp_path, {"d/a.parquet": pa.table({"id": [1], "x": pa.array([1], pa.int32())}), "d/b.parquet": pa.table({"id": [2], "x": [2]})})
    error = error_of(post(service, json={"source": {"format": "parquet", "path": str(tmp_path / "d")}, "sink": {"path": str(tmp_path / "out")}}), 422)
    assert error["code"] == "unreadable_source" and error["field"] == "source.path"
    assert "b.parquet" in error["message"] and "'x' is int64" in error["message"] and "int32" in error["message"], error
