"""A spec's text (YAML 1.2 or JSON) as the mapping it holds, with the line each field is on.

For ``POST /specs:parse``: the web page has no YAML parser, so it sends what the user typed
here and gets back JSON to validate or submit, read exactly as the CLI reads a spec file
(:mod:`service.documents`: YAML 1.2 booleans, so a join's ``on:`` stays a key). The line map
lets the page put an error's ``field`` (``steps[2].expr``) beside the line that holds it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from jobs.errors import SpecError
from service.documents import _Loader as SpecLoader  # the CLI's one YAML 1.2 reading

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
    loader = SpecLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            if not json_syntax:
                raise SpecTextError(_yaml_message(exc)) from exc
            node = None  # valid JSON that PyYAML cannot read (rare): no line numbers
        except yaml.YAMLError as exc:
            raise SpecTextError(f"not valid YAML: {exc}") from exc
        lines: dict[str, int] = {}
        if node is not None:
            _walk(node, "", lines, depth=0, budget=[MAX_NODES], open_nodes=set())
        if json_syntax:
            data = _json(text)
        else:
            data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecTextError(f"the text must hold a mapping (name, source, steps, sink), not {type(data).__name__}")
    return ParsedText(data=data, lines=lines)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecTextError(f"line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}") from exc


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
