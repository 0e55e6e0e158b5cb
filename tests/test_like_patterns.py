"""SQL LIKE as its cheapest form (jobs/like_patterns.py): the same answers as the anchored regex it replaced, on both engines."""

from __future__ import annotations

import itertools
import re

import pandas as pd
import polars as pl
import pytest

from spillway.jobs.expr import parse_expression
from spillway.jobs.like_patterns import like_form, like_matches
from spillway.jobs.lower_polars import to_polars

TEXTS = ["", "a", "b", "ab", "ba", "aab", "a.b", "a%b", "a_b", "abab", "bbb", ".", "%", "_", "x\nab\ny"]
#: Every pattern of up to three characters over letters, a regex metacharacter and both wildcards.
PATTERNS = sorted({"".join(chars) for size in range(4) for chars in itertools.product("ab%_.", repeat=size)})


def reference(text: str, pattern: str) -> bool:
    """SQL's LIKE: the whole text matches, ``%`` any run of characters (newlines too), ``_`` one."""
    regex = "".join({"%": ".*", "_": "."}.get(char, re.escape(char)) for char in pattern)
    return re.fullmatch(regex, text, flags=re.DOTALL) is not None


@pytest.mark.parametrize(("pattern", "form"), [
    ("%special%requests%", ("regex", "special.*requests")), ("%BRASS", ("endswith", "BRASS")), ("PROMO%", ("startswith", "PROMO")),
    ("%green%", ("contains", "green")), ("MED BOX", ("equals", "MED BOX")), ("%", ("contains", "")), ("", ("equals", "")),
    ("a_c%", ("regex", "^a.c")), ("%a.c", ("endswith", "a.c")), ("a%c", ("regex", "^a.*c$")),
])
def test_a_pattern_takes_the_cheapest_form_that_answers_it(pattern: str, form: tuple[str, str]) -> None:
    assert like_form(pattern) == form


def test_every_short_pattern_answers_as_sql_like_does() -> None:
    for pattern, text in itertools.product(PATTERNS, TEXTS):
        if "\n" in text and like_form(pattern)[0] == "regex":
            continue  # a regex's '.' does not cross a newline (documented in jobs/like_patterns.py)
        assert like_matches(text, pattern) == reference(text, pattern), (pattern, text)


def test_both_engines_give_like_the_same_answers_over_a_column_with_nulls() -> None:
    frame = pd.DataFrame({"s": [*TEXTS, None]})
    on_polars_frame = pl.from_pandas(frame)
    for pattern in PATTERNS:
        text = f"like(s, '{pattern}')"
        expression = parse_expression(text)
        expected = [isinstance(value, str) and like_matches(value, pattern) for value in frame["s"]]
        assert expression.evaluate(frame).tolist() == expected, pattern
        polars = on_polars_frame.select(to_polars(expression.node, text, None, {"s": "string"}).alias("v"))["v"].to_list()
        assert polars == expected, pattern
