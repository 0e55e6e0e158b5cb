"""Regular-expression functions of the language: ``regexp_like``, ``regexp_extract``, ``regexp_replace``.

One regex engine for every engine: Rust's ``regex`` (through Polars), which runs in time linear
in the text, so no pattern can backtrack catastrophically (``(a+)+$`` against a long run of a's
costs what any pattern does). The Polars engine builds these expressions into its query; the
Dask engine (pandas, cuDF partitions) runs the same expressions on each partition through Polars
(:mod:`jobs.polars_partitions`), so both give the same answers. A pattern is a literal, checked when the spec is: the syntax of
Rust's regex (no look-around, no back-references in the pattern), at most
:data:`MAX_PATTERN` characters. A replacement names groups as Rust's regex does (``$1``,
``${name}``; ``$$`` is a dollar), which needs no backslash in the expression's string literal.
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: The functions this module gives both engines.
REGEX_FUNCTIONS = ("regexp_like", "regexp_extract", "regexp_replace")
#: Longest pattern or replacement a spec may give.
MAX_PATTERN = 500


def valid_pattern(pattern: object) -> bool:
    """Whether ``pattern`` is a literal regex the engines compile: Rust syntax, at most MAX_PATTERN characters.

    Rust's regex also refuses a pattern whose compiled program would pass its size limit
    (``(x{1000}){1000}``), before any text is read.
    """
    if not isinstance(pattern, str) or not 0 < len(pattern) <= MAX_PATTERN:
        return False
    try:
        pl.select(pl.lit("", dtype=pl.String).str.contains(pattern))
    except pl.exceptions.PolarsError:
        return False
    return True


def valid_replacement(text: object) -> bool:
    """Whether ``text`` is a replacement literal: at most MAX_PATTERN characters (groups as ``$1``, ``${name}``)."""
    return isinstance(text, str) and len(text) <= MAX_PATTERN


def regex_expr(name: str, text: pl.Expr, pattern: str, *rest: Any) -> pl.Expr:
    """The Polars expression of ``name`` over ``text`` (a String expression) with its literal arguments.

    ``regexp_like`` is false for a null text (as ``like`` is); ``regexp_extract`` gives group
    ``rest[0]`` (0, the default: the whole match) of the first match, null where none;
    ``regexp_replace`` replaces the first match, or all with the flag ``'g'`` (as PostgreSQL and DuckDB do).
    """
    if name == "regexp_like":
        return pl.when(text.is_null()).then(False).otherwise(text.str.contains(pattern))
    if name == "regexp_extract":
        return text.str.extract(pattern, rest[0] if rest else 0)
    replacement, flags = rest[0], (rest[1] if len(rest) > 1 else "")
    if flags == "g":
        return text.str.replace_all(pattern, replacement)
    return text.str.replace(pattern, replacement, n=1)
