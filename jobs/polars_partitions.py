"""A function of the language that the Dask engine runs through Polars, partition by partition.

For functions whose semantics live in Polars' own engine (Rust's regex, chrono's date parsing
and time zones), running the very expression the Polars engine builds on each pandas (or cuDF)
partition gives the Dask engine the same answers, and the same guarantees (a regex linear in the
text), as the Polars engine. A cuDF partition goes through host memory.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa

#: Builds the Polars expression from its first argument's expression and the call's literals.
Builder = Callable[..., pl.Expr]


def _column(part: pd.Series) -> pl.Series:
    if pd.api.types.is_datetime64_any_dtype(part.dtype):
        return pl.from_arrow(pa.array(part, from_pandas=True))  # type: ignore[return-value]
    return pl.from_arrow(pa.array(part, type=pa.string(), from_pandas=True))  # type: ignore[return-value]


def _back(result: pl.Series, part: pd.Series) -> pd.Series:
    if result.dtype == pl.Boolean:
        return pd.Series(result.fill_null(False).to_numpy(), index=part.index, dtype=bool)
    if result.dtype.is_temporal():  # in the input's unit (a datetime), or pandas' usual nanoseconds (parsed text)
        unit = part.dtype if pd.api.types.is_datetime64_any_dtype(part.dtype) else "datetime64[ns]"
        return pd.Series(result.to_pandas().to_numpy(), index=part.index).astype(unit)
    values = pd.Series(result.to_list(), index=part.index, dtype=object)
    return values.astype(part.dtype) if isinstance(part.dtype, pd.StringDtype) else values


def through_polars(build: Builder, *, null: Any = None) -> Callable[..., Any]:
    """The Dask engine's implementation of a function whose Polars expression ``build`` makes.

    ``null`` is its value for a null constant (``False`` for a predicate, as ``like``).
    """

    def on_series(part: Any, *args: Any) -> Any:
        from spillway.jobs.pandas_functions import _is_cudf

        if _is_cudf(part):
            import cudf

            return cudf.from_pandas(on_series(part.to_pandas(), *args))
        result = pl.select(build(pl.lit(_column(part)), *args).alias("value")).to_series()
        return _back(result, part)

    def impl(value: Any, *args: Any) -> Any:
        if getattr(value, "ndim", 0) == 0:  # a folded constant
            if pd.isna(value):
                return null
            found = pl.select(build(pl.lit(value.to_pydatetime() if isinstance(value, pd.Timestamp) else value), *args)).item()
            return pd.Timestamp(found) if isinstance(found, datetime) else found
        if hasattr(value, "map_partitions"):  # a dask Series: each partition on its worker
            return value.map_partitions(on_series, *args, meta=on_series(value._meta, *args))
        return on_series(value, *args)

    return impl


def slice_expr(text: pl.Expr, start: pl.Expr | int, length: pl.Expr | int | None = None) -> pl.Expr:
    """``substr``'s Polars expression: counts as integers (a fraction dropped), a negative length as 0."""
    def count(bound: pl.Expr | int | None) -> pl.Expr | int | None:
        return bound.cast(pl.Int64, strict=False) if isinstance(bound, pl.Expr) else bound

    size = count(length)
    return text.str.slice(count(start), size.clip(lower_bound=0) if isinstance(size, pl.Expr) else size)


def slice_by_rows(text: Any, start: Any, length: Any = None) -> Any:
    """``substr(text, start, length)`` where ``start`` or ``length`` is a column: Polars' ``str.slice`` row by row.

    Counts are cast to integers (a fraction dropped); a null start or length gives null; a
    negative start counts from the end, as on the Polars engine (the very same expression).
    """
    import dask.dataframe as dd

    def on_parts(part: Any, first: Any, count: Any) -> Any:
        index = part.index
        frame = pl.DataFrame({"s": _column(part)}).with_columns(
            _bound(first, index, "start"), _bound(count, index, "length"))
        sliced = frame.select(slice_expr(pl.col("s"), pl.col("start"), pl.col("length"))).to_series()
        return _back(sliced, part)

    if any(hasattr(value, "map_partitions") for value in (text, start, length)):
        meta = on_parts(text._meta, _meta_of(start), _meta_of(length))
        return dd.map_partitions(on_parts, text, start, length, meta=meta)
    return on_parts(text, start, length)


def _meta_of(value: Any) -> Any:
    return value._meta if hasattr(value, "_meta") else value


def _bound(value: Any, index: pd.Index, name: str) -> pl.Expr:
    if value is None or (getattr(value, "ndim", 0) == 0 and pd.isna(value)):
        return pl.lit(None, dtype=pl.Int64).alias(name)
    if getattr(value, "ndim", 0) == 0:
        return pl.lit(int(value), dtype=pl.Int64).alias(name)
    numbers = pa.array(pd.Series(value, index=index), from_pandas=True)
    return pl.lit(pl.from_arrow(numbers)).cast(pl.Int64, strict=False).alias(name)
