"""jobs.date_bounds against every date near the constant: the bound gives the rows the datetime comparison gives."""

from __future__ import annotations

import operator
from datetime import date, datetime, timedelta

import pytest

from spillway.jobs.date_bounds import MIRRORED, date_bound

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
CONSTANTS = [datetime(1994, 1, 1), datetime(1994, 1, 1, 12), datetime(1994, 1, 1, 0, 0, 0, 1), datetime(1994, 1, 1, 23, 59, 59, 999999),
             datetime(2000, 2, 29, 0, 0, 1)]


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("constant", CONSTANTS, ids=str)
def test_the_bound_holds_for_exactly_the_dates_the_datetime_comparison_does(op: str, constant: datetime) -> None:
    found = date_bound(op, constant)
    assert found is not None
    bound_op, bound = found
    for offset in range(-3, 4):
        day = constant.date() + timedelta(days=offset)
        assert OPS[bound_op](day, bound) == OPS[op](datetime.combine(day, datetime.min.time()), constant), (op, constant, day)


def test_mirrored_operators_swap_sides() -> None:
    assert all(OPS[MIRRORED[op]](2, 1) == OPS[op](1, 2) for op in OPS)


@pytest.mark.parametrize(("op", "constant"), [("==", datetime(1994, 1, 1)), ("!=", datetime(1994, 1, 1)), (">=", date(1994, 1, 1)),
                                              (">=", None), (">=", "1994-01-01"), ("", datetime(1994, 1, 1))])
def test_no_bound_where_the_cast_must_stay(op: str, constant: object) -> None:
    assert date_bound(op, constant) is None


def test_the_last_day_has_no_next_day() -> None:
    assert date_bound(">=", datetime(9999, 12, 31, 12)) is None
