"""Sink edge cases: both engines commit the same files and manifest, or refuse alike with a Spillway error.

Each case is a small parquet source (or a sink written before, read back as a source) run to a sink by both engines'
writers as their worker tasks run them (tests.sinks_both.write_with), then committed (``SinkWriter.commit``) with the
data roots a job the manager runs has. Compared: the manifest (rows, files, folders, columns and their Arrow types),
every committed parquet file's own schema, the committed rows (read through the manifest, hive keys taken from the
folder names as text, %-escapes undone as pyarrow's hive reader does) and, for CSV, the files' text. One source file
is one Dask partition, so both engines write one file (one per partition folder). A case the engines disagree on
today, or where either fails with a raw pyarrow/Polars/OS exception (a 500 to the user) instead of a ``SpillwayError``,
is an ``xfail(strict=True)`` whose reason says what each engine does: it starts to pass once both give one answer.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import SpecError, SpillwayError
from spillway.jobs.sandbox import enforce_roots
from spillway.jobs.sink import SinkWriter, read_manifest
from spillway.jobs.spec import JobSpec
from spillway.jobs.status import ResultManifest
from tests.sinks_both import write_with

ENGINES = ("dask", "polars")
_jobs = itertools.count()


@pytest.fixture()
def root(tmp_path: Path) -> Iterator[Path]:
    """A folder for the case's files, checked as the data roots a job the manager runs has (its sink writer too)."""
    with enforce_roots([str(tmp_path)]):
        yield tmp_path


def source(root: Path, columns: dict[str, Any], name: str = "src.parquet") -> dict[str, Any]:
    """A parquet source of one file holding ``columns`` (Arrow arrays or lists)."""
    pq.write_table(pa.table(columns), root / name)
    return {"format": "parquet", "path": str(root / name)}


def commit(engine: str, root: Path, src: dict[str, Any], sink: dict[str, Any], steps: list[dict[str, Any]] | None = None) -> ResultManifest:
    """``src`` → ``steps`` → ``sink`` written by ``engine``'s worker path and committed, as the manager commits a job
    (a job id of its own each time, so appends and overwrites name their files apart)."""
    spec = JobSpec.model_validate({"source": src, "steps": steps or [], "sink": sink})
    writer = SinkWriter(spec.sink, f"{engine}{next(_jobs)}", allowed_roots=[str(root)])
    write_with(engine, spec, writer)
    return writer.commit()


def _attempt(engine: str, root: Path, src: dict[str, Any], sink: dict[str, Any], steps: list[dict[str, Any]] | None = None) -> ResultManifest | BaseException:
    try:
        return commit(engine, root, src, sink, steps)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - what each engine raises is the point, a Rust panic (a BaseException) too
        return exc


@dataclass
class Written:
    """A committed sink, read through its manifest."""

    path: Path
    manifest: ResultManifest

    def columns(self) -> list[tuple[str, str]]:
        return [(c.name, c.type) for c in self.manifest.columns]

    def folders(self) -> list[str]:
        return sorted(f.path.rsplit("/", 1)[0] if "/" in f.path else "" for f in self.manifest.files)

    def file_schemas(self) -> list[str]:
        """Each parquet file's own schema (pandas' metadata aside), in folder order."""
        files = sorted(self.manifest.files, key=lambda f: f.path.rsplit("/", 1)[0])
        return [pq.read_schema(self.path / f.path).remove_metadata().to_string() for f in files]

    def table(self) -> pa.Table:
        """A parquet sink's rows, hive keys as text from the folder names (%-escapes undone), sorted by ``id``."""
        keys = self.manifest.partition_on
        partitioning = pads.HivePartitioning(pa.schema([(k, pa.string()) for k in keys]), null_fallback="__HIVE_DEFAULT_PARTITION__",
                                             segment_encoding="uri") if keys else None
        files = [str(self.path / f.path) for f in self.manifest.files]
        table = pads.dataset(files, format="parquet", partitioning=partitioning, partition_base_dir=str(self.path)).to_table()
        return table.sort_by("id") if "id" in table.column_names else table

    def rows(self) -> list[str]:
        """The rows, each as the repr of its values by column name, sorted (a NaN equals a NaN)."""
        if not self.manifest.files or self.manifest.format != "parquet":
            return []
        return sorted(repr(sorted(row.items())) for row in self.table().to_pylist())

    def text(self) -> str:
        """A CSV sink's files' text, in the manifest's order."""
        data = [(self.path / f.path).read_bytes() for f in self.manifest.files]
        return "".join((gzip.decompress(d) if f.path.endswith(".gz") else d).decode() for d, f in zip(data, self.manifest.files, strict=True))


def agreed(root: Path, src: dict[str, Any], sink: dict[str, Any] | None = None, steps: list[dict[str, Any]] | None = None,
           *, tag: str = "", one_partition: bool = True) -> dict[str, Written] | str:
    """What both engines commit for ``src`` → ``steps`` → ``sink`` (into ``root/<tag><engine>``): the same manifest,
    file schemas, rows and CSV text (each engine's, returned), or the same Spillway error (its code, returned). A raw
    exception on either engine, or one engine failing alone, fails the assertion. Where the source is several files
    (``one_partition`` False), Dask writes one file per partition and Polars one: the files are not compared one by one."""
    got = {engine: _attempt(engine, root, src, {**(sink or {}), "path": str(root / f"{tag}{engine}")}, steps) for engine in ENGINES}
    failures = {engine: got[engine] for engine in ENGINES if isinstance(got[engine], BaseException)}
    if failures:
        described = {engine: f"{type(exc).__name__}: {str(exc)[:200]}" if isinstance(exc, BaseException) else "committed"
                     for engine, exc in got.items()}
        assert len(failures) == len(ENGINES), f"one engine failed alone: {described}"
        assert all(isinstance(exc, SpillwayError) for exc in failures.values()), f"a raw exception, not a SpillwayError: {described}"
        codes = {engine: exc.code for engine, exc in failures.items() if isinstance(exc, SpillwayError)}
        assert codes["dask"] == codes["polars"], described
        return codes["dask"]
    written = {engine: Written(root / f"{tag}{engine}", manifest) for engine, manifest in got.items() if isinstance(manifest, ResultManifest)}
    dask, polars = written["dask"], written["polars"]
    assert dask.columns() == polars.columns(), "manifest columns"
    assert dask.manifest.total_rows == polars.manifest.total_rows, "rows"
    if one_partition:
        assert len(dask.manifest.files) == len(polars.manifest.files), "files"
        assert [f.rows for f in sorted(dask.manifest.files, key=lambda f: f.path.rsplit("/", 1)[0])] == \
            [f.rows for f in sorted(polars.manifest.files, key=lambda f: f.path.rsplit("/", 1)[0])], "rows per file"
        assert dask.folders() == polars.folders(), "partition folders"
    if dask.manifest.format == "parquet":
        schemas = (dask.file_schemas(), polars.file_schemas())
        assert schemas[0] == schemas[1] if one_partition else set(schemas[0]) == set(schemas[1]), "parquet file schemas"
        assert dask.rows() == polars.rows(), "committed rows"
    else:
        assert dask.text() == polars.text(), "CSV text"
    return written


def each_commits(root: Path, src: dict[str, Any], sink: dict[str, Any], steps: list[dict[str, Any]] | None = None,
                 *, engines: tuple[str, ...] = ENGINES) -> dict[str, Written]:
    """Each engine's own commit into ``root/<engine>``, not compared: for a case whose files are known to differ."""
    return {engine: Written(root / engine, commit(engine, root, src, {**sink, "path": str(root / engine)}, steps)) for engine in engines}


def written(result: dict[str, Written] | str) -> dict[str, Written]:
    assert isinstance(result, dict), f"refused: {result}"
    return result


def refusal(result: dict[str, Written] | str) -> str:
    assert isinstance(result, str), "committed"
    return result


def read_back(root: Path, sinks: dict[str, Written], *, fmt: str = "parquet", types: dict[str, str] | None = None) -> dict[str, Written]:
    """Each engine's sink read as a source by both engines into parquet, which must agree (``agreed``); by the engine
    that wrote the sink, what was read."""
    out = {}
    for engine, sink in sinks.items():
        src: dict[str, Any] = {"format": fmt, "path": str(sink.path)}
        if types:
            src["types"] = types
        out[engine] = written(agreed(root, src, tag=f"read_{engine}_", one_partition=len(sink.manifest.files) == 1))["dask"]
    return out


def ts(*values: dt.datetime | None, unit: str = "us", tz: str | None = None) -> pa.Array:
    return pa.array(list(values), pa.timestamp(unit, tz=tz))


# 1. Column types reaching the parquet files.

TYPED_COLUMNS = {
    "int with nulls": pa.array([1, None, 3, None], pa.int64()),
    "int64 extremes": pa.array([2**63 - 1, -(2**63), 0, None], pa.int64()),
    "int32 with nulls": pa.array([1, 2, None, 4], pa.int32()),
    "int8": pa.array([1, 2, 3, -4], pa.int8()),
    "uint8 with nulls": pa.array([1, 2, None, 255], pa.uint8()),
    "uint64": pa.array([2**64 - 1, 0, 1, None], pa.uint64()),
    "float32": pa.array([1.5, 2, None, 4], pa.float32()),
    "float tiny and huge": pa.array([0.1 + 0.2, None, 1e-300, 1e300]),
    "bool with nulls": pa.array([True, None, False, True]),
    "string with nulls and empty": pa.array(["a", None, "", "d"]),
    "large_string": pa.array(["x", "y", "z", None], pa.large_string()),
    "null type": pa.array([None] * 4, pa.null()),
    "datetime us": ts(dt.datetime(2024, 1, 1), None, dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1900, 1, 1)),
    "datetime ns": ts(dt.datetime(2024, 1, 1), None, dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1900, 1, 1), unit="ns"),
    "datetime ms": ts(dt.datetime(2024, 1, 1), None, dt.datetime(2024, 1, 2, 3, 4, 5, 123000), dt.datetime(1900, 1, 1), unit="ms"),
    "datetime far from 1970": ts(dt.datetime(2500, 1, 1), None, dt.datetime(1, 1, 1), dt.datetime(2024, 1, 3)),
    "datetime with a time zone": ts(dt.datetime(2024, 1, 1), None, dt.datetime(2024, 6, 1), dt.datetime(2024, 1, 3), tz="Europe/Paris"),
    "date": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 1, 2), dt.date(2024, 1, 3)]),
    "decimal": pa.array([decimal.Decimal("1.10"), None, decimal.Decimal("2.25"), decimal.Decimal("3.00")], pa.decimal128(10, 2)),
    "duration": pa.array([1, 2, None, 4], pa.duration("us")),
}


@pytest.mark.parametrize("column", list(TYPED_COLUMNS))
def test_a_column_reaches_the_parquet_files_in_the_same_type(root: Path, column: str) -> None:
    got = written(agreed(root, source(root, {"id": [1, 2, 3, 4], "c": TYPED_COLUMNS[column]})))
    assert got["dask"].manifest.total_rows == 4


def test_column_names_not_valid_in_a_path_or_a_csv_header_reach_the_parquet_files_alike(root: Path) -> None:
    src = source(root, {"id": [1], "a/b": ["x"], "c,d": [1], 'q"x': [3], "new\nline": [5], "é ü": ["u"], "=": ["e"], "..": [1.5]})
    assert [c for c, _ in written(agreed(root, src))["dask"].columns()] == ["id", "a/b", "c,d", 'q"x', "new\nline", "é ü", "=", ".."]


def test_the_read_types_reach_the_files_dates_as_microseconds_decimals_as_floats_nulls_as_text(root: Path) -> None:
    src = source(root, {"d": TYPED_COLUMNS["date"], "dec": TYPED_COLUMNS["decimal"], "n": TYPED_COLUMNS["null type"]})
    assert written(agreed(root, src))["dask"].columns() == [("d", "timestamp[us]"), ("dec", "double"), ("n", "large_string")]


def test_a_nan_is_written_as_nan_on_polars_and_as_null_on_dask_as_documented(root: Path) -> None:
    """docs/spec.md: the Dask engine reads a NaN as null (pandas has one missing value for floats)."""
    src = source(root, {"f": [1.0, float("nan")]})
    values = {e: pq.read_table(root / e / commit(e, root, src, {"path": str(root / e)}).files[0].path).column("f").to_pylist() for e in ENGINES}
    assert values["dask"] == [1.0, None] and values["polars"][0] == 1.0 and values["polars"][1] != values["polars"][1]


def test_a_dictionary_column_is_written_alike(root: Path) -> None:
    written(agreed(root, source(root, {"id": [1, 2, 3, 4], "c": pa.array(["x", "y", "x", None]).dictionary_encode()})))


@pytest.mark.parametrize("column", [
    pa.array([dt.time(1, 2), None, dt.time(3), dt.time(4)]),
    pa.array([b"a", None, b"\x00", b"z"]),
    pa.array([[1], [2, 3], None, []]),
], ids=["time", "binary", "list"])
def test_a_time_binary_or_list_column_is_written_or_refused_alike(root: Path, column: pa.Array) -> None:
    """time64[ns], large_binary and large_list on both engines (Dask's sink failed with a raw ArrowInvalid)."""
    agreed(root, source(root, {"id": [1, 2, 3, 4], "c": column}))


@pytest.mark.parametrize(("column", "what"), [
    (pa.array([b"a", None, b"\x00", b"z"]), "bytes"),
    (pa.array([[1], [2, 3], None, []]), "a list"),
    (pa.array([{"a": 1}, None, {"a": 2}, {"a": 3}]), "a struct"),
], ids=["binary", "list", "struct"])
def test_a_column_a_csv_sink_cannot_hold_is_refused_naming_it_on_both_engines(root: Path, column: pa.Array, what: str) -> None:
    # Polars' writer (both engines write CSV with it) failed with "CSV format does not support nested data", naming nothing.
    src = source(root, {"id": [1, 2, 3, 4], "c": column})
    assert refusal(agreed(root, src, {"format": "csv"})) == "invalid_spec"
    for engine in ENGINES:
        with pytest.raises(SpecError, match=f"column 'c' holds {what}") as refused:
            commit(engine, root, src, {"path": str(root / f"csv_{engine}"), "format": "csv"})
        assert refused.value.field == "sink.format"
        assert not (root / f"csv_{engine}").exists()


@pytest.mark.parametrize("expr", ["1", "1 + 1", "length('abc')"])
def test_an_integer_constant_column_is_int64_on_both_engines(root: Path, expr: str) -> None:
    got = written(agreed(root, source(root, {"id": [1, 2]}), steps=[{"op": "assign", "column": "x", "expr": expr}]))
    assert ("x", "int64") in got["dask"].columns()


def test_polars_appends_an_integer_constant_column_onto_a_sink_dask_wrote(root: Path) -> None:
    src, steps = source(root, {"id": [1, 2]}), [{"op": "assign", "column": "x", "expr": "1"}]
    sink = {"path": str(root / "out"), "mode": "append"}
    commit("dask", root, src, sink, steps)
    assert commit("polars", root, src, sink, steps).total_rows == 4


def test_a_datetime_cast_to_text_is_written_alike(root: Path) -> None:
    src = source(root, {"id": [1, 2], "t": ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 3, 4, 5))})
    written(agreed(root, src, steps=[{"op": "assign", "column": "x", "expr": "cast(t, 'string')"}]))


# 2. An empty result.


@pytest.mark.parametrize("mode", ["error", "append", "overwrite"])
@pytest.mark.parametrize("sink", [{}, {"format": "csv"}, {"format": "csv", "compression": "gzip"}], ids=["parquet", "csv", "csv gzip"])
def test_an_empty_result_is_one_file_of_the_columns_on_both_engines(root: Path, sink: dict[str, Any], mode: str) -> None:
    src = source(root, {"id": [1, 2], "s": ["a", None], "b": [True, None], "t": ts(dt.datetime(2024, 1, 1), None), "n": [1, None]})
    got = written(agreed(root, src, {**sink, "mode": mode}, [{"op": "filter", "expr": "id > 100"}]))
    assert got["dask"].manifest.total_rows == 0 and len(got["dask"].manifest.files) == 1
    assert got["dask"].columns() == [("id", "int64"), ("s", "large_string"), ("b", "bool"), ("t", "timestamp[us]"), ("n", "int64")]
    if "format" in sink:
        assert got["dask"].text() == "id,s,b,t,n\n"


@pytest.mark.parametrize("mode", ["error", "append"])
@pytest.mark.parametrize("keys", [["s"], ["s", "b"]], ids=["one key", "two keys"])
def test_an_empty_partitioned_result_commits_no_files_on_both_engines(root: Path, keys: list[str], mode: str) -> None:
    src = source(root, {"id": [1, 2], "s": ["a", None], "b": [True, None]})
    got = written(agreed(root, src, {"partition_on": keys, "mode": mode}, [{"op": "filter", "expr": "id > 100"}]))
    assert got["dask"].manifest.files == [] and [c for c, _ in got["dask"].columns()][-len(keys):] == keys


# 3. partition_on: the folders written, and what the manifest says.

AGREED_VALUES = {
    "empty text": ["a", "", "b", ""],
    "dots": ["..", ".", "a", "..."],
    "spaces and commas": [" a ", "a,b", "x+y@~", "c "],
    "ints": [1, 2, 3, 1],
    "floats": [1.5, 2.0, 3.25, 1e-300],
    "bools": [True, False, True, False],
    "text of digits": ["01", "1", "007", "x"],
}


@pytest.mark.parametrize("values", list(AGREED_VALUES.values()), ids=list(AGREED_VALUES))
def test_partition_values_make_the_same_folders_and_rows(root: Path, values: list[Any]) -> None:
    got = written(agreed(root, source(root, {"id": [1, 2, 3, 4], "p": values}), {"partition_on": ["p"]}))
    assert len(got["dask"].folders()) == len(set(values)) and got["dask"].manifest.total_rows == 4


def test_partition_keys_are_typed_as_pyarrow_infers_them_from_the_folders_on_both_engines(root: Path) -> None:
    """docs/sinks.md: hive partition keys last, typed from the folder names (an int64 key is int32, a float or bool text),
    but a text column's key is text whatever its values look like."""
    src = source(root, {"id": [1, 2], "i": [1, 2], "f": [1.5, 2.0], "b": [True, False], "s": ["01", "2"]})
    got = written(agreed(root, src, {"partition_on": ["i", "f", "b", "s"]}))
    assert got["dask"].columns() == [("id", "int64"), ("i", "int32"), ("f", "string"), ("b", "string"), ("s", "string")]


def test_null_keys_of_several_partition_columns_are_hives_null_folder_on_both_engines(root: Path) -> None:
    src = source(root, {"id": [1, 2, 3, 4], "a": ["x", None, "x", None], "b": [1, 1, None, None]})
    got = written(agreed(root, src, {"partition_on": ["b", "a"]}))
    assert "b=__HIVE_DEFAULT_PARTITION__/a=__HIVE_DEFAULT_PARTITION__" in got["dask"].folders()
    assert got["dask"].columns() == [("id", "int64"), ("b", "int32"), ("a", "string")]


def test_twelve_hundred_partition_values_make_twelve_hundred_folders_on_both_engines(root: Path) -> None:
    got = written(agreed(root, source(root, {"id": list(range(1200)), "k": [f"v{i}" for i in range(1200)]}), {"partition_on": ["k"]}))
    assert len(set(got["dask"].folders())) == 1200


def test_a_partition_column_renamed_by_a_step_is_written_alike(root: Path) -> None:
    got = written(agreed(root, source(root, {"id": [1, 2], "k": ["x", "y"]}), {"partition_on": ["k2"]}, [{"op": "rename", "columns": {"k": "k2"}}]))
    assert got["dask"].folders() == ["k2=x", "k2=y"]


@pytest.mark.parametrize(("steps", "keys", "code"), [
    ([], ["a", "b"], "invalid_spec"),
    ([{"op": "select", "columns": ["id"]}], ["k"], "unknown_column"),
], ids=["every column", "a column a step dropped"])
def test_a_partition_on_that_leaves_nothing_or_names_a_dropped_column_is_refused_alike(root: Path, steps: list[dict[str, Any]], keys: list[str], code: str) -> None:
    src = source(root, {"id": [1, 2], "k": ["x", "y"]} if "k" in keys else {"a": ["x", "y"], "b": [1, 2]})
    assert refusal(agreed(root, src, {"partition_on": keys}, steps)) == code


@pytest.mark.parametrize("value", ["a/b", "../x", "c%20d", "a=b", "100%", "a*b?[c]"])
def test_a_partition_value_that_looks_like_a_path_or_an_escape_is_kept_alike(root: Path, value: str) -> None:
    written(agreed(root, source(root, {"id": [1, 2], "p": [value, "plain"]}), {"partition_on": ["p"]}))


@pytest.mark.parametrize("value", ["__HIVE_DEFAULT_PARTITION__", "%5F_HIVE_DEFAULT_PARTITION__"])
def test_the_null_folders_name_as_a_value_keeps_its_rows_apart_from_the_nulls(root: Path, value: str) -> None:
    # Both used to land in the null's folder, the rows written first overwritten: 3 rows in, 2 committed, silently.
    src = source(root, {"id": [1, 2, 3], "p": [value, None, "x"]})
    sinks = written(agreed(root, src, {"partition_on": ["p"]}))
    for engine in ENGINES:
        assert commit(engine, root, src, {"path": str(root / f"{engine}_count"), "partition_on": ["p"]}).total_rows == 3, engine
    for engine, sink in sinks.items():  # read back: Polars reads each folder's value; Dask (pyarrow) cannot tell it from null
        src_back = {"format": "parquet", "path": str(sink.path)}
        back = commit("polars", root, src_back, {"path": str(root / f"back_{engine}")})
        assert pq.read_table(root / f"back_{engine}").sort_by("id").column("p").to_pylist() == [value, None, "x"], (engine, back)
        if value == "__HIVE_DEFAULT_PARTITION__":
            with pytest.raises(SpecError, match="engine: polars") as refused:
                commit("dask", root, src_back, {"path": str(root / f"back_dask_{engine}")})
            assert refused.value.field == "source.path"


@pytest.mark.parametrize("values", [["héllo 日本", "x"], ["a\nb", "c"], ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 3, 4, 5))],
                         ids=["unicode", "newline", "datetime"])
def test_unicode_newline_and_datetime_partition_values_make_the_same_folders(root: Path, values: Any) -> None:
    written(agreed(root, source(root, {"id": [1, 2], "p": values}), {"partition_on": ["p"]}))


def test_a_partition_value_never_writes_outside_the_sink(root: Path) -> None:
    src = source(root, {"id": [1, 2], "p": ["x/../../elsewhere", "ok"]})
    for engine in ENGINES:
        assert commit(engine, root, src, {"path": str(root / engine), "partition_on": ["p"]}).total_rows == 2, engine
    assert not (root / "elsewhere").exists()


@pytest.mark.parametrize("value", ["a\x00b", "a\\b"], ids=["nul", "backslash"])
def test_a_partition_value_with_a_nul_or_a_backslash_is_written_alike(root: Path, value: str) -> None:
    written(agreed(root, source(root, {"id": [1, 2], "p": [value, "c"]}), {"partition_on": ["p"]}))


@pytest.mark.parametrize("key", ["a/b", "a=b"])
def test_a_partition_column_name_with_a_slash_or_an_equals_sign_is_the_manifests_column(root: Path, key: str) -> None:
    got = written(agreed(root, source(root, {"id": [1, 2], key: ["x", "y"]}), {"partition_on": [key]}))
    assert got["dask"].columns()[-1] == (key, "string")


def test_a_partition_value_too_long_for_a_folder_name_is_refused_with_a_spillway_error(root: Path) -> None:
    assert refusal(agreed(root, source(root, {"id": [1, 2], "p": ["x" * 300, "y"]}), {"partition_on": ["p"]})) == "invalid_spec"


@pytest.mark.parametrize("mode", ["error", "append"])
def test_a_partition_column_of_only_nulls_commits_on_both_engines(root: Path, mode: str) -> None:
    src = source(root, {"id": [1, 2], "p": pa.array([None, None], pa.string())})
    got = written(agreed(root, src, {"partition_on": ["p"], "mode": mode}))
    assert got["dask"].manifest.total_rows == 2 and got["dask"].columns()[-1] == ("p", "string")


def test_an_integer_partition_column_of_only_nulls_is_typed_as_its_values_will_be(root: Path) -> None:
    """int32, as pyarrow types the folders k=1/, k=2/ of a later append: that append is then no change of type."""
    sink = {"partition_on": ["p"], "mode": "append"}
    got = written(agreed(root, source(root, {"id": [1, 2], "p": pa.array([None, None], pa.int64())}), sink))
    assert got["dask"].columns()[-1] == ("p", "int32")
    for engine in ENGINES:
        later = commit(engine, root, source(root, {"id": [3, 4], "p": [1, 2]}, "later.parquet"), {**sink, "path": str(root / engine)})
        assert later.total_rows == 4 and later.columns[-1].type == "int32"


# 4. Modes: overwrite one layout with another, append across engines and schemas.


@pytest.mark.parametrize(("first", "then"), [
    ({}, {"partition_on": ["k"]}),
    ({"partition_on": ["k"]}, {}),
    ({"partition_on": ["k"]}, {"format": "csv"}),
    ({"format": "csv"}, {"partition_on": ["k"]}),
], ids=["plain to partitioned", "partitioned to plain", "partitioned to csv", "csv to partitioned"])
@pytest.mark.parametrize("before", ENGINES)
def test_an_overwrite_replaces_one_layout_with_another_on_both_engines(root: Path, before: str, first: dict[str, Any], then: dict[str, Any]) -> None:
    src = source(root, {"id": list(range(10)), "k": ["x", "y"] * 5})
    for engine in ENGINES:
        commit(before, root, src, {"path": str(root / engine), **first})
    got = written(agreed(root, src, {"mode": "overwrite", **then}))
    for sink in got.values():
        on_disk = sorted(p.relative_to(sink.path).as_posix() for p in sink.path.rglob("*") if p.is_file() and not p.name.startswith("_"))
        assert on_disk == sorted(f.path for f in sink.manifest.files) and sink.manifest.version == 2 and sink.manifest.total_rows == 10


@pytest.mark.parametrize("sink", [
    {"row_group_size": 1}, {"row_group_size": 1_000_000_000}, {"row_group_size": 3, "partition_on": ["k"]},
    *({"compression": codec} for codec in ("snappy", "zstd", "gzip", "lz4", "none")),
], ids=lambda sink: ",".join(f"{k}={v}" for k, v in sink.items()))
def test_row_groups_and_codecs_reach_the_files_alike(root: Path, sink: dict[str, Any]) -> None:
    got = written(agreed(root, source(root, {"id": list(range(10)), "k": ["x", "y"] * 5}), sink))
    layout = {engine: [(pq.read_metadata(w.path / f.path).num_row_groups, pq.read_metadata(w.path / f.path).row_group(0).column(0).compression)
                       for f in sorted(w.manifest.files, key=lambda f: f.path)] for engine, w in got.items()}
    assert layout["dask"] == layout["polars"]
    codec = {"none": "UNCOMPRESSED"}.get(sink.get("compression", "snappy"), sink.get("compression", "snappy").upper())
    assert {c for _, c in layout["dask"]} == {codec}


@pytest.mark.parametrize("sink", [{}, {"format": "csv"}, {"partition_on": ["k"]}], ids=["parquet", "csv", "partitioned"])
@pytest.mark.parametrize(("first", "then"), [("dask", "polars"), ("polars", "dask")])
def test_an_append_onto_the_other_engines_output_adds_its_rows(root: Path, sink: dict[str, Any], first: str, then: str) -> None:
    """The second batch holds an existing partition value (x) and a new one (w)."""
    columns = {"id": [1, 2, 3, 4], "s": ["a", None, "c", "d"], "b": [True, None, False, True], "n": [1, None, 3, 4],
               "t": ts(dt.datetime(2024, 1, 1), None, dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 3))}
    one = source(root, {**columns, "k": ["x", "y", "x", "z"]}, "one.parquet")
    two = source(root, {**columns, "id": [5, 6, 7, 8], "k": ["x", "w", "x", "z"]}, "two.parquet")
    path = root / "out"
    before = commit(first, root, one, {"path": str(path), "mode": "append", **sink})
    after = commit(then, root, two, {"path": str(path), "mode": "append", **sink})
    assert after.version == 2 and after.total_rows == 8 and after.columns == before.columns
    assert [f.job_id for f in after.files][: len(before.files)] == [f.job_id for f in before.files]
    assert read_manifest(path)["total_rows"] == 8
    if "partition_on" in sink:
        assert {f.path.split("/")[0] for f in after.files} == {"k=x", "k=y", "k=z", "k=w"}
        assert len(Written(path, after).rows()) == 8


@pytest.mark.parametrize(("sink", "steps", "outcome"), [
    ({}, [{"op": "assign", "column": "z", "expr": "id + 1"}], "sink_schema_mismatch"),
    ({}, [{"op": "select", "columns": ["id"]}], "sink_schema_mismatch"),
    ({}, [{"op": "assign", "column": "n", "expr": "n * 1.5"}], "sink_schema_mismatch"),
    ({}, [{"op": "select", "columns": ["n", "id"]}], 4),
    ({"format": "csv"}, [{"op": "assign", "column": "n", "expr": "n * 1.5"}], 4),
    ({"format": "csv"}, [{"op": "select", "columns": ["n", "id"]}], "sink_schema_mismatch"),
    ({"partition_on": ["id"]}, [{"op": "assign", "column": "n", "expr": "n * 1.5"}], "sink_schema_mismatch"),
], ids=["a column more", "a column fewer", "another type", "another order", "csv another type", "csv another order",
        "partitioned another type"])
def test_an_append_of_other_columns_is_refused_or_taken_alike(root: Path, sink: dict[str, Any], steps: list[dict[str, Any]], outcome: int | str) -> None:
    src = source(root, {"id": [1, 2], "n": [1, None]})
    got = {}
    for engine in ENGINES:
        path = {"path": str(root / engine), "mode": "append", **sink}
        commit(engine, root, src, path)
        result = _attempt(engine, root, src, path, steps)
        got[engine] = result.total_rows if isinstance(result, ResultManifest) else result.code if isinstance(result, SpillwayError) else repr(result)
        assert read_manifest(root / engine)["version"] == (2 if isinstance(result, ResultManifest) else 1)
    assert got == {"dask": outcome, "polars": outcome}


@pytest.mark.parametrize("engine", ENGINES)
def test_an_append_to_a_text_partition_column_whose_first_values_look_like_numbers(root: Path, engine: str) -> None:
    sink = {"path": str(root / "out"), "mode": "append", "partition_on": ["k"]}
    commit(engine, root, source(root, {"id": [1, 2], "k": ["1", "2"]}, "one.parquet"), sink)
    assert commit(engine, root, source(root, {"id": [3, 4], "k": ["x", "2"]}, "two.parquet"), sink).total_rows == 4


# 5. CSV sinks: the text written, and reading it back as a CSV source.

CSV_COLUMNS = {
    "id": [1, 2, 3, 4, 5],
    "s": ['a,b', 'say "hi"', "line1\nline2", None, "héllo 日本 🎉"],
    "f": [0.1 + 0.2, 1e-300, 1e300, None, 123456789.123456789],
    "g": [1.0, 2.5, -0.0, 1e16, float("inf")],
    "big": pa.array([2**62, -(2**63), 2**63 - 1, None, 0], pa.int64()),
    "b": [True, None, False, True, False],
    "i32": pa.array([1, None, 3, 4, 5], pa.int32()),
}


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_a_csv_sink_of_quotes_newlines_nulls_bools_and_numbers_is_the_same_text(root: Path, codec: str) -> None:
    got = written(agreed(root, source(root, CSV_COLUMNS), {"format": "csv", "compression": codec}))
    assert got["dask"].text().splitlines()[:2] == ["id,s,f,g,big,b,i32", '1,"a,b",0.30000000000000004,1.0,4611686018427387904,true,1']


def test_column_names_with_commas_quotes_newlines_and_unicode_make_the_same_csv_header(root: Path) -> None:
    src = source(root, {"id": [1], "a/b": ["x"], "c,d": [1], 'q"x': [3], "new\nline": [5], "é ü": ["u"], "=": ["e"]})
    assert written(agreed(root, src, {"format": "csv"}))["dask"].text().startswith('id,a/b,"c,d","q""x","new\nline",é ü,=\n')


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_a_csv_sink_reads_back_as_the_same_rows_on_both_engines_whichever_wrote_it(root: Path, codec: str) -> None:
    """0.1 + 0.2, 1e-300, 1e-5, the largest float and int64's extremes come back exact; bools as bools, integers as int64."""
    floats = [0.1 + 0.2, 1e-300, 1e-5, None, 1.7976931348623157e308]
    src = source(root, {**CSV_COLUMNS, "f": floats})
    back = read_back(root, each_commits(root, src, {"format": "csv", "compression": codec}), fmt="csv")
    assert back["dask"].rows() == back["polars"].rows()
    assert back["dask"].columns() == [("id", "int64"), ("s", "large_string"), ("f", "double"), ("g", "double"), ("big", "int64"),
                                      ("b", "bool"), ("i32", "int64")]
    got = back["dask"].table()
    assert got.column("f").to_pylist() == floats and got.column("big").to_pylist() == CSV_COLUMNS["big"].to_pylist()
    assert got.column("s").to_pylist() == CSV_COLUMNS["s"] and got.column("b").to_pylist() == CSV_COLUMNS["b"]


def test_an_empty_string_and_a_null_stay_apart_in_a_csv_sink(root: Path) -> None:
    src = source(root, {"id": [1, 2, 3], "s": ["", None, "a"]})
    back = read_back(root, written(agreed(root, src, {"format": "csv"})), fmt="csv")
    assert back["dask"].rows() == back["polars"].rows()


def test_datetimes_are_the_same_text_in_a_csv_sink(root: Path) -> None:
    src = source(root, {"id": [1, 2], "t": ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),
                        "day": ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)),
                        "z": ts(dt.datetime(2024, 1, 1), None, tz="America/New_York")})
    back = read_back(root, written(agreed(root, src, {"format": "csv"})), fmt="csv")
    assert back["dask"].rows() == back["polars"].rows()


def test_csv_datetimes_read_back_declared_as_datetimes_are_the_same_instants(root: Path) -> None:
    """Either engine's text parses on both engines (dates alone too); a zoned datetime comes back as its UTC instant."""
    src = source(root, {"id": [1, 2, 3], "t": ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 3, 4, 5, 123456), None),
                        "day": ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2), dt.datetime(1900, 1, 1)),
                        "z": ts(dt.datetime(2024, 1, 1), None, dt.datetime(2024, 6, 1), tz="America/New_York")})
    back = read_back(root, each_commits(root, src, {"format": "csv"}), fmt="csv", types={"t": "datetime64[ns]", "day": "datetime64[ns]", "z": "datetime64[ns]"})
    assert back["dask"].rows() == back["polars"].rows()
    got = back["polars"].table().cast(pa.schema([(n, pa.timestamp("us") if n != "id" else pa.int64()) for n in ("id", "t", "day", "z")]))
    assert got.column("z").to_pylist() == [dt.datetime(2024, 1, 1), None, dt.datetime(2024, 6, 1)]
    assert got.column("day").to_pylist() == [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2), dt.datetime(1900, 1, 1)]


def test_small_floats_are_the_same_text_in_a_csv_sink(root: Path) -> None:
    written(agreed(root, source(root, {"f": [1e-5, 0.5], "f32": pa.array([123456789012.5, 0.0001], pa.float32())}), {"format": "csv"}))


# 6. A partitioned sink read back as a parquet source (hive keys from the folder names).


def test_a_partitioned_sink_of_text_keys_reads_back_alike(root: Path) -> None:
    values = ["a", "", "b c", "x,y"]
    back = read_back(root, written(agreed(root, source(root, {"id": [1, 2, 3, 4], "p": values}), {"partition_on": ["p"]})))
    assert back["dask"].rows() == back["polars"].rows()
    assert back["dask"].columns() == [("id", "int64"), ("p", "large_string")]
    assert back["dask"].table().column("p").to_pylist() == values


def test_a_partitioned_sink_with_a_null_key_reads_back_alike(root: Path) -> None:
    read_back(root, written(agreed(root, source(root, {"id": [1, 2, 3], "p": ["a", None, "b"]}), {"partition_on": ["p"]})))


@pytest.mark.parametrize("values", [
    pytest.param([1, 2], id="int"),
    pytest.param([1.5, 2.0], id="float"),
    pytest.param([2**40, 1], id="big int"),
    pytest.param([True, False], id="bool"),
    pytest.param(ts(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 3, 4)), id="datetime"),
])
def test_a_partitioned_sink_of_typed_keys_reads_back_in_the_same_type(root: Path, values: Any) -> None:
    """Both engines read a key back as the checker types it: int64 where every folder holds an integer, else text."""
    read_back(root, each_commits(root, source(root, {"id": [1, 2], "p": values}), {"partition_on": ["p"]}))


def test_a_partitioned_sink_of_digit_text_keys_reads_back_alike(root: Path) -> None:
    read_back(root, written(agreed(root, source(root, {"id": [1, 2, 3, 4], "p": ["01", "1", "007", "x"]}), {"partition_on": ["p"]})))


def test_an_escaped_partition_column_name_reads_back_as_its_name(root: Path) -> None:
    """a%3Db=x/ is column 'a=b' with value 'x' on both engines (Polars read a column 'a%3Db')."""
    src = source(root, {"id": [1, 2], "a=b": ["x", "y"]})
    read_back(root, each_commits(root, src, {"partition_on": ["a=b"]}, engines=("polars",)))
