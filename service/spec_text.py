"""A spec's text (YAML 1.2 or JSON) as the mapping it holds, with the line each field is on.

For ``POST /specs:parse``: the web page has no YAML parser, so it sends what the user typed
here and gets back JSON to validate or submit, read exactly as the CLI reads a spec file
(:mod:`service.documents`: YAML 1.2 booleans, so a join's ``on:`` stays a key). The line map
lets the page put an error's ``field`` (``steps[2].expr``) beside the line that holds it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

import yaml

from spillway.jobs.errors import SpecError
from spillway.service.documents import _Loader as SpecLoader  # the CLI's one YAML 1.2 reading

#: Nodes a document may expand to. YAML aliases let a few hundred bytes stand for billions of
#: values ("billion laughs"); counting each alias's node every time it is used bounds that.
MAX_NODES = 50_000
#: Nesting depth; a spec is a handful of levels deep.
MAX_DEPTH = 64


class SpecTextError(SpecError):
    """The text is not YAML or JSON, or does not hold a mapping; the message starts ``line N, column M:`` when known."""

    code = "invalid_document"


@dataclass(frozen=True)
class ParsedText:
    """The mapping the text holds, and the 1-based line of each field path in it."""

    data: dict[str, Any]
    lines: dict[str, int]


def parse_spec_text(text: str, *, json_syntax: bool = False) -> ParsedText:
    """Read ``text`` as the CLI reads a ``.json`` (``json_syntax``) or YAML spec file.

    Raises
    ------
    SpecTextError
        Naming the line and column of a syntax error, or saying what the text holds instead of a mapping.
    """
    lines: dict[str, int] = {}
    try:
        data = _read_yaml(text, lines)
    except yaml.YAMLError as exc:  # syntax, a control character, an unknown or bad tag (!!python/..., !!binary)
        if not json_syntax:
            message = _yaml_message(exc) if isinstance(exc, yaml.MarkedYAMLError) else f"not valid YAML: {exc}"
            raise SpecTextError(message) from exc
        lines.clear()  # JSON that PyYAML cannot read (a tab, a control character): no line numbers
        data = None
    except RecursionError as exc:  # PyYAML composes recursively: a 1 MiB body of "[" gets this far
        raise SpecTextError(f"the document nests deeper than {MAX_DEPTH} levels") from exc
    if json_syntax:
        data = _json(text)  # the values as json.loads reads them, as the CLI reads a .json file
    if not isinstance(data, dict):
        raise SpecTextError(f"the text must hold a mapping (name, source, steps, sink), not {type(data).__name__}")
    return ParsedText(data=_as_json(data, "", lines), lines=lines)


def _read_yaml(text: str, lines: dict[str, int]) -> Any:
    """The document's value; ``lines`` gets each field's line, and aliases are counted before anything is built."""
    loader = SpecLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _walk(node, "", lines, depth=0, budget=[MAX_NODES], open_nodes=set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _as_json(value: Any, path: str, lines: dict[str, int]) -> Any:
    """``value`` as JSON carries it, or a :class:`SpecTextError` naming the line of what it cannot carry.

    YAML has keys that are not text (``1:``, ``null:``), dates, binary, NaN and infinities; JSON
    escapes may hold lone surrogates. A spec has none of these where it means anything (the
    CLI's JobSpec check refuses them there too), so they are refused here rather than turned into
    something else, or into a 500 when the answer is written.
    """
    where = f"line {lines[path]}: " if path in lines else ""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str):
                line = f"line {lines[child]}: " if child in lines else where
                raise SpecTextError(f"{line}the key {key!r} is not text: quote it")
            out[_text(key, child, lines)] = _as_json(item, child, lines)
        return out
    if isinstance(value, list):
        return [_as_json(item, f"{path}[{i}]", lines) for i, item in enumerate(value)]
    if isinstance(value, str):
        return _text(value, path, lines)
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecTextError(f"{where}{value!r} at {path or 'the top'} has no JSON form: write it as text or leave it out")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dt.date):  # an unquoted 2026-01-01 in YAML: as text, as JSON would have it
        return value.isoformat()
    raise SpecTextError(f"{where}a {type(value).__name__} value at {path or 'the top'} has no JSON form")


def _text(value: str, path: str, lines: dict[str, int]) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = f"line {lines[path]}: " if path in lines else ""
        raise SpecTextError(f"{where}text at {path or 'the top'} holds a lone surrogate (\\u{ord(value[exc.start]):04x})") from exc
    return value


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecTextError(f"line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}") from exc
    except RecursionError as exc:
        raise SpecTextError(f"the document nests deeper than {MAX_DEPTH} levels") from exc


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(part for part in (exc.context, exc.problem) if part)
    return f"{where}not valid YAML: {what or exc}"


def _walk(node: yaml.Node, path: str, lines: dict[str, int], *, depth: int, budget: list[int], open_nodes: set[int]) -> None:
    """Record the line of every field under ``node`` (paths as errors name them: ``steps[2].aggs.revenue``)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise SpecTextError(f"the document expands to more than {MAX_NODES:,} values (YAML aliases?)")
    if depth > MAX_DEPTH:
        raise SpecTextError(f"the document nests deeper than {MAX_DEPTH} levels")
    if id(node) in open_nodes:
        raise SpecTextError(f"line {node.start_mark.line + 1}: a YAML alias refers to a node that contains it")
    if path:
        lines.setdefault(path, node.start_mark.line + 1)
    open_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            child = f"{path}.{name}" if path else name
            lines.setdefault(child, key.start_mark.line + 1)  # the key's line, where the user looks
            _walk(value, child, lines, depth=depth + 1, budget=budget, open_nodes=open_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, f"{path}[{i}]", lines, depth=depth + 1, budget=budget, open_nodes=open_nodes)
    open_nodes.discard(id(node))
