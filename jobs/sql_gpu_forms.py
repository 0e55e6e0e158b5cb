"""Forms of ``LIKE`` and ``IN (...)`` that cudf-polars runs on the GPU, with SQL's meaning kept.

**LIKE.** Polars' SQL turns every ``LIKE`` into the regex ``^(?s)…$``, whose ``(?s)`` flag cudf-polars does
not take, so a TPC-H query with a ``LIKE`` would not run on the GPU at all. A pattern of
literal text and ``%`` says the same as: ``=`` (no ``%``), ``starts_with`` (``abc%``),
``ends_with`` (``%abc``), or a regex of the text's parts joined by ``[\\s\\S]*`` (any characters,
newlines too, as ``%`` matches), anchored where the pattern has no ``%`` at that end. All are
null for a null string, as ``LIKE`` is. Patterns with ``_`` or a backslash stay ``LIKE``.

**IN.** ``x IN ('MAIL', 'SHIP')`` becomes a list literal that cudf-polars 26.10 accepts when it
translates the query and then fails on while running it (``TypeError: Series cannot be
converted to pylibcudf.Scalar``: TPC-H Q12 and Q19 on an H200). Up to ``MAX_IN_AS_OR`` values it
is written ``(x = 'MAIL' OR x = 'SHIP')``, which is the same in SQL, nulls included: a null ``x``
gives null either way, and a null in the list makes a miss null either way.
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


#: The longest ``IN`` list written as ``OR`` of equalities; longer ones stay ``IN``.
MAX_IN_AS_OR = 32


def in_list_as_equalities(tree: exp.Expression) -> None:
    """Rewrite each ``x [NOT] IN (literal, ...)`` of at most MAX_IN_AS_OR values in place."""
    for node in list(tree.find_all(exp.In)):
        values = node.expressions
        if node.args.get("query") or not values or len(values) > MAX_IN_AS_OR:
            continue
        if not all(isinstance(value, (exp.Literal, exp.Null, exp.Boolean)) for value in values):
            continue
        either = exp.or_(*(exp.EQ(this=node.this.copy(), expression=value.copy()) for value in values))
        node.replace(exp.Paren(this=either))


def like_as_string_functions(tree: exp.Expression) -> None:
    """Rewrite each ``x LIKE 'literal pattern'`` of ``tree`` in place (``NOT LIKE`` is ``NOT`` of it)."""
    for like in list(tree.find_all(exp.Like)):
        pattern = like.expression
        if isinstance(pattern, exp.Literal) and pattern.is_string:
            replacement = _rewritten(like.this.copy(), pattern.this)
            if replacement is not None:
                negated = bool(like.args.get("negate"))  # NOT LIKE is one node with negate set
                like.replace(exp.Not(this=exp.Paren(this=replacement)) if negated else exp.Paren(this=replacement))
