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
