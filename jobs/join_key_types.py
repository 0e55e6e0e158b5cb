"""The type two join keys of unlike types are compared in, on the Polars engine: a ``join`` step's keys and a
SQL source's equalities (:mod:`jobs.sql_key_types`) follow the same rule, pandas' merge's on the Dask engine."""

from __future__ import annotations

import polars as pl

_TIME_UNITS = ("ms", "us", "ns")  # coarse to fine


def join_key_type(left: pl.DataType, right: pl.DataType) -> pl.DataType | None:
    """The type a join compares a key of type ``left`` with one of type ``right`` in, where Polars refuses to
    join the two as they are; None where it joins them (equal types, integers of any widths, floats of both).

    An integer or a decimal with a float, and ``uint64`` with a signed integer: as floats, as pandas' merge and
    Polars' ``==`` compare them. A decimal with an integer or another decimal: a decimal holding both exactly.
    Others: :func:`_unlike_key_type`.
    """
    if left.is_integer() and right.is_integer() and pl.UInt64() in (left, right) and (left.is_signed_integer() or right.is_signed_integer()):
        # No 64-bit type holds both: Polars compares (and an outer join keys) them as Int128, which no sink writes
        # ("to_arrow() conversion failed"). As floats, as pandas' merge compares them on the Dask engine (exact to 2**53).
        return pl.Float64()
    if left == right or (left.is_integer() and right.is_integer()) or (left.is_float() and right.is_float()):
        return None
    if isinstance(left, pl.Decimal) and isinstance(right, pl.Decimal):
        scale = max(left.scale, right.scale)
        return pl.Decimal(min(38, max(left.precision - left.scale, right.precision - right.scale) + scale), scale)
    if isinstance(left, pl.Decimal) and right.is_integer():
        return pl.Decimal(38, left.scale)
    if isinstance(right, pl.Decimal) and left.is_integer():
        return pl.Decimal(38, right.scale)
    if left.is_numeric() and right.is_numeric():
        return pl.Float64()
    return _unlike_key_type(left, right)


def _unlike_key_type(left: pl.DataType, right: pl.DataType) -> pl.DataType | None:
    """:func:`join_key_type` of two unequal types that are not both numbers, as pandas' merge compares them.

    A column of nulls only (what Polars reads a JSON-lines key without a value as): the other's type, so it
    matches nothing. Text with a parquet dictionary column (Polars' Categorical): as text. Datetimes and
    durations of different units: the finer; datetimes of different time zones: the left's zone, comparing
    instants. A naive datetime with a zoned one: None, as neither engine joins them (refused at submit).
    """
    if left == pl.Null or right == pl.Null:
        return right if left == pl.Null else left
    if {type(left), type(right)} == {pl.String, pl.Categorical}:
        return pl.String()
    if isinstance(left, pl.Datetime) and isinstance(right, pl.Datetime) and (left.time_zone is None) == (right.time_zone is None):
        return pl.Datetime(max(left.time_unit, right.time_unit, key=_TIME_UNITS.index), left.time_zone)
    if isinstance(left, pl.Duration) and isinstance(right, pl.Duration):
        return pl.Duration(max(left.time_unit, right.time_unit, key=_TIME_UNITS.index))
    return None


__all__ = ["join_key_type"]
