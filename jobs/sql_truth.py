"""``x IS [NOT] TRUE`` and ``x IS [NOT] FALSE`` as SQL means them: never null.

Polars' SQL gives null for ``null IS TRUE`` (SQL: false), so ``WHERE (discount > 0.1) IS NOT TRUE``
lost the rows whose discount is null. ``x IS TRUE`` is written ``coalesce(x, false)`` and
``x IS FALSE`` ``coalesce(NOT x, false)``; their ``NOT`` forms are ``NOT`` of those, which are
two-valued, so also right.
"""

from __future__ import annotations

from sqlglot import exp


def truth_tests(tree: exp.Expression) -> None:
    """Rewrite each ``x IS TRUE`` / ``x IS FALSE`` of ``tree`` in place (``IS NOT`` wraps them in ``NOT``)."""
    # Innermost first (a breadth-first walk reversed): an outer test copies its subject, which must be rewritten already.
    for test in reversed(list(tree.find_all(exp.Is))):
        value = test.expression
        if isinstance(value, exp.Boolean):
            subject = test.this.copy() if value.this else exp.Not(this=exp.Paren(this=test.this.copy()))
            test.replace(exp.Coalesce(this=subject, expressions=[exp.false()]))
