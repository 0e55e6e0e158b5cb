"""CSV and JSON-lines edge cases: both engines read the same rows, or refuse alike with a Spillway error.

Each case is a small file (or a directory of files) run through both engines. Where a split matters the case runs
twice: as one block and with ``blocksize: 1KiB``, so the Dask engine's reader (jobs.dask_read.TextBlockReader)
reads headerless blocks that start mid-file while the Polars engine scans each file whole. A case the engines
disagree on today, or where either one fails with a raw Polars/pandas exception (a 500 to the user) instead of a
``SpillwayError`` (``read_type_mismatch``, ``invalid_spec``…), is an ``xfail(strict=True)`` whose reason says what
each engine does: it starts to pass once both give one answer.
"""

from __future__ import annotations

import bz2
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pytest

from spillway.jobs.errors import CsvScanMiscount, SpecError, SpillwayError
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.sandbox import enforce_roots
from spillway.jobs.sources import TEXT_HEAD_ROWS, text_read_types
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.conftest import ServiceProcess
from tests.test_bad_input import error_of, post
from tests.test_engines import assert_same_rows, run_both
from tests.test_text_types import run_on, values

ENGINES = ("dask", "polars")
BLOCKS = pytest.mark.parametrize("blocksize", [None, "1KiB"], ids=["one block", "many blocks"])
#: Rows past the type-deciding head, for values the head must not see.
PAST_HEAD = TEXT_HEAD_ROWS + 100


@pytest.fixture()
def root(tmp_path: Path) -> Iterator[Path]:
    """A folder for the case's files, checked as the data roots a job the manager runs has: the Polars engine then
    names the file of a value it refuses, as the Dask engine does."""
    with enforce_roots([str(tmp_path)]):
        yield tmp_path


def write(root: Path, files: dict[str, str]) -> None:
    """Each file's text as UTF-8 (gzipped where its name ends in ``.gz``), parents made."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode()
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)


def job(root: Path, path: str, steps: list[dict[str, Any]] | None = None, *, types: dict[str, str] | None = None,
        blocksize: str | None = None, fmt: str | None = None) -> JobSpec:
    """A job over ``root / path``: JSON lines where the name says so or ``fmt`` does, else CSV."""
    source: dict[str, Any] = {"format": fmt or ("jsonl" if ".jsonl" in path else "csv"), "path": str(root / path)}
    if types is not None:
        source["types"] = types
    if blocksize is not None:
        source["blocksize"] = blocksize
    return JobSpec.model_validate({"source": source, "steps": steps or [], "sink": {"path": str(root / "unused")}})


def csv_rows(count: int, line: str = "{i},v{i}", start: int = 0) -> str:
    return "".join(line.format(i=i) + "\n" for i in range(start, start + count))


def jsonl(rows: Any) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def _failure(engine: str, spec: JobSpec, out: Path) -> BaseException | None:
    try:
        run_on(engine, spec, out)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - what each engine raises is the point, a Rust panic (a BaseException) too
        return exc
    return None


def agreed(spec: JobSpec, out: Path) -> pd.DataFrame | str:
    """What both engines give ``spec``: the same rows (the Dask engine's, returned), or the same Spillway error (its
    code, returned). A raw exception on either engine, or one engine failing alone, fails the assertion."""
    try:
        on_dask, on_polars = run_both(spec)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - told apart below, on the workers' own paths
        pass
    else:
        assert_same_rows(on_dask, on_polars, ordered=False)
        counted = run_both(counting(spec))  # a count reads no column where the job's columns are gone: another read path
        want = [len(on_dask)] if len(on_dask) else []  # docs/spec.md: by: [] over no rows is no output row
        assert [values(frame["rows"]) for frame in counted] == [want] * 2, (len(on_dask), counted)
        return on_dask
    failures = {engine: _failure(engine, spec, out / f"try_{engine}") for engine in ENGINES}
    described = {engine: f"{type(exc).__name__}: {str(exc)[:200]}" if exc else "no error" for engine, exc in failures.items()}
    assert any(failures.values()), "run_both failed, yet both engines' worker paths wrote the job"
    assert all(failures.values()), f"one engine failed alone: {described}"
    assert all(isinstance(exc, SpillwayError) for exc in failures.values()), f"a raw exception, not a SpillwayError: {described}"
    codes = {engine: exc.code for engine, exc in failures.items() if isinstance(exc, SpillwayError)}
    assert codes["dask"] == codes["polars"], described
    return codes["dask"]


def counting(spec: JobSpec) -> JobSpec:
    """``spec`` with its rows counted after its steps."""
    return JobSpec.model_validate({**spec.model_dump(mode="json", exclude_none=True), "steps": [
        *[step.model_dump(mode="json", exclude_none=True) for step in spec.steps], {"op": "groupby", "by": [], "aggs": {"rows": {"func": "size"}}}]})


def rows_of(result: pd.DataFrame | str) -> pd.DataFrame:
    assert isinstance(result, pd.DataFrame), f"refused: {result}"
    return result


def refusal(result: pd.DataFrame | str) -> str:
    assert isinstance(result, str), f"read {len(result)} rows"
    return result


def refused_naming(spec: JobSpec, out: Path, file: str, why: str) -> None:
    """Both engines refuse ``spec`` as ``unreadable_source``, naming ``file`` and saying ``why``; and so does the checker
    at submit where the first file already shows it."""
    assert refusal(agreed(spec, out)) == "unreadable_source"
    for engine in ENGINES:
        failure = _failure(engine, spec, out / f"named_{engine}")
        assert isinstance(failure, SpillwayError) and file in failure.message and why in failure.message, (engine, failure)
        assert failure.field == "source.path", (engine, failure.field)
        assert f"'{out}/" in failure.message and "://" not in failure.message, (engine, failure.message)  # the path, no internal URL


def on_dask_alone(spec: JobSpec) -> pd.DataFrame:
    """The Dask engine's rows alone, for a case the Polars engine cannot read."""
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(spec, plan_spec(spec)).compute().reset_index(drop=True)


# 1. CSV quoting, line endings and encodings.


@BLOCKS
def test_quoted_fields_with_commas_and_doubled_quotes_read_alike(root: Path, blocksize: str | None) -> None:
    write(root, {"q.csv": "id,s,t\n" + csv_rows(300, '{i},"a, ""b"" {i}",x')})
    got = rows_of(agreed(job(root, "q.csv", blocksize=blocksize), root))
    assert len(got) == 300 and got.set_index("id").loc[7, "s"] == 'a, "b" 7'


def test_a_quoted_newline_read_as_one_block_is_part_of_its_field_on_both_engines(root: Path) -> None:
    write(root, {"q.csv": "id,s,t\n" + csv_rows(300, '{i},"line one\nline {i}",x')})
    got = rows_of(agreed(job(root, "q.csv"), root))
    assert len(got) == 300 and got.set_index("id").loc[7, "s"] == "line one\nline 7"


@pytest.mark.parametrize("types", [None, {"id": "string"}], ids=["id int64", "every column string"])
def test_a_quoted_newline_in_a_file_split_into_blocks_reads_alike(root: Path, types: dict[str, str] | None) -> None:
    """The Dask engine reads a file with a quote in its first MiB as one block (it split it mid-field: a raw error, or a
    read_type_mismatch for a text no row held)."""
    write(root, {"q.csv": "id,s,t\n" + csv_rows(300, '{i},"line one\nline {i}",x')})
    assert len(rows_of(agreed(job(root, "q.csv", types=types, blocksize="1KiB"), root))) == 300


@BLOCKS
def test_crlf_line_endings_leave_no_carriage_return_in_the_last_column(root: Path, blocksize: str | None) -> None:
    write(root, {"crlf.csv": "id,n,s\r\n" + "".join(f"{i},{i},v{i}\r\n" for i in range(300))})
    spec = job(root, "crlf.csv", [{"op": "filter", "expr": "s == 'v7'"}], blocksize=blocksize)
    assert text_read_types(spec.source, str(root / "crlf.csv")) == {"id": "int64", "n": "int64", "s": "string"}
    got = rows_of(agreed(spec, root))
    assert values(got["n"]) == [7]


@BLOCKS
def test_a_quoted_crlf_inside_a_field_is_kept_by_both_engines(root: Path, blocksize: str | None) -> None:
    write(root, {"crlf.csv": "id,s\r\n" + "".join(f'{i},"a, {i}"\r\n' for i in range(300)) + '300,"a\r\nb"\r\n'})
    got = rows_of(agreed(job(root, "crlf.csv", [{"op": "filter", "expr": "id == 300"}], blocksize=blocksize), root))
    assert values(got["s"]) == ["a\r\nb"]


@BLOCKS
@pytest.mark.parametrize("name", ["bom.csv", "bom.csv.gz"])
def test_a_utf8_bom_is_not_part_of_the_first_column_name(root: Path, name: str, blocksize: str | None) -> None:
    write(root, {name: "\ufeffid,s\r\n" + "".join(f"{i},v{i}\r\n" for i in range(300))})
    spec = job(root, name, [{"op": "filter", "expr": "id == 5"}], blocksize=blocksize)
    assert list(text_read_types(spec.source, str(root / name))) == ["id", "s"]
    assert values(rows_of(agreed(spec, root))["s"]) == ["v5"]


@BLOCKS
def test_unicode_values_and_column_names_read_alike(root: Path, blocksize: str | None) -> None:
    write(root, {"u.csv": "id,ñame\n" + csv_rows(300, "{i},héllo→✓ 日本 {i} 🎉")})
    got = rows_of(agreed(job(root, "u.csv", [{"op": "assign", "column": "l", "expr": "length(ñame)"}], blocksize=blocksize), root))
    assert got.set_index("id").loc[3, "ñame"] == "héllo→✓ 日本 3 🎉" and set(got["l"]) == {14, 15, 16}


def test_cr_only_line_endings_are_refused_alike_naming_the_file(root: Path) -> None:
    """pandas splits rows at a lone CR, Polars does not (its header would hold every row): refused by the checker."""
    write(root, {"cr.csv": "id,s\r" + "".join(f"{i},v{i}\r" for i in range(100))})
    refused_naming(job(root, "cr.csv"), root, "cr.csv", "lone carriage return")
    with pytest.raises(SpecError) as refused:
        plan_spec(job(root, "cr.csv"))
    assert refused.value.code == "unreadable_source" and refused.value.field == "source.path"


@pytest.mark.parametrize("name", ["f.csv.bz2", "f.jsonl.bz2"])
def test_a_bzip2_file_reads_alike(root: Path, name: str) -> None:
    text = "id,s\n" + csv_rows(300) if ".csv" in name else jsonl({"id": i, "s": f"v{i}"} for i in range(300))
    (root / name).write_bytes(bz2.compress(text.encode()))
    assert len(rows_of(agreed(job(root, name), root))) == 300


# 2. Empty files, blank lines, missing newlines.


@pytest.mark.parametrize("text", ["id,s\n", "id,s"], ids=["with newline", "without"])
def test_a_header_only_file_is_no_rows_of_text_columns_on_both_engines(root: Path, text: str) -> None:
    write(root, {"h.csv": text})
    spec = job(root, "h.csv", [{"op": "assign", "column": "x", "expr": "s + '!'"}])
    assert text_read_types(spec.source, str(root / "h.csv")) == {"id": "string", "s": "string"}
    got = rows_of(agreed(spec, root))
    assert len(got) == 0 and list(got.columns) == ["id", "s", "x"]


def test_a_header_only_first_file_makes_every_column_text_on_both_engines(root: Path) -> None:
    write(root, {"d/a.csv": "id,n\n", "d/b.csv": "id,n\n1,2\n"})
    got = rows_of(agreed(job(root, "d", [{"op": "assign", "column": "x", "expr": "n + '!'"}]), root))
    assert values(got["x"]) == ["2!"]


def test_a_header_only_second_file_adds_no_rows(root: Path) -> None:
    write(root, {"d/a.csv": "id,s\n1,a\n", "d/b.csv": "id,s\n"})
    assert values(rows_of(agreed(job(root, "d"), root))["s"]) == ["a"]


@pytest.mark.parametrize("second", ["b.csv", "b.csv.gz"])
def test_an_empty_second_csv_file_reads_alike(root: Path, second: str) -> None:
    write(root, {"d/a.csv": "id,s\n1,a\n", f"d/{second}": ""})
    assert values(rows_of(agreed(job(root, "d"), root))["s"]) == ["a"]


def test_an_empty_first_csv_file_is_refused_at_submit(root: Path) -> None:
    write(root, {"d/a.csv": "", "d/b.csv": "id,s\n1,a\n"})
    with pytest.raises(SpecError) as refused:
        plan_spec(job(root, "d"))
    assert refused.value.field == "source.path"


@BLOCKS
def test_no_trailing_newline_keeps_the_last_row(root: Path, blocksize: str | None) -> None:
    write(root, {"n.csv": ("id,s\n" + csv_rows(300)).rstrip("\n")})
    got = rows_of(agreed(job(root, "n.csv", blocksize=blocksize), root))
    assert len(got) == 300 and 299 in set(got["id"])


@BLOCKS
def test_blank_lines_between_and_after_rows_read_alike(root: Path, blocksize: str | None) -> None:
    """Both engines read a blank line of a CSV file as a row of nulls (Polars' reader does; pandas would skip it)."""
    lines = "".join(f"{i},v{i}\n" + ("\n" if i % 50 == 0 else "") for i in range(300))
    write(root, {"b.csv": "id,s\n\n" + lines + "\n\n"})
    got = rows_of(agreed(job(root, "b.csv", blocksize=blocksize), root))
    assert sorted(got["id"].dropna()) == list(range(300))


def test_blank_lines_filling_whole_blocks_read_alike(root: Path) -> None:
    write(root, {"b.csv": "id,s\n" + csv_rows(100) + "\n" * 3000 + csv_rows(100, start=100)})
    rows_of(agreed(job(root, "b.csv", blocksize="1KiB"), root))


def test_a_row_with_fewer_fields_is_padded_with_nulls_on_both_engines(root: Path) -> None:
    write(root, {"r.csv": "id,s,t\n" + csv_rows(300, "{i},v{i},t") + "300\n"})
    got = rows_of(agreed(job(root, "r.csv", [{"op": "filter", "expr": "id == 300"}]), root))
    assert values(got["s"]) == [None] and values(got["t"]) == [None]


@BLOCKS
def test_a_row_with_more_fields_past_the_head_is_refused_alike_naming_the_file(root: Path, blocksize: str | None) -> None:
    write(root, {"r.csv": "id,s\n" + csv_rows(PAST_HEAD) + f"{PAST_HEAD},v,extra\n"})
    refused_naming(job(root, "r.csv", blocksize=blocksize), root, "r.csv", "more fields")


def test_a_hash_line_is_data_on_both_engines(root: Path) -> None:
    write(root, {"c.csv": "id,s\n#1,x\n2,y\n"})
    assert values(rows_of(agreed(job(root, "c.csv"), root)).sort_values("s")["id"]) == ["#1", "2"]


def test_a_tsv_file_is_read_as_comma_separated_on_both_engines(root: Path) -> None:
    """``.tsv`` is a CSV suffix (jobs.sources.SUFFIXES), but no reader is told its separator: one column on both."""
    write(root, {"t.tsv": "id\ts\n1\tv1\n"})
    got = rows_of(agreed(job(root, "t.tsv"), root))
    assert list(got.columns) == ["id\ts"] and values(got["id\ts"]) == ["1\tv1"]


# 3. Headers: duplicate and empty names.


@pytest.mark.parametrize("steps", [[], [{"op": "select", "columns": ["id", "a"]}]], ids=["reads both", "reads the first"])
def test_duplicate_column_names_are_refused_alike_naming_the_file(root: Path, steps: list[dict[str, Any]]) -> None:
    """pandas and Polars name the second ``a`` differently (``a.1``, ``a_duplicated_0``): no engine could read it as the other."""
    write(root, {"dup.csv": "id,a,a\n" + csv_rows(50, "{i},x{i},y{i}")})
    refused_naming(job(root, "dup.csv", steps), root, "dup.csv", "names column 'a' twice")


@pytest.mark.parametrize(("header", "line"), [("id,,s", "{i},x{i},y{i}"), ("id,s,", "{i},v{i},")], ids=["middle", "trailing comma"])
def test_an_empty_column_name_is_refused_alike_naming_the_file(root: Path, header: str, line: str) -> None:
    write(root, {"e.csv": header + "\n" + csv_rows(50, line)})
    refused_naming(job(root, "e.csv"), root, "e.csv", "has no name")


def test_a_trailing_comma_on_every_row_is_refused_alike_naming_the_file(root: Path) -> None:
    """Not read as an index column by the checker (pandas' default for such a file): a row of more fields than the header."""
    write(root, {"t.csv": "id,s\n" + csv_rows(50, "{i},v{i},")})
    refused_naming(job(root, "t.csv"), root, "t.csv", "more fields")


def test_quoted_header_names_read_alike(root: Path) -> None:
    write(root, {"q.csv": '"id","my col"\n' + csv_rows(50)})
    assert values(rows_of(agreed(job(root, "q.csv", [{"op": "filter", "expr": "id == 3"}]), root))["my col"]) == ["v3"]


# 4. Several files: columns in another order, one more or one fewer.

_FIRST = "id,s,n\n" + csv_rows(10, "{i},v{i},{i}")


def test_a_second_file_with_its_columns_in_another_order_is_refused_alike_naming_it(root: Path) -> None:
    write(root, {"d/a.csv": _FIRST, "d/b.csv": "n,id,s\n" + csv_rows(20, "{i},{i}0,w{i}", start=100)})
    refused_naming(job(root, "d"), root, "b.csv", "its header (n, id, s) is not the first file's (id, s, n)")


def test_the_dask_engine_never_reads_a_reordered_second_file_by_position(root: Path) -> None:
    """Its blocks after the first have no header: they were read in the first file's order (a holding b's values)."""
    write(root, {"d/a.csv": "a,b\n" + csv_rows(300, "x{i},y{i}"), "d/b.csv": "b,a\n" + csv_rows(300, "B{i},A{i}")})
    with pytest.raises(SpillwayError) as refused:
        on_dask_alone(job(root, "d", blocksize="1KiB"))
    assert refused.value.code == "unreadable_source" and "b.csv" in refused.value.message


def test_a_second_file_changed_after_planning_is_refused_where_its_first_block_is_read(root: Path) -> None:
    """The header check at planning covers the files as they were; a file rewritten after it is caught by the reader."""
    write(root, {"d/a.csv": "a,b\n" + csv_rows(300, "x{i},y{i}"), "d/b.csv": "a,b\n" + csv_rows(300, "X{i},Y{i}")})
    spec = job(root, "d", blocksize="1KiB")
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        frame = build_frame(spec, plan_spec(spec))
        write(root, {"d/b.csv": "b,a\n" + csv_rows(300, "B{i},A{i}")})
        with pytest.raises(SpillwayError) as refused:
            frame.compute()
    assert refused.value.code == "unreadable_source" and "b.csv" in refused.value.message


@BLOCKS
def test_a_second_file_with_an_extra_column_is_refused_alike_naming_it(root: Path, blocksize: str | None) -> None:
    write(root, {"d/a.csv": _FIRST, "d/b.csv": "id,z,s,n\n" + csv_rows(300, "{i},zz,w{i},{i}", start=1000)})
    refused_naming(job(root, "d", blocksize=blocksize), root, "b.csv", "is not the first file's")


@pytest.mark.parametrize("steps", [[], [{"op": "select", "columns": ["id"]}]], ids=["reads n", "reads id only"])
def test_a_second_file_missing_a_column_is_refused_alike_naming_it(root: Path, steps: list[dict[str, Any]]) -> None:
    write(root, {"d/a.csv": _FIRST, "d/b.csv": "id,s\n" + csv_rows(20, start=1000)})
    refused_naming(job(root, "d", steps), root, "b.csv", "is not the first file's")


# 5. Numbers, empty fields and declared types.


@BLOCKS
def test_whitespace_before_numbers_is_read_alike(root: Path, blocksize: str | None) -> None:
    write(root, {"w.csv": "id,n,f\n" + csv_rows(300, "{i}, {i},\t{i}.5")})
    got = rows_of(agreed(job(root, "w.csv", blocksize=blocksize), root)).set_index("id")
    assert got.loc[3, "n"] == 3 and got.loc[3, "f"] == 3.5


@BLOCKS
@pytest.mark.parametrize("line", ["{i},{i} ", "{i},{i}.5 "], ids=["int64", "float64"])
def test_whitespace_after_numbers_makes_the_column_text_on_the_checker_and_both_engines(root: Path, line: str, blocksize: str | None) -> None:
    """pandas strips it and calls ``7 `` a number; Polars' reader, which strips only leading whitespace, refuses it as
    one. The checker gives a column its head's values do not read in as text (it refused every such file before)."""
    write(root, {"w.csv": "id,n\n" + csv_rows(300, line)})
    spec = job(root, "w.csv", [{"op": "filter", "expr": "id == 3"}], blocksize=blocksize)
    assert text_read_types(spec.source, str(root / "w.csv")) == {"id": "int64", "n": "string"}
    assert values(rows_of(agreed(spec, root))["n"]) == [line.format(i=3).split(",")[1]]


def test_an_integer_beyond_int64_in_the_head_makes_its_column_text_on_both_engines(root: Path) -> None:
    write(root, {"big.csv": "id,n\n" + csv_rows(50, "{i},{i}") + "50,99999999999999999999\n"})
    got = rows_of(agreed(job(root, "big.csv", [{"op": "filter", "expr": "id == 50"}]), root))
    assert values(got["n"]) == ["99999999999999999999"]


@BLOCKS
def test_an_integer_beyond_int64_past_the_head_fails_alike(root: Path, blocksize: str | None) -> None:
    write(root, {"big.csv": "id,n\n" + csv_rows(PAST_HEAD, "{i},{i}") + f"{PAST_HEAD},99999999999999999999\n"})
    assert refusal(agreed(job(root, "big.csv", blocksize=blocksize), root)) == "read_type_mismatch"


def test_a_uint64_value_in_the_head_fails_or_reads_alike(root: Path) -> None:
    """pandas reads 18446744073709551615 as uint64, so the checker says int64, which both engines then refuse."""
    write(root, {"u.csv": "id,n\n1,1\n2,18446744073709551615\n"})
    agreed(job(root, "u.csv"), root)


def test_an_int32_declared_column_refuses_a_wider_value_alike(root: Path) -> None:
    write(root, {"i.csv": "id,n\n1,1\n2,3000000000\n"})
    assert refusal(agreed(job(root, "i.csv", types={"n": "int32"}), root)) == "read_type_mismatch"


@BLOCKS
def test_an_empty_field_is_null_and_a_quoted_empty_field_is_empty_text(root: Path, blocksize: str | None) -> None:
    write(root, {"e.csv": "id,s,n\n" + csv_rows(300, "{i},x,{i}") + '300,,\n301,"",""\n'})
    steps = [{"op": "filter", "expr": "id >= 300"}, {"op": "assign", "column": "x", "expr": "isnull(s)"},
             {"op": "assign", "column": "y", "expr": "isnull(n)"}]
    got = rows_of(agreed(job(root, "e.csv", steps, blocksize=blocksize), root)).sort_values("id")
    assert values(got["s"]) == [None, ""] and values(got["x"]) == [True, False] and values(got["y"]) == [True, True]


@BLOCKS
def test_a_column_without_a_value_in_the_head_is_text_read_past_it(root: Path, blocksize: str | None) -> None:
    write(root, {"e.csv": "id,e\n" + csv_rows(PAST_HEAD, "{i},") + f"{PAST_HEAD},5\n"})
    got = rows_of(agreed(job(root, "e.csv", [{"op": "filter", "expr": "e == '5'"}], blocksize=blocksize), root))
    assert values(got["id"]) == [PAST_HEAD]


@BLOCKS
def test_a_column_declared_text_keeps_its_leading_zeros_while_the_others_are_inferred(root: Path, blocksize: str | None) -> None:
    write(root, {"z.csv": "id,code,n\n" + csv_rows(300, "{i},00{i},{i}")})
    spec = job(root, "z.csv", [{"op": "filter", "expr": "code == '007'"}, {"op": "assign", "column": "m", "expr": "n * 2"}],
               types={"code": "string"}, blocksize=blocksize)
    got = rows_of(agreed(spec, root))
    assert values(got["id"]) == [7] and values(got["m"]) == [14]


def test_leading_zeros_and_signs_in_an_integer_column_read_alike(root: Path) -> None:
    write(root, {"z.csv": "id,n\n1,007\n2,-0\n3,+5\n"})
    assert values(rows_of(agreed(job(root, "z.csv"), root)).sort_values("id")["n"]) == [7, 0, 5]


def test_bools_in_any_case_read_alike(root: Path) -> None:
    write(root, {"b.csv": "id,b\n1,True\n2,FALSE\n3,true\n4,\n"})
    assert values(rows_of(agreed(job(root, "b.csv"), root)).sort_values("id")["b"]) == [True, False, True, None]


@BLOCKS
def test_text_garbage_in_a_column_the_job_never_reads_fails_neither_engine(root: Path, blocksize: str | None) -> None:
    write(root, {"g.csv": "id,n,g\n" + csv_rows(PAST_HEAD, "{i},{i},{i}") + f"{PAST_HEAD},{PAST_HEAD},zzz\n"})
    got = rows_of(agreed(job(root, "g.csv", [{"op": "select", "columns": ["id", "n"]}], blocksize=blocksize), root))
    assert len(got) == PAST_HEAD + 1


STRAY_QUOTES = pytest.mark.parametrize("garbage", ['ab"c', '"abc'], ids=["stray quote", "unclosed quote"])


def stray_quote_file(root: Path, garbage: str) -> str:
    """A CSV file whose last row holds ``garbage`` in column g: a quote Polars' parallel scan miscounts the rows by."""
    write(root, {"g.csv": "id,n,g\n" + csv_rows(PAST_HEAD, "{i},{i},{i}") + f"{PAST_HEAD},{PAST_HEAD},{garbage}\n"})
    return "g.csv"


COUNT_ROWS = [{"op": "groupby", "by": [], "aggs": {"rows": {"func": "size"}}}]


@STRAY_QUOTES
@pytest.mark.parametrize("steps", [[{"op": "select", "columns": ["id", "n"]}], COUNT_ROWS], ids=["columns", "a row count"])
def test_a_stray_quote_polars_scan_miscounts_is_read_by_dask_and_named_by_polars(root: Path, garbage: str, steps: list[dict[str, Any]]) -> None:
    # Documented in docs/spec.md ("CSV"): Polars' scan fails on such a file (its eager reader does not), the Dask engine
    # reads it; under engine: auto the service then runs the job on Dask (tests/test_service_e2e.py). A row count, which
    # reads no column, was one row short on Polars, silently (jobs.polars_io.counted_by_a_column).
    spec = job(root, stray_quote_file(root, garbage), steps)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        on_dask = build_frame(spec, plan_spec(spec)).compute()
    if steps is COUNT_ROWS:
        assert values(on_dask["rows"]) == [PAST_HEAD + 1]
    else:
        assert values(on_dask["id"])[-1] == PAST_HEAD and len(on_dask) == PAST_HEAD + 1
    with pytest.raises(CsvScanMiscount) as refused:
        run_on("polars", spec, root / "out")
    error = refused.value
    assert error.code == "unreadable_source" and error.field == "source.path" and error.path == str(root / "g.csv")
    assert "g.csv" in error.message and "engine: dask" in error.message and "expected" in error.message


@pytest.mark.gpu
@STRAY_QUOTES
@pytest.mark.parametrize("steps", [[{"op": "select", "columns": ["id", "n"]}], COUNT_ROWS], ids=["columns", "a row count"])
def test_a_stray_quote_on_cudf_polars_reads_the_rows_dask_reads(root: Path, garbage: str, steps: list[dict[str, Any]]) -> None:
    # Not run yet (written in a session without a GPU): cuDF's CSV reader is not Polars' scan, and the service moves a
    # miscounted file to the Dask engine on the CPU only (cluster/manager.py): on the GPU, Dask's rows are the answer wanted.
    pytest.importorskip("cudf_polars")
    from spillway.jobs.gpu_support import gpu_engine

    spec = job(root, stray_quote_file(root, garbage), steps)
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        on_dask = build_frame(spec, plan_spec(spec)).compute()
    on_gpu = build_lazyframe(plan_spec(spec)).collect(engine=gpu_engine()).to_pandas()
    assert_same_rows(on_dask.reset_index(drop=True), on_gpu, ordered=False)


def test_a_row_count_parses_a_column_only_where_the_query_reads_none(root: Path) -> None:
    write(root, {"a.csv": "id,n\n" + csv_rows(50, "{i},{i}")})
    counted = build_lazyframe(plan_spec(job(root, "a.csv", COUNT_ROWS)))
    plan = counted.explain()
    # The guard's filter on a column, or a column the count itself reads (a groupby's size sums int64 ones, whose
    # broadcast over the rows makes Polars parse the file's first column): either way not Polars' own line count.
    assert "is_not_null" in plan or "PROJECT 1/2 COLUMNS" in plan, plan
    assert values(counted.collect().to_pandas()["rows"]) == [50]
    assert "is_not_null" not in build_lazyframe(plan_spec(job(root, "a.csv", [{"op": "select", "columns": ["n"]}]))).explain()


# 6. Date-times.


_LAYOUTS = {  # (the first half's text, the second half's), both read as datetime64[ns]
    "Z and nanoseconds": ("2024-01-05T10:30:00.{i:09d}Z", "2024-01-06T10:30:00.5Z"),
    "date-time then date": ("2024-01-05 10:30:00", "2024-01-06"),
    "date then date-time": ("2024-01-05", "2024-01-06T10:30:00"),
}


@BLOCKS
@pytest.mark.parametrize(("first", "second"), list(_LAYOUTS.values()), ids=list(_LAYOUTS))
def test_datetimes_of_compatible_layouts_in_one_file_read_alike(root: Path, first: str, second: str, blocksize: str | None) -> None:
    write(root, {"t.csv": "id,ts\n" + csv_rows(150, "{i}," + first) + csv_rows(150, "{i}," + second, start=150)})
    spec = job(root, "t.csv", [{"op": "assign", "column": "d", "expr": "day(ts)"}], types={"ts": "datetime64[ns]"}, blocksize=blocksize)
    got = rows_of(agreed(spec, root)).set_index("id")
    assert got.loc[7, "d"] == 5 and got.loc[151, "d"] == 6
    if "{i" in first:
        assert got.loc[7, "ts"] == pd.Timestamp("2024-01-05 10:30:00.000000007")


def test_a_z_date_time_then_a_date_in_one_file_fails_alike(root: Path) -> None:
    write(root, {"t.csv": "id,ts\n1,2024-01-05T10:30:00Z\n2,2024-01-06\n"})
    assert refusal(agreed(job(root, "t.csv", types={"ts": "datetime64[ns]"}), root)) == "read_type_mismatch"


@BLOCKS
def test_an_offset_in_one_file_and_none_in_the_next_read_alike(root: Path, blocksize: str | None) -> None:
    """One layout per file on Polars, per block on Dask: files that each keep theirs read on both."""
    write(root, {"d/a.csv": "id,ts\n" + csv_rows(50, "{i},2024-01-05T00:00:00+02:00"),
                 "d/b.csv": "id,ts\n" + csv_rows(50, "{i},2024-01-05T10:00:00", start=50)})
    spec = job(root, "d", types={"ts": "datetime64[ns]"}, blocksize=blocksize)
    got = rows_of(agreed(spec, root)).set_index("id")
    assert got.loc[1, "ts"] == pd.Timestamp("2024-01-04 22:00") and got.loc[51, "ts"] == pd.Timestamp("2024-01-05 10:00")


def test_an_offset_then_none_in_one_block_fails_alike(root: Path) -> None:
    write(root, {"t.csv": "id,ts\n1,2024-01-05T00:00:00+02:00\n2,2024-01-05T10:30:00\n"})
    assert refusal(agreed(job(root, "t.csv", types={"ts": "datetime64[ns]"}), root)) == "read_type_mismatch"


def _layout_change_at_a_block_boundary() -> str:
    """A file of 2 KiB to 3 KiB (two 1KiB blocks) whose rows change layout exactly where the Dask engine splits it."""
    header, offset, plain = "id,ts\n", "{i},2024-01-05T00:00:00+02:00", "{i},2024-01-05T10:00:00"
    for first in range(1, 100):
        for second in range(1, 150):
            text = header + csv_rows(first, offset) + csv_rows(second, plain, start=first)
            middle = len(text) // 2
            if 2048 <= len(text) < 3072 and len(header + csv_rows(first - 1, offset)) < middle < len(header + csv_rows(first, offset)) - 1:
                return text
    raise AssertionError("no such layout")


def test_a_layout_change_at_a_block_boundary_reads_on_dask_and_fails_on_polars_as_documented(root: Path) -> None:
    # docs/spec.md: one layout per block on the Dask engine, per file on the Polars engine. Here each block holds one.
    text = _layout_change_at_a_block_boundary()
    write(root, {"t.csv": text})
    spec = job(root, "t.csv", types={"ts": "datetime64[ns]"}, blocksize="1KiB")
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        on_dask = build_frame(spec, plan_spec(spec)).compute()
    offsets = text.count("+02:00")
    assert len(on_dask) == text.count("\n") - 1 and offsets > 0
    assert str(on_dask["ts"].iloc[0]) == "2024-01-04 22:00:00" and str(on_dask["ts"].iloc[offsets]) == "2024-01-05 10:00:00"
    failed = _failure("polars", spec, root / "out")
    assert isinstance(failed, SpillwayError) and failed.code == "read_type_mismatch" and "'ts'" in failed.message, failed


# 7. JSON lines.


@BLOCKS
def test_nested_objects_and_arrays_are_their_json_text_on_both_engines(root: Path, blocksize: str | None) -> None:
    write(root, {"n.jsonl": jsonl({"id": i, "o": {"a": i, "b": [1, 2]}, "arr": [i, "x"]} for i in range(300))})
    got = rows_of(agreed(job(root, "n.jsonl", blocksize=blocksize), root)).set_index("id")
    assert got.loc[3, "o"] == '{"a": 3, "b": [1, 2]}' and got.loc[3, "arr"] == '[3, "x"]'


@BLOCKS
def test_nested_objects_the_job_never_reads_fail_neither_engine(root: Path, blocksize: str | None) -> None:
    write(root, {"n.jsonl": jsonl({"id": i, "o": {"a": i}} for i in range(300))})
    got = rows_of(agreed(job(root, "n.jsonl", [{"op": "filter", "expr": "id == 3"}, {"op": "select", "columns": ["id"]}],
                             blocksize=blocksize), root))
    assert values(got["id"]) == [3]


@BLOCKS
def test_keys_in_any_order_and_missing_keys_read_alike(root: Path, blocksize: str | None) -> None:
    rows = [{"s": f"v{i}", "id": i} if i % 2 else {"id": i} if i % 3 == 0 else {"id": i, "s": f"v{i}"} for i in range(300)]
    write(root, {"k.jsonl": jsonl(rows)})
    got = rows_of(agreed(job(root, "k.jsonl", blocksize=blocksize), root)).set_index("id")
    assert got.loc[1, "s"] == "v1" and pd.isna(got.loc[6, "s"]) and got.loc[4, "s"] == "v4"


@BLOCKS
def test_blank_lines_crlf_and_no_trailing_newline_in_json_lines_read_alike(root: Path, blocksize: str | None) -> None:
    lines = "".join(json.dumps({"id": i, "s": "x"}) + "\r\n" + ("\n\n" if i % 40 == 0 else "") for i in range(300))
    write(root, {"b.jsonl": "\n" + lines.rstrip("\r\n")})
    got = rows_of(agreed(job(root, "b.jsonl", blocksize=blocksize), root))
    assert sorted(got["id"]) == list(range(300)) and set(got["s"]) == {"x"}


def test_an_empty_string_a_null_and_a_missing_key_read_alike(root: Path) -> None:
    write(root, {"e.jsonl": '{"id":1,"s":""}\n{"id":2,"s":null}\n{"id":3}\n{"id":4,"s":"a"}\n'})
    got = rows_of(agreed(job(root, "e.jsonl", [{"op": "assign", "column": "x", "expr": "isnull(s)"}]), root)).sort_values("id")
    assert values(got["s"]) == ["", None, None, "a"] and values(got["x"]) == [False, True, True, False]


@BLOCKS
def test_unicode_in_json_lines_raw_or_escaped_reads_alike(root: Path, blocksize: str | None) -> None:
    raw = "".join(json.dumps({"id": i, "s": f"héllo✓日本🎉{i}"}, ensure_ascii=i % 2 == 0) + "\n" for i in range(300))
    write(root, {"u.jsonl": raw})
    got = rows_of(agreed(job(root, "u.jsonl", [{"op": "assign", "column": "l", "expr": "length(s)"}], blocksize=blocksize), root))
    assert got.set_index("id").loc[2, "s"] == "héllo✓日本🎉2" and got.set_index("id").loc[2, "l"] == 10


def test_a_second_json_file_with_keys_reordered_extra_and_missing_reads_alike(root: Path) -> None:
    write(root, {"d/a.jsonl": jsonl({"id": i, "s": "a", "n": i} for i in range(10)),
                 "d/b.jsonl": jsonl({"z": 1, "n": i, "id": i} for i in range(10, 20))})
    got = rows_of(agreed(job(root, "d", fmt="jsonl"), root)).set_index("id")
    assert got.loc[15, "n"] == 15 and pd.isna(got.loc[15, "s"]) and "z" not in got.columns


@pytest.mark.parametrize("text", ["", "\n\n"], ids=["empty", "blank lines"])
def test_a_json_lines_source_whose_first_file_holds_no_line_is_refused_at_submit(root: Path, text: str) -> None:
    # As an empty first CSV file is: Polars read no columns and wrote a result of none, the Dask engine failed at run time.
    write(root, {"d/a.jsonl": text, "d/b.jsonl": '{"id": 1}\n'})
    with pytest.raises(SpecError, match="no JSON line") as refused:
        plan_spec(job(root, "d", fmt="jsonl"))
    assert refused.value.field == "source.path" and refused.value.code == "unreadable_source"


@pytest.mark.parametrize(("name", "data", "fmt"), [
    ("n.csv.gz", b"id,s\n1,a\n", "csv"), ("n.parquet", b"not parquet at all", "parquet")], ids=["a .gz that is not gzip", "not parquet"])
def test_a_first_file_no_reader_takes_is_unreadable_source_at_submit(root: Path, name: str, data: bytes, fmt: str) -> None:
    # It was invalid_spec, where every other read error is unreadable_source.
    (root / name).write_bytes(data)
    with pytest.raises(SpecError) as refused:
        plan_spec(job(root, name, fmt=fmt))
    assert (refused.value.code, refused.value.field) == ("unreadable_source", "source.path") and name in refused.value.message


def test_an_empty_second_json_file_adds_no_rows(root: Path) -> None:
    write(root, {"d/a.jsonl": '{"id": 1}\n', "d/b.jsonl": ""})
    assert values(rows_of(agreed(job(root, "d", fmt="jsonl"), root))["id"]) == [1]


@BLOCKS
def test_a_gzipped_json_lines_file_reads_alike(root: Path, blocksize: str | None) -> None:
    write(root, {"g.jsonl.gz": jsonl({"id": i, "s": "x"} for i in range(300))})
    assert len(rows_of(agreed(job(root, "g.jsonl.gz", blocksize=blocksize), root))) == 300


def test_json_date_times_with_and_without_offsets_read_alike(root: Path) -> None:
    days = ["2024-01-05T00:00:00+02:00", "2024-01-05T10:30:00", "2024-01-06", "2024-01-05 10:30:00Z"]
    write(root, {"t.jsonl": jsonl({"id": i, "ts": day} for i, day in enumerate(days))})
    got = rows_of(agreed(job(root, "t.jsonl", types={"ts": "datetime64[ns]"}), root)).sort_values("id")
    assert got["ts"].tolist() == [pd.Timestamp(t) for t in ["2024-01-04 22:00", "2024-01-05 10:30", "2024-01-06", "2024-01-05 10:30"]]


def test_json_numbers_and_bools_in_a_declared_text_column_are_their_text(root: Path) -> None:
    write(root, {"s.jsonl": jsonl({"id": i, "s": v} for i, v in enumerate([1.10, 7, True, None, "x", 12345678901234567890]))})
    got = rows_of(agreed(job(root, "s.jsonl", types={"s": "string"}), root)).sort_values("id")
    assert values(got["s"]) == ["1.1", "7", "true", None, "x", "12345678901234567890"]


def test_a_duplicated_json_key_reads_alike(root: Path) -> None:
    write(root, {"d.jsonl": '{"id":1,"s":"a","s":"b"}\n{"id":2,"s":"c"}\n'})
    agreed(job(root, "d.jsonl"), root)


def test_a_json_integer_beyond_int64_in_the_head_fails_or_reads_alike(root: Path) -> None:
    """Python's json makes it an int, so the checker says int64 (a CSV column of it is text) and both engines refuse it."""
    write(root, {"b.jsonl": '{"id":1,"n":99999999999999999999}\n{"id":2,"n":1}\n'})
    agreed(job(root, "b.jsonl"), root)


@pytest.mark.parametrize("line", ['{"id": 1, "s": "x",}', "\ufeff" + '{"id": 1, "s": "x"}', "[1, 2]"],
                         ids=["trailing comma", "bom", "not an object"])
def test_a_malformed_json_line_in_the_head_is_refused_at_submit(root: Path, line: str) -> None:
    write(root, {"m.jsonl": line + "\n" + jsonl({"id": i, "s": "x"} for i in range(5))})
    with pytest.raises(SpecError) as refused:
        plan_spec(job(root, "m.jsonl"))
    assert refused.value.field == "source.path"
    assert ("byte order mark" in refused.value.message) == line.startswith("\ufeff"), refused.value.message


@pytest.mark.parametrize("files", [
    {"d/a.jsonl": jsonl({"id": i, "s": "x"} for i in range(PAST_HEAD)) + '{"id": 1, "s": "x",}\n'},
    {"d/a.jsonl": '{"id": 0, "s": "x"}\n', "d/b.jsonl": "\ufeff" + '{"id": 1, "s": "x"}\n'},
    {"d/a.jsonl": jsonl({"id": i, "s": "x"} for i in range(PAST_HEAD)) + "[1, 2]\n"},
], ids=["trailing comma", "bom in a second file", "not an object"])
def test_a_malformed_json_line_past_the_head_is_refused_alike_naming_the_file(root: Path, files: dict[str, str]) -> None:
    write(root, files)
    why = "byte order mark" if "\ufeff" in list(files.values())[-1] else "cannot be read as JSON lines"
    refused_naming(job(root, "d", fmt="jsonl"), root, list(files)[-1].split("/")[-1], why)


def test_a_json_number_beyond_float64_in_the_head_is_refused_alike_naming_the_file(root: Path) -> None:
    """Python's json reads ``1e400`` as inf (the checker would call it float64); Polars' reader refuses it."""
    write(root, {"f.jsonl": '{"id":1,"f":1.5}\n{"id":2,"f":1e400}\n'})
    refused_naming(job(root, "f.jsonl"), root, "f.jsonl", "InvalidNumber")


# 8. Through the service: refused at submit with the stable error shape, naming the file.


@pytest.mark.parametrize(("files", "named", "why"), [
    ({"dup.csv": "id,a,a\n1,2,3\n"}, "dup.csv", "names column 'a' twice"),
    ({"d/a.csv": "id,s\n1,a\n", "d/b.csv": "s,id\nb,2\n"}, "b.csv", "is not the first file's"),
    ({"m.jsonl": '{"id": 1}\n{"id": 2,}\n'}, "m.jsonl", "cannot be read as JSON lines"),
], ids=["duplicate names", "another header", "malformed json"])
def test_an_unreadable_file_is_a_422_naming_it(service: ServiceProcess, tmp_path: Path, files: dict[str, str], named: str, why: str) -> None:
    write(tmp_path, files)
    path = tmp_path / ("d" if "d/a.csv" in files else next(iter(files)))
    spec = {"source": {"format": "jsonl" if named.endswith(".jsonl") else "csv", "path": str(path)}, "sink": {"path": str(tmp_path / "out")}}
    error = error_of(post(service, json=spec), 422)
    assert error["code"] == "unreadable_source" and error["field"] == "source.path"
    assert named in error["message"] and why in error["message"], error
