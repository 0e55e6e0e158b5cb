"""``POST /specs:parse``: YAML or JSON text read as the CLI reads spec files, with each field's line."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from spillway.service.client import read_spec_file
from spillway.service.launcher import ServiceProcess
from spillway.service.spec_text import MAX_NODES, SpecTextError, parse_spec_text

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
name: preview
source: {format: parquet, path: SALES}
steps:
  - op: filter
    expr: "amount > 0"
  - op: assign
    column: margin
    expr: "amount - no_such_column"
sink:
  path: OUT
"""


def test_lines_of_fields_as_errors_name_them() -> None:
    parsed = parse_spec_text(SPEC)
    assert parsed.data["steps"][1] == {"op": "assign", "column": "margin", "expr": "amount - no_such_column"}
    lines = parsed.lines
    assert (lines["name"], lines["source.path"], lines["steps[0]"], lines["steps[0].expr"], lines["steps[1].expr"], lines["sink.path"]) == (1, 2, 4, 5, 8, 10)


def test_read_as_the_cli_reads_files() -> None:
    """YAML 1.2: a join's `on:` is a key, not True; every example file gives what the CLI reads."""
    assert parse_spec_text("steps:\n  - {op: join, right: p, on: [k]}\n").data == {"steps": [{"op": "join", "right": "p", "on": ["k"]}]}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        assert parse_spec_text(path.read_text()).data == read_spec_file(path), path


@pytest.mark.parametrize(
    ("text", "json_syntax", "message"),
    [
        ("name: x\nsteps: [1,\n", False, "line 3, column 1: not valid YAML"),
        ("- a\n- b\n", False, "must hold a mapping"),
        ('{"name": "x",,}', True, "line 1, column 14: not valid JSON"),
        ("a: &a [*a]\n", False, "line 1: a YAML alias refers to a node that contains it"),
        ("x: " + "[" * 70 + "]" * 70 + "\n", False, "nests deeper than 64"),
        ("[" * 200_000, False, "nests deeper than 64"),  # PyYAML's composer recurses: no RecursionError escapes
        ("[" * 200_000, True, "nests deeper than 64"),
        # What the JSON answer cannot carry is refused with its line, not a 500 when it is written.
        ("name: x\nsink:\n  rows: .nan\n", False, "line 3: nan at sink.rows has no JSON form"),
        ('{\n"a": Infinity}', True, "line 2: inf at a has no JSON form"),
        ('{"a": "\\ud800"}', True, "line 1: text at a holds a lone surrogate"),
        ("name: x\n1: y\n", False, "line 2: the key 1 is not text: quote it"),
        ("blob: !!binary aGVsbG8=\n", False, "line 1: a bytes value at blob has no JSON form"),
        ("a: !!python/object:os.system x\n", False, "line 1, column 4: not valid YAML"),  # a safe loader: no such tag
        ("a: 1\x00\n", False, "not valid YAML: unacceptable character #x0000"),
        ('{"a": "\x00"}', True, "line 1, column 8: not valid JSON: Invalid control character"),
    ],
)
def test_bad_text_is_an_error_with_its_line(text: str, json_syntax: bool, message: str) -> None:
    with pytest.raises(SpecTextError) as caught:
        parse_spec_text(text, json_syntax=json_syntax)
    assert caught.value.code == "invalid_document" and message in caught.value.message, caught.value.message


def test_an_unquoted_date_is_its_text() -> None:
    assert parse_spec_text("params: {day: 2026-01-02}\n").data == {"params": {"day": "2026-01-02"}}


def test_aliases_cannot_blow_up_the_answer() -> None:
    """"Billion laughs": 9 levels of 10 aliases each would be 10⁹ values once written as JSON."""
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(SpecTextError, match=f"more than {MAX_NODES:,} values"):
        parse_spec_text("\n".join(levels))


def test_through_the_service_then_validate_names_the_line(service: ServiceProcess, sample_data: dict[str, Path], tmp_path: Path) -> None:
    text = SPEC.replace("SALES", str(sample_data["sales"] / "*.parquet")).replace("OUT", str(tmp_path / "out"))
    parsed = httpx.post(f"{service.url}/specs:parse", content=text, headers={"Content-Type": "application/yaml"})
    assert parsed.status_code == 200, parsed.text
    body = parsed.json()
    assert body["spec"]["name"] == "preview" and body["lines"]["steps[1].expr"] == 8
    # The page validates what it got back: the API's own 422, whose field the line map places.
    refused = httpx.post(f"{service.url}/jobs:validate", json=body["spec"])
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "unknown_column" and error["field"] == "steps[1].expr"
    assert body["lines"][error["field"]] == 8

    as_json = httpx.post(f"{service.url}/specs:parse", content='{\n  "name": "j",\n  "sink": {"path": "x"}\n}', headers={"Content-Type": "application/json"})
    assert as_json.json() == {"spec": {"name": "j", "sink": {"path": "x"}}, "lines": {"name": 2, "sink": 3, "sink.path": 3}}

    broken = httpx.post(f"{service.url}/specs:parse", content="name: x\nsteps: [1,\n", headers={"Content-Type": "text/yaml"})
    assert broken.status_code == 422 and broken.json()["error"]["code"] == "invalid_document"
    assert broken.json()["error"]["message"].startswith("line 3, column 1:")
    wrong_type = httpx.post(f"{service.url}/specs:parse", content="name: x", headers={"Content-Type": "application/xml"})
    assert wrong_type.status_code == 415 and "application/yaml" in wrong_type.json()["error"]["message"]
    not_utf8 = httpx.post(f"{service.url}/specs:parse", content=b"name: \xff", headers={"Content-Type": "application/yaml"})
    assert not_utf8.status_code == 422 and "not UTF-8" in not_utf8.json()["error"]["message"]
