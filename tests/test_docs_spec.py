"""docs/spec.md is tested: every YAML block in it is a job that runs on the doc's own sample
data and must give the output table (or the error body) printed under it.

The sample tables are read from the doc too, so the data a reader sees is the data the
examples run on. Examples run through the pipeline on dask's synchronous scheduler, a few
through the live service (sink included), and every error example against the live service.
"""

from __future__ import annotations

import ast
import json
import math
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import dask
import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from spillway.jobs import expr as expr_module
from spillway.jobs.decimal_cast import decimal_casts
from spillway.jobs.errors import SpecError
from spillway.jobs.pipeline import backend_config, build_frame
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import STEP_OPS, AggFunc, JobSpec, JoinStep, SourceSpec
from spillway.jobs.status import JobStatus
from spillway.jobs.validate import plan_spec
from spillway.service.client import SpillwayClient
from spillway.service.documents import _Loader as SpecLoader  # the CLI's YAML: `on:` is a key, not True
from tests.conftest import ROOT, ServiceProcess, wait_terminal

DOC = ROOT / "docs" / "spec.md"
NULL = "null"
DECIMALS = 4  # floats in the doc's tables are rounded to this many places
# Examples also run through the live service and read back from their sink.
HTTP_EXAMPLES = ["join_named_sources", "derived_scalar", "sort_then_limit", "top_k_per_status", "sink_partitioned"]
# Steps that keep the order a sort (or top_k) made; any other step reorders rows.
_KEEP_ORDER = {"filter", "select", "assign", "rename", "limit"}


# Reading the doc


@dataclass(frozen=True)
class Table:
    """A markdown table: header, and rows of cell text."""

    columns: list[str]
    rows: list[list[str]]
    line: int


@dataclass(frozen=True)
class Example:
    """A YAML job from the doc and what it must produce: an output table or an error body."""

    spec: dict[str, Any]
    line: int
    output: Table | None
    error: dict[str, Any] | None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def ordered(self) -> bool:
        """Whether the rows come in a defined order: a sort or top_k not followed by a reordering step."""
        ordered = False
        for step in self.spec.get("steps", []):
            if step["op"] in ("sort", "top_k"):
                ordered = True
            elif step["op"] not in _KEEP_ORDER:
                ordered = False
        return ordered


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table(lines: list[str], start: int) -> tuple[Table, int]:
    """The table starting at ``lines[start]`` and the index after it."""
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    header, separator, *body = lines[start:end]
    assert set(separator.replace("|", "").replace(" ", "")) <= set("-:"), f"docs/spec.md:{start + 2}: not a table separator"
    columns = [c.strip("`") for c in _cells(header)]
    rows = [_cells(row) for row in body]
    for offset, row in enumerate(rows):
        assert len(row) == len(columns), f"docs/spec.md:{start + 3 + offset}: {len(row)} cells for {len(columns)} columns"
    return Table(columns, rows, start + 1), end


def _fence(lines: list[str], start: int) -> tuple[str, str, int]:
    """(info string, body, index after the closing fence) of the block opening at ``start``."""
    info = lines[start].strip()[3:].strip()
    end = start + 1
    while not lines[end].startswith("```"):
        end += 1
    return info, "\n".join(lines[start + 1 : end]), end + 1


def read_doc(text: str) -> tuple[dict[str, Table], list[Example]]:
    """The sample tables (``**name**`` then a table, under "## Sample data") and the examples.

    An example is a ```yaml block; its expected result is the first table or ```json block
    after it, before any other code block or heading.
    """
    lines = text.splitlines()
    samples: dict[str, Table] = {}
    examples: list[Example] = []
    section = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if section == "Sample data" and (named := re.match(r"^\*\*(\w+)\*\*", line)):
            i += 1
            while not lines[i].startswith("|"):
                i += 1
            samples[named.group(1)], i = _table(lines, i)
            continue
        if line.startswith("```yaml"):
            _, body, i = _fence(lines, i)
            spec_line = i
            output: Table | None = None
            error: dict[str, Any] | None = None
            while i < len(lines) and not lines[i].startswith("#"):
                if lines[i].startswith("|"):
                    output, i = _table(lines, i)
                    break
                if lines[i].startswith("```json"):
                    _, error_text, i = _fence(lines, i)
                    error = json.loads(error_text)
                    break
                if lines[i].startswith("```"):
                    break  # no result: test_every_example_has_a_result names the line
                i += 1
            examples.append(Example(yaml.load(body, Loader=SpecLoader), spec_line, output, error))  # noqa: S506 - a SafeLoader
            continue
        if line.startswith("```"):
            _, _, i = _fence(lines, i)
            continue
        i += 1
    return samples, examples


SAMPLES, EXAMPLES = read_doc(DOC.read_text())
RUNS = [e for e in EXAMPLES if e.output is not None]
ERRORS = [e for e in EXAMPLES if e.error is not None]


# The sample data, written from the doc's tables


_TYPES: dict[str, pa.DataType] = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "date": pa.date32(),
    "decimal(10,2)": pa.decimal128(10, 2),
}


def _value(text: str, kind: str) -> Any:
    if text == NULL:
        return None
    if kind == "int64":
        return int(text)
    if kind == "float64":
        return float(text)
    if kind == "bool":
        return {"true": True, "false": False}[text]
    if kind == "date":
        return date.fromisoformat(text)
    if kind.startswith("decimal"):
        return Decimal(text)
    return text


def sample_table(name: str) -> pa.Table:
    """A sample table; its first row holds the column types, in italics (``*int64*``)."""
    table = SAMPLES[name]
    kinds = [cell.strip("*") for cell in table.rows[0]]
    columns = {
        column: pa.array([_value(row[index], kind) for row in table.rows[1:]], _TYPES[kind])
        for index, (column, kind) in enumerate(zip(table.columns, kinds, strict=True))
    }
    return pa.table(columns)


def write_sample_data(root: Path) -> Path:
    """The files the doc's "Sample data" section lists, under ``root/data``."""
    data = root / "data"
    data.mkdir(parents=True)
    tables = {name: sample_table(name) for name in SAMPLES}
    for name, table in tables.items():
        pq.write_table(table, data / f"{name}.parquet")
    customers = tables["customers"].to_pandas()
    customers.to_csv(data / "customers.csv", index=False, na_rep="")
    with open(data / "customers.jsonl", "w") as out:
        for record in customers.astype(object).where(customers.notna(), None).to_dict("records"):
            out.write(json.dumps(record, default=str) + "\n")
    orders = tables["orders"]
    months = pd.Series(orders["order_date"].to_pandas()).map(lambda d: d.strftime("%Y-%m"))
    (data / "orders_by_month").mkdir()
    for month in sorted(months.unique()):
        pq.write_table(orders.filter(pa.array(months == month)), data / "orders_by_month" / f"{month}.parquet")
    pq.write_to_dataset(orders, data / "orders_by_status", partition_cols=["status"])
    return data


@pytest.fixture(scope="module")
def docs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs_spec")
    write_sample_data(root)
    return root


# Comparing a result with the doc's table


def _is_null(value: Any) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def show(value: Any) -> str:
    """A value as the doc's tables print it."""
    if _is_null(value):
        return NULL
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(round(float(value), DECIMALS))
    if isinstance(value, (datetime, pd.Timestamp)):
        stamp = pd.Timestamp(value)
        return stamp.strftime("%Y-%m-%d") if stamp == stamp.normalize() else stamp.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def cell_matches(expected: str, actual: Any) -> bool:
    """Numbers match to DECIMALS places (2 and 2.0 alike); everything else as printed."""
    if isinstance(actual, (int, float, np.integer, np.floating)) and not isinstance(actual, (bool, np.bool_)) and not _is_null(actual):
        try:
            return math.isclose(round(float(actual), DECIMALS), float(expected), rel_tol=1e-12, abs_tol=1e-12)
        except ValueError:
            return False
    return show(actual) == expected


def markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a doc table, to paste when an example's output changes on purpose."""
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + " --- |" * len(frame.columns)]
    lines += ["| " + " | ".join(show(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def assert_output(example: Example, frame: pd.DataFrame) -> None:
    expected = example.output
    assert expected is not None
    got = markdown(frame)
    where = f"docs/spec.md:{expected.line} ({example.name}) differs from the real output:\n{got}\n"
    assert list(frame.columns) == expected.columns, where + f"columns {list(frame.columns)} != {expected.columns}"
    actual = [list(row) for row in frame.itertuples(index=False)]
    assert len(actual) == len(expected.rows), where + f"{len(actual)} rows, the doc shows {len(expected.rows)}"

    def same(want: list[str], have: list[Any]) -> bool:
        return all(cell_matches(w, h) for w, h in zip(want, have, strict=True))

    if example.ordered:
        for index, (want, have) in enumerate(zip(expected.rows, actual, strict=True)):
            assert same(want, have), where + f"row {index + 1}: the doc shows {want}, got {[show(v) for v in have]}"
        return
    unmatched = list(actual)
    for want in expected.rows:  # as multisets: without a sort the order of rows is not defined
        found = next((have for have in unmatched if same(want, have)), None)
        assert found is not None, where + f"no output row matches {want}"
        unmatched.remove(found)


# Running an example


def run_pipeline(spec: dict[str, Any], engine: str = "dask") -> pd.DataFrame:
    """Validate as the service does before accepting a job, then run it in-process on ``engine``.

    A job with a SQL source, a cast to a decimal or a source keeping its decimals exact runs on
    Polars only: on ``dask`` the Dask lowering must refuse it, saying why.
    """
    job = JobSpec.model_validate(spec)
    plan = plan_spec(job)
    if engine == "dask" and job.sql_sources():
        with pytest.raises(SpecError, match="only the Polars engine runs"):
            build_frame(job, plan)
        engine = "polars"
    if engine == "dask" and decimal_casts(plan.expressions):
        with pytest.raises(SpecError, match="runs only on the Polars engine"):
            build_frame(job, plan)
        engine = "polars"
    if engine == "dask" and job.exact_decimal_sources():
        with pytest.raises(SpecError, match="exact decimals run only on the Polars engine"):
            build_frame(job, plan)
        engine = "polars"
    if engine == "polars":  # the plan the CPU engine runs (filters before the read casts)
        return build_lazyframe(plan, filters_before_casts=True).collect().to_pandas()
    with backend_config("pandas"), dask.config.set(scheduler="sync"):
        return build_frame(job, plan).compute().reset_index(drop=True)


def absolute(spec: dict[str, Any], root: Path, out: Path) -> dict[str, Any]:
    """``spec`` with its source paths under ``root`` and its sink at ``out``: the service runs elsewhere."""
    spec = json.loads(json.dumps(spec))

    def fix(source: Any) -> None:
        if isinstance(source, dict):
            source["path"] = str(root / source["path"])

    fix(spec.get("source"))
    for source in spec.get("sources", {}).values():
        if "from" not in source and "sql" not in source:
            fix(source)
    for steps in _step_lists(spec):
        for step in steps:
            if step["op"] == "join":
                fix(step["right"])
    spec["sink"]["path"] = str(out)
    return spec


def read_sink(path: Path, columns: list[str]) -> pd.DataFrame:
    """A committed sink's rows in file order; hive partition columns come back as plain columns."""
    frame = pq.read_table(path, partitioning="hive").to_pandas()
    for column in frame.columns:
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype(str)
    return frame[columns] if set(columns) == set(frame.columns) else frame


def _id(example: Example) -> str:
    return example.name


@pytest.mark.parametrize("example", RUNS, ids=_id)
def test_example_gives_the_output_the_doc_shows(example: Example, engine: str, docs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(docs_root)  # the examples' paths are relative: data/..., out/...
    assert_output(example, run_pipeline(example.spec, engine))


@pytest.mark.parametrize("name", HTTP_EXAMPLES)
def test_example_through_the_service(name: str, api: SpillwayClient, docs_root: Path, tmp_path: Path) -> None:
    example = next(e for e in RUNS if e.name == name)
    assert example.output is not None
    out = tmp_path / "out"
    job = wait_terminal(api, api.submit(absolute(example.spec, docs_root, out)).id)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.result is not None and job.result.total_rows == len(example.output.rows)
    assert (out / "_SUCCESS").exists()
    for column in example.spec["sink"].get("partition_on", []):
        assert any(p.name.startswith(f"{column}=") for p in out.iterdir()), f"no {column}=… directory in {out}"
    assert_output(example, read_sink(out, example.output.columns))


@pytest.mark.parametrize("example", ERRORS, ids=_id)
def test_error_example_gets_the_body_the_doc_shows(example: Example, service: ServiceProcess, docs_root: Path, tmp_path: Path) -> None:
    spec = absolute(example.spec, docs_root, tmp_path / "out")
    with httpx.Client(base_url=service.url, timeout=30) as http:
        response = http.post("/jobs", json=spec)
    body = response.json()
    if "message" in body.get("error", {}):
        body["error"]["message"] = body["error"]["message"].replace(f"{docs_root}/", "")
    assert (response.status_code, body) == (422, example.error), f"docs/spec.md:{example.line} ({example.name})"


# The doc keeps up with the language


def _step_lists(spec: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """The job's steps and each derived source's."""
    yield spec.get("steps", [])
    yield from (source["steps"] for source in spec.get("sources", {}).values() if "from" in source)


def _expressions(spec: dict[str, Any]) -> Iterator[str]:
    for step in (step for steps in _step_lists(spec) for step in steps):
        if step["op"] in ("filter", "assign"):
            yield step["expr"]
        for agg in step.get("aggs", {}).values() if step["op"] == "groupby" else ():
            if "expr" in agg:
                yield agg["expr"]


def _sources(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every source of files: inline, named, and inline in joins."""
    yield from (s for s in [spec.get("source")] if isinstance(s, dict))
    yield from (s for s in spec.get("sources", {}).values() if "from" not in s and "sql" not in s)
    for steps in _step_lists(spec):
        yield from (step["right"] for step in steps if step["op"] == "join" and isinstance(step["right"], dict))


def _used() -> dict[str, set[str]]:
    """What the examples with an output table use: step ops, functions, operators, ..."""
    kinds = ("ops", "functions", "syntax", "aggs", "hows", "formats", "source options", "named sources")
    used: dict[str, set[str]] = {key: set() for key in kinds}
    for example in RUNS:
        steps = [step for steps in _step_lists(example.spec) for step in steps]
        used["named sources"] |= {"derived" if "from" in s else "sql" if "sql" in s else "files" for s in example.spec.get("sources", {}).values()}
        used["ops"] |= {step["op"] for step in steps}
        used["aggs"] |= {agg["func"] for step in steps if step["op"] == "groupby" for agg in step["aggs"].values()}
        used["hows"] |= {step.get("how", "inner") for step in steps if step["op"] == "join"}
        for source in _sources(example.spec):
            used["formats"].add(source["format"])
            used["source options"] |= set(source)
        for text in _expressions(example.spec):
            for node in ast.walk(ast.parse(text.strip(), mode="eval")):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    used["functions"].add(node.func.id)
                for part in (node, getattr(node, "op", None), *getattr(node, "ops", ())):
                    if isinstance(part, (ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.IfExp)):
                        used["syntax"].add(type(part).__name__)
    return used


def test_examples_cover_the_whole_language() -> None:
    syntax = {t.__name__ for t in (*expr_module._BINOPS, *expr_module._UNARY, *expr_module._COMPARE)}
    syntax |= {"In", "NotIn", "And", "Or", "Not", "IfExp"}
    wanted = {
        "ops": set(STEP_OPS),
        "functions": set(expr_module._FUNCS),
        "syntax": syntax,
        "aggs": set(typing.get_args(AggFunc)),
        "hows": set(typing.get_args(JoinStep.model_fields["how"].annotation)),
        "formats": set(typing.get_args(SourceSpec.model_fields["format"].annotation)),
        "source options": set(SourceSpec.model_fields),
        "named sources": {"files", "derived", "sql"},
    }
    used = _used()
    missing = {kind: sorted(names - used[kind]) for kind, names in wanted.items() if names - used[kind]}
    assert not missing, f"docs/spec.md has no tested example using: {missing}"


def test_every_example_has_a_result_and_a_unique_name() -> None:
    assert len(RUNS) >= 30 and len(ERRORS) >= 3
    names = [e.name for e in EXAMPLES]
    assert len(names) == len(set(names)), "example names must be unique: tests are named after them"
    assert not [e.line for e in EXAMPLES if e.output is None and e.error is None], "a YAML block without an output"
    assert set(HTTP_EXAMPLES) <= set(names)


def test_the_checks_can_fail(docs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong value, a missing row or a swapped order in the doc fails its example."""
    monkeypatch.chdir(docs_root)
    example = next(e for e in RUNS if e.name == "sort_then_limit")
    frame = run_pipeline(example.spec)
    assert example.output is not None and example.ordered
    rows = example.output.rows
    first = [rows[0][0], str(float(rows[0][1]) + 0.01), *rows[0][2:]]
    broken = [
        [first, *rows[1:]],
        rows[:-1],
        [rows[1], rows[0], *rows[2:]],
    ]
    for wrong in broken:
        bad = Example(example.spec, example.line, Table(example.output.columns, wrong, example.output.line), None)
        with pytest.raises(AssertionError):
            assert_output(bad, frame)
    assert not cell_matches("45.5", 45.54) and cell_matches("2", 2.0) and cell_matches("33.3333", 100 / 3)
    assert not cell_matches("null", 0.0) and not cell_matches("0", float("nan")) and cell_matches("2024-01-05", pd.Timestamp("2024-01-05"))
