"""Reading spec and pipeline files (YAML or JSON) for the CLI, with errors that name the file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml


class DocumentError(Exception):
    """A file that cannot be read, or is not a YAML/JSON mapping."""


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. In YAML 1.1 a join's `on:` key would read as True."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The mapping a ``.json`` or YAML file holds.

    Raises
    ------
    DocumentError
        Naming the file and what is wrong; ``what`` names the expected keys.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DocumentError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}); "
                            "save it as UTF-8") from exc
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        data = json.loads(text) if kind == "JSON" else yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DocumentError(f"{path} is not valid {kind}: {exc}") from exc
    if not isinstance(data, dict):
        raise DocumentError(f"{path} must hold a mapping ({what}), not {type(data).__name__}")
    return data
