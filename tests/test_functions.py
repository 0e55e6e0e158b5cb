"""The date and text functions: constants folded by the parser, and the literals and kinds
they refuse before any work. Their values over columns, on both engines, are checked with
every other feature in tests/test_expr.py (against Python) and tests/test_engines.py."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from spillway.jobs.errors import ExpressionError, TypeMismatch
from spillway.jobs.expr import parse_expression
from spillway.jobs.ir import Lit

SCHEMA = {"name": "string", "day": "datetime", "n": "numeric"}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("date_trunc('month', date('2024-02-15'))", pd.Timestamp("2024-02-01")),
        ("date_trunc('quarter', date('2024-12-31'))", pd.Timestamp("2024-10-01")),
        ("date_trunc('week', date('2024-03-03'))", pd.Timestamp("2024-02-26")),  # a Sunday: back to Monday
        ("date_diff('day', date('2024-01-01'), date('2024-03-01'))", 60),
        ("date_diff('month', date('2024-01-31'), date('2024-02-01'))", 1),  # boundaries crossed, as DuckDB
        ("date_diff('year', date('2024-12-31'), date('2024-01-01'))", 0),
        ("strftime(date('2024-02-05'), '%Y-%m')", "2024-02"),
        ("day_of_week(date('2024-03-03'))", 7),
        ("week(date('2021-01-03'))", 53),
        ("split_part('a-b-c', '-', 2)", "b"),
        ("split_part('a-b', '-', 3)", ""),
        ("strpos('banana', 'an')", 2),
        ("strpos('banana', 'x')", 0),
        ("replace('a.b.c', '.', '')", "abc"),
        ("trim('  x ')", "x"),
        ("lpad('hello', 3)", "hel"),
        ("lpad('7', 3, '0')", "007"),
        ("rpad('ab', 4, '.')", "ab.."),
        ("concat('a', None, 'b')", "ab"),
        ("split_part(None, '-', 1)", None),
        ("-7 // 2", -3),
        ("-7 % 3", -1),
        ("7 // -2", -3),
        ("7 % -3", 1),
        ("7 // 0", None),
        ("7 % 0", None),
        ("floor(2.7)", 2.0),
        ("ceil(-2.5)", -2.0),
        ("floor(7)", 7),
        ("sign(-3)", -1),
        ("sqrt(16)", 4.0),
        ("sqrt(-1)", None),
        ("ln(0)", None),
        ("exp(0)", 1.0),
        ("pow(2, 10)", 1024),
        ("greatest(1, None, 3)", 3),
        ("least(4, 2.5)", 2.5),
        ("least(None, None)", None),
        ("safe_divide(7, 2)", 3.5),
        ("safe_divide(7, 0)", None),
        ("divide(7, 2)", 3.5),
        ("strptime('05/03/24 10:30', '%d/%m/%y %H:%M')", pd.Timestamp("2024-03-05 10:30")),
        ("convert_tz(timestamp('2024-07-01 12:00:00'), 'UTC', 'Europe/Paris')", pd.Timestamp("2024-07-01 14:00")),
        ("convert_tz(timestamp('2024-10-27 02:30:00'), 'Europe/Paris', 'UTC')", pd.Timestamp("2024-10-27 00:30")),  # twice: the earlier
        ("convert_tz(timestamp('2024-03-31 02:30:00'), 'Europe/Paris', 'UTC')", None),  # skipped by the clock
    ],
)
def test_constant_calls_are_folded(text: str, value: Any) -> None:
    node = parse_expression(text).node
    assert isinstance(node, Lit) and node.value == value, node


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("date_trunc('decade', day)", "argument 1 of date_trunc() must be one of 'year', 'quarter'"),
        ("date_trunc(unit, day)", "argument 1 of date_trunc() must be one of"),
        ("date_diff('days', day, day)", "must be one of 'year'"),
        ("strftime(day, '%A %d')", "argument 2 of strftime() must be a format literal of %-codes %Y"),
        ("strftime(day, name)", "must be a format literal"),
        ("split_part(name, '', 1)", "must be a non-empty string literal"),
        ("split_part(name, '-', 0)", "must be an integer literal of 1 or more"),
        ("replace(name, '', 'x')", "non-empty"),
        ("lpad(name, 100000)", "from 0 to 10000"),
        ("lpad(name, 5, '00')", "one-character string literal"),
        ("concat(name)", "expected 2 or more"),
        ("substr(name, -1)", "argument 2 of substr() must be a non-negative integer literal or a numeric expression"),
        ("regexp_like(name, '(?<=a)b')", "in Rust's regex syntax (no look-around, no back-references)"),
        ("regexp_like(name, '(x{1000}){1000}')", "regular expression literal"),  # past the compiled size limit
        ("regexp_like(name, '" + "a" * 501 + "')", "of at most 500 characters"),
        ("regexp_like(name, pattern)", "regular expression literal"),
        ("regexp_extract(name, 'a', 100)", "from 0 (the whole match) to 99"),
        ("regexp_replace(name, 'a', 'b', 'x')", "'g' (every match; without it the first)"),
        ("convert_tz(day, 'Mars/Olympus', 'UTC')", "argument 2 of convert_tz() must be a time zone literal of the IANA database"),
        ("strptime(name, '%A')", "argument 2 of strptime() must be a format literal"),
        ("strptime('x', '%Y')", "cannot evaluate 'strptime('x', '%Y')' at col 0: conversion from `str` to `datetime"),
        ("divide(7, 0)", "cannot evaluate 'divide(7, 0)' at col 0: spillway: division by zero"),
    ],
)
def test_function_literals_are_checked(text: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, field="steps[0].expr")
    assert fragment in info.value.message and info.value.field == "steps[0].expr", info.value.message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("date_trunc('month', name)", "argument 2 of date_trunc() must be of kind datetime, got 'name' (string)"),
        ("date_diff('day', day, n)", "argument 3 of date_diff() must be of kind datetime"),
        ("concat(name, n)", "argument 2 of concat() must be of kind string, got 'n' (numeric)"),
        ("strftime(n, '%Y')", "argument 1 of strftime() must be of kind datetime"),
        ("week(name)", "argument 1 of week() must be of kind datetime"),
        ("trim(n)", "argument 1 of trim() must be of kind string"),
        ("strpos(day, 'x')", "argument 1 of strpos() must be of kind string"),
        ("sqrt(name)", "argument 1 of sqrt() must be of kind numeric, got 'name' (string)"),
        ("regexp_like(n, 'a')", "argument 1 of regexp_like() must be of kind string"),
        ("strptime(day, '%Y')", "argument 1 of strptime() must be of kind string"),
        ("substr(name, name)", "argument 2 of substr() must be of kind numeric"),
        ("convert_tz(name, 'UTC', 'UTC')", "argument 1 of convert_tz() must be of kind datetime"),
        ("floor(day)", "argument 1 of floor() must be of kind numeric"),
        ("greatest(n, name)", "cannot mix 'n' (numeric) with 'name' (string) in greatest()"),
        ("pow(name, 2)", "name"),
    ],
)
def test_function_kinds_are_checked(text: str, fragment: str) -> None:
    with pytest.raises(TypeMismatch) as info:
        parse_expression(text).infer_kind(SCHEMA)
    assert fragment in info.value.message, info.value.message


@pytest.mark.parametrize(
    ("text", "kind"),
    [("date_trunc('day', day)", "datetime"), ("date_diff('week', day, day)", "numeric"), ("strftime(day, '%Y')", "string"),
     ("quarter(day)", "numeric"), ("concat(name, 'x', None)", "string"), ("strpos(name, 'a')", "numeric"), ("lpad(name, 3)", "string")],
)
def test_function_result_kinds(text: str, kind: str) -> None:
    assert parse_expression(text).infer_kind(SCHEMA) == kind


def test_a_pattern_that_backtracks_catastrophically_elsewhere_runs_in_linear_time_on_both_engines() -> None:
    """``(a+)+$`` against a long run of a's and a '!' takes Python's re (and any backtracking engine) forever; here it is one pass."""
    import dask.dataframe as dd
    import polars as pl

    from spillway.jobs.lower_polars import to_polars

    text = "regexp_like(s, '(a+)+$')"
    frame = pd.DataFrame({"s": ["a" * 50_000 + "!"] * 8 + ["aaa", None]})
    expected = [False] * 8 + [True, False]
    expression = parse_expression(text)
    assert expression.evaluate(frame).tolist() == expected
    assert expression.evaluate(dd.from_pandas(frame, npartitions=2)).compute().tolist() == expected
    on_polars = pl.from_pandas(frame).select(to_polars(expression.node, text, None, {"s": "string"}).alias("v"))["v"]
    assert on_polars.to_list() == expected
