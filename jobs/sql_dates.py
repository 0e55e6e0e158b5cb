"""Date and timestamp literals of a checked query, computed now and written as typed literals.

``DATE '1998-12-01' - INTERVAL '90' DAY`` is a constant: it is computed here, as PostgreSQL
computes it (a month added to Jan 31 gives the month's last day), and the result written as
``DATE '1998-09-02'``. Polars' SQL would otherwise plan an ``offset_by`` over a parsed string
(strptime with a cache), neither of which cudf-polars runs on the GPU, and its string-to-date
cast is deprecated. Literals are written back only after their text matched a strict pattern
(digits, ``-``, ``:``, ``.``, one space), so nothing but a date or a time reaches the SQL.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

from sqlglot import exp

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)?")
_DAYS = {"DAY": 1, "WEEK": 7}
_SECONDS = {"HOUR": 3600, "MINUTE": 60, "SECOND": 1}
_MONTHS = {"MONTH": 1, "YEAR": 12}


def _value(node: exp.Expression) -> date | datetime | None:
    """The date (``DATE '…'``) or timestamp (``TIMESTAMP '…'``) a literal cast stands for, else None."""
    target = node.args.get("to") if isinstance(node, exp.Cast) else None
    if not (isinstance(target, exp.DataType) and isinstance(node.this, exp.Literal) and node.this.is_string):
        return None
    text = node.this.this.strip()
    try:
        if target.this == exp.DataType.Type.DATE and _DATE.fullmatch(text):
            return date.fromisoformat(text)
        if target.this == exp.DataType.Type.TIMESTAMP and _TIMESTAMP.fullmatch(text):
            return datetime.fromisoformat(text)
    except ValueError:  # 2024-13-45: left as written, for Polars to refuse at submit
        return None
    return None


def _interval(node: exp.Expression) -> tuple[int, str] | None:
    """(count, unit) of ``INTERVAL 'n' UNIT``; units singular and upper case."""
    if not isinstance(node, exp.Interval) or not isinstance(node.this, exp.Literal) or node.unit is None:
        return None
    unit = node.unit.name.upper().removesuffix("S")
    try:
        count = int(str(node.this.this).strip())
    except ValueError:
        return None
    return (count, unit) if unit in (*_DAYS, *_SECONDS, *_MONTHS) else None


def _add_months(value: date | datetime, months: int) -> date | datetime:
    index = value.year * 12 + value.month - 1 + months
    year, month = divmod(index, 12)
    day = min(value.day, calendar.monthrange(year, month + 1)[1])  # PostgreSQL: Jan 31 + 1 month is Feb 28/29
    return value.replace(year=year, month=month + 1, day=day)


def _shift(value: date | datetime, count: int, unit: str) -> date | datetime:
    if unit in _MONTHS:
        return _add_months(value, count * _MONTHS[unit])
    if unit in _DAYS:
        return value + timedelta(days=count * _DAYS[unit])
    start = value if isinstance(value, datetime) else datetime(value.year, value.month, value.day)
    return start + timedelta(seconds=count * _SECONDS[unit])


def _literal(value: date | datetime) -> exp.Expression:
    # A typed literal Polars reads as a constant; the text is a formatted date, nothing of the user's.
    # (Compared with a column, Polars 1.x still warns that its string-to-date cast goes away in 2.0;
    # the spec pins polars below 1.45, and this form ran on cudf-polars where strptime did not.)
    if isinstance(value, datetime):
        text = value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds")
        return exp.Var(this=f"TIMESTAMP '{text}'")
    return exp.Var(this=f"DATE '{value.isoformat()}'")


def fold_date_literals(tree: exp.Expression) -> None:
    """Compute ``date ± interval`` of literals, then write every date and timestamp literal as a typed literal."""
    changed = True
    while changed:
        changed = False
        for node in list(tree.find_all(exp.Add, exp.Sub)):
            left, right = node.this, node.expression
            if isinstance(node, exp.Add) and _interval(left) is not None:
                left, right = right, left  # interval + date is date + interval
            value, step = _value(left), _interval(right)
            if value is None or step is None:
                continue
            count, unit = step
            shifted = _shift(value, count if isinstance(node, exp.Add) else -count, unit)
            kind = exp.DataType.Type.TIMESTAMP if isinstance(shifted, datetime) else exp.DataType.Type.DATE
            node.replace(exp.Cast(this=exp.Literal.string(str(shifted)), to=exp.DataType(this=kind)))
            changed = True
            break
    for cast in list(tree.find_all(exp.Cast)):
        value = _value(cast)
        if value is not None:
            cast.replace(_literal(value))
