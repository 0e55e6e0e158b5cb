"""``LIKE`` with a literal pattern as the string functions cudf-polars runs on the GPU.

Polars' SQL turns every ``LIKE`` into the regex ``^(?s)…$``, whose ``(?s)`` flag cudf-polars does
not take, so a TPC-H query with a ``LIKE`` would not run on the GPU at all. A pattern of
literal text and ``%`` says the same as: ``=`` (no ``%``), ``starts_with`` (``abc%``),
``ends_with`` (``%abc``), or a regex of the text's parts joined by ``[\\s\\S]*`` (any characters,
newlines too, as ``%`` matches), anchored where the pattern has no ``%`` at that end. All are
null for a null string, as ``LIKE`` is. Patterns with ``_`` or a backslash stay ``LIKE``.
"""

from __future__ import annotations

from sqlglot import exp

_REGEX_SPECIAL = frozenset("\\.^$|?*+()[]{}")
_ANY = r"[\s\S]*"


def _escaped(text: str) -> str:
    return "".join(f"\\{ch}" if ch in _REGEX_SPECIAL else ch for ch in text)


def _rewritten(subject: exp.Expression, pattern: str) -> exp.Expression | None:
    if "_" in pattern or "\\" in pattern:
        return None
    parts = pattern.split("%")
    if len(parts) == 1:
        return exp.EQ(this=subject, expression=exp.Literal.string(pattern))
    if len(parts) == 2 and parts[1] == "" and parts[0]:
        return exp.StartsWith(this=subject, expression=exp.Literal.string(parts[0]))
    if len(parts) == 2 and parts[0] == "" and parts[1]:
        return exp.EndsWith(this=subject, expression=exp.Literal.string(parts[1]))
    regex = _ANY.join(_escaped(part) for part in parts)
    regex = ("" if pattern.startswith("%") else "^") + regex.removeprefix(_ANY).removesuffix(_ANY) + ("" if pattern.endswith("%") else "$")
    return exp.RegexpLike(this=subject, expression=exp.Literal.string(regex))


def like_as_string_functions(tree: exp.Expression) -> None:
    """Rewrite each ``x LIKE 'literal pattern'`` of ``tree`` in place (``NOT LIKE`` is ``NOT`` of it)."""
    for like in list(tree.find_all(exp.Like)):
        pattern = like.expression
        if isinstance(pattern, exp.Literal) and pattern.is_string:
            replacement = _rewritten(like.this.copy(), pattern.this)
            if replacement is not None:
                negated = bool(like.args.get("negate"))  # NOT LIKE is one node with negate set
                like.replace(exp.Not(this=exp.Paren(this=replacement)) if negated else exp.Paren(this=replacement))
