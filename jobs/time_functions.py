"""Parsing text as datetimes and converting between time zones: ``strptime`` and ``convert_tz``.

Their semantics are chrono's, through Polars, on both engines (the Dask engine runs the same
expressions per partition: :mod:`jobs.polars_partitions`). Datetimes in Spillway are naive
(sources read them so); ``convert_tz(d, from, to)`` reads ``d`` as a wall-clock time in
``from`` and gives the wall-clock time in ``to``, again naive. Around a change of the clock
(daylight saving), a time the clock shows twice is read as the earlier one, and a time it skips
is null.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

import polars as pl

#: The functions this module gives both engines.
TIME_FUNCTIONS = ("strptime", "convert_tz")
#: How Polars' error begins when ``strptime`` meets a text its format does not read (the service names the expression from it).
STRPTIME_MISMATCH = "conversion from `str` to `datetime"


@lru_cache(maxsize=1024)
def valid_zone(name: object) -> bool:
    """Whether ``name`` is a time zone of the IANA database as Polars knows it (``'Europe/Paris'``, ``'UTC'``)."""
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        return False
    try:
        pl.select(pl.lit(datetime(2000, 1, 1)).dt.replace_time_zone(name))
    except pl.exceptions.PolarsError:
        return False
    return True


def time_expr(name: str, value: pl.Expr, *args: str) -> pl.Expr:
    """The Polars expression of ``name`` over ``value`` with its literal arguments.

    ``strptime(s, format)``: ``s`` parsed with ``format``; a text that does not match fails the
    job, naming the value (as SQL's strptime does). ``convert_tz(d, from, to)``: as the module says.
    """
    if name == "strptime":
        return value.str.strptime(pl.Datetime("us"), args[0], strict=True, cache=False)  # cudf-polars refuses the cache (a CPU feature)
    source, target = args
    return (value.dt.replace_time_zone(source, ambiguous="earliest", non_existent="null")
            .dt.convert_time_zone(target).dt.replace_time_zone(None))
