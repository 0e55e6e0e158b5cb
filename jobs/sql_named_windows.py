"""Named windows (``WINDOW w AS (…)``, ``OVER w``, ``OVER (w ORDER BY …)``) written out in each ``OVER``.

SQL's named windows are shorthand: each use stands for the definition it names, refined by what
the use adds. Written out once, right after parsing (jobs.sql_check), every later stage sees
plain windows. The rules are PostgreSQL's: a window naming another takes its ``PARTITION BY``
and may not give its own; it may add an ``ORDER BY`` only where the named one has none; a name
is defined in the WINDOW clause of its own SELECT, by an earlier entry of that clause for
another definition.
"""

from __future__ import annotations

from sqlglot import exp

_PARTS = ("partition_by", "order", "spec")


class NamedWindowError(ValueError):
    """A window naming one it may not: ``part`` is what is refused, ``why`` why, at ``node``."""

    def __init__(self, node: exp.Expression, part: str, why: str) -> None:
        super().__init__(part + why)
        self.node, self.part, self.why = node, part, why


def inline_named_windows(tree: exp.Query) -> None:
    """Every window of ``tree`` that names one, written out; every WINDOW clause then dropped (in place).

    Raises
    ------
    NamedWindowError
        A name that is not defined, or a window that names one and gives what it may not.
    """
    for select in list(tree.find_all(exp.Select)):
        named: dict[str, dict[str, object]] = {}
        for definition in select.args.get("windows") or []:
            named[definition.this.name] = _refined(definition, named)
        uses = [node for node in select.walk(prune=lambda node: node is not select and isinstance(node, exp.Query))
                if isinstance(node, exp.Window) and node.args.get("alias") is not None and not isinstance(node.this, exp.Identifier)]
        for use in uses:
            for part, value in _refined(use, named).items():
                use.set(part, value.copy() if isinstance(value, exp.Expression) else [v.copy() for v in value] if value else None)
            use.set("alias", None)
        select.set("windows", None)


def _refined(window: exp.Window, named: dict[str, dict[str, object]]) -> dict[str, object]:
    """The parts of ``window``: its own, over those of the window it names (if any)."""
    own = {part: window.args.get(part) for part in _PARTS}
    alias = window.args.get("alias")
    if alias is None:
        return own
    name = alias.name
    if name not in named:
        defined = f" (defined: {', '.join(sorted(named))})" if named else ""
        raise NamedWindowError(window, f"window '{name}' is not defined", f": a name comes from the WINDOW clause of its own SELECT{defined}")
    base = named[name]
    if own["partition_by"]:
        raise NamedWindowError(window, f"a window naming '{name}' gives a PARTITION BY", ": it takes the one of the window it names")
    if own["order"] and base["order"]:
        raise NamedWindowError(window, f"a window naming '{name}' gives an ORDER BY", f": '{name}' has one already")
    return {part: own[part] or base[part] for part in _PARTS}

