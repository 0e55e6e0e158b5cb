"""Exact decimals, as an opt-in: ``cast(x, 'decimal(p, s)')`` on the Polars engine.

Sources still read parquet decimals as float64 (the default every engine shares, which TPC-H on
the GPU relies on); a cast to ``decimal(p, s)`` makes a number an exact decimal of ``p`` digits,
``s`` of them after the point, so sums and ``+ - *`` of such values are exact and a sink writes
them as parquet decimals (docs/spec.md, "Exact decimals"). Only the Polars engine computes with
decimals: a job that would run on the Dask engine is refused before any work.
"""

from __future__ import annotations

import re

from spillway.jobs import ir
from spillway.jobs.errors import SpecError

#: The most digits a decimal holds (Arrow's decimal128, Polars' Decimal).
MAX_PRECISION = 38
_DECIMAL_TYPE = re.compile(r"decimal\((\d{1,2}), ?(\d{1,2})\)")


def decimal_type(name: object) -> tuple[int, int] | None:
    """``(precision, scale)`` of a cast type name ``'decimal(p, s)'`` with 1 ≤ p ≤ 38 and 0 ≤ s ≤ p, else None."""
    found = _DECIMAL_TYPE.fullmatch(name) if isinstance(name, str) else None
    if found is None:
        return None
    precision, scale = int(found.group(1)), int(found.group(2))
    return (precision, scale) if 1 <= precision <= MAX_PRECISION and scale <= precision else None


def is_decimal_cast(node: ir.Node) -> bool:
    """Whether ``node`` is ``cast(x, 'decimal(p, s)')``."""
    return (isinstance(node, ir.Call) and node.name == "cast" and len(node.args) == 2 and isinstance(node.args[1], ir.Lit)
            and decimal_type(node.args[1].value) is not None)


def decimal_casts(expressions: dict[str, object]) -> list[str]:
    """The fields (``steps[2].expr``) of the parsed ``expressions`` (field → Expression) that cast to a decimal, in order."""
    return [field for field, expression in expressions.items()
            if any(is_decimal_cast(node) for node in ir.walk(getattr(expression, "node")))]


def refuse_on_dask(field: str) -> SpecError:
    """The error for a decimal cast in a job the Dask engine would run."""
    return SpecError(f"{field}: cast(…, 'decimal(p, s)') runs only on the Polars engine (pandas and cuDF frames here compute "
                     "in float64): use engine: polars or auto, or cast to 'float64'", field=field)
