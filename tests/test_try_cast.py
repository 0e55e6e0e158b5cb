"""``try_cast(x, type)``: cast to a number, with a null where cast would fail, the same on both engines.

Each expression runs through both lowerings (Polars, and pandas as the Dask engine runs it)
against values chosen at the edges: text that is almost a number, out-of-range text and
floats, NaN and infinities. The answers are written out, not derived from either engine.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

from spillway.jobs.errors import SpecError
from spillway.jobs.expr import parse_expression
from spillway.jobs.kinds import kind_of_node
from spillway.jobs.lower_polars import to_polars

TEXT = ["12", "+7", "-3", "007", "12.5", " 4", "1e3", "", None, "abc", "3000000000", "-.5", "9999999999999999999", "1E-2"]
NUMBERS = [1.5, np.nan, np.inf, -2.7, 9.3e18, -2147483648.5, 2147483647.9, 2147483648.0, 0.0, -np.inf, 3.0, 42.0, -1.0, 7.25]
FRAME = pd.DataFrame({"text": pd.Series(TEXT, dtype="str"), "number": NUMBERS, "flag": [True, False] * 7})
KINDS = {"text": "string", "number": "numeric", "flag": "bool"}

N = None
EXPECTED: dict[str, list[Any]] = {
    "try_cast(text, 'int64')": [12, 7, -3, 7, N, N, N, N, N, N, 3000000000, N, N, N],
    "try_cast(text, 'int32')": [12, 7, -3, 7, N, N, N, N, N, N, N, N, N, N],
    "try_cast(text, 'float64')": [12.0, 7.0, -3.0, 7.0, 12.5, N, 1000.0, N, N, N, 3e9, -0.5, 1e19, 0.01],
    "try_cast(number, 'int64')": [1, N, N, -2, N, -2147483648, 2147483647, 2147483648, 0, N, 3, 42, -1, 7],
    "try_cast(number, 'int32')": [1, N, N, -2, N, -2147483648, 2147483647, N, 0, N, 3, 42, -1, 7],
    "try_cast(flag, 'int64')": [1, 0] * 7,
    "try_cast(text, 'int64') + 1": [13, 8, -2, 8, N, N, N, N, N, N, 3000000001, N, N, N],
}


def _plain(values: Any) -> list[Any]:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v for v in list(values)]


@pytest.mark.parametrize("text", list(EXPECTED))
def test_try_cast_gives_the_written_answer_on_the_polars_engine(text: str) -> None:
    got = pl.from_pandas(FRAME).select(to_polars(parse_expression(text).node, text, None, KINDS).alias("value"))["value"]
    assert _plain(got.to_list()) == EXPECTED[text]


@pytest.mark.parametrize("text", list(EXPECTED))
def test_try_cast_gives_the_written_answer_on_the_dask_engine(text: str) -> None:
    got = parse_expression(text).evaluate(FRAME)
    assert _plain(got.tolist()) == EXPECTED[text]


def test_try_cast_of_a_literal_is_folded_alike() -> None:
    assert _plain([parse_expression("try_cast('41', 'int64') + 1").evaluate(FRAME)]) == [42]
    assert _plain([parse_expression("try_cast('x', 'int64')").evaluate(FRAME)]) == [None]


def test_try_cast_is_a_number_to_the_kind_checker() -> None:
    expression = parse_expression("try_cast(text, 'float64') * 2")
    assert kind_of_node(expression.node, expression.text, KINDS) == "numeric"


def test_try_cast_to_a_type_it_does_not_take_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(SpecError) as refused:
        parse_expression("try_cast(text, 'bool')")
    assert "'int64', 'int32', 'float64', 'float32'" in refused.value.message


def test_try_cast_of_a_datetime_is_refused_before_any_work() -> None:
    expression = parse_expression("try_cast(when, 'int64')")
    with pytest.raises(SpecError) as refused:
        kind_of_node(expression.node, expression.text, {"when": "datetime"})
    assert "argument 1 of try_cast() must be text, a number or a bool" in refused.value.message


@pytest.mark.gpu
@pytest.mark.parametrize("text", list(EXPECTED))
def test_try_cast_gives_the_written_answer_on_cudf_polars(text: str) -> None:
    # cudf-polars' own cast saturates (9.3e18 → int64's largest): the lowering's range check must hold there too.
    pytest.importorskip("cudf_polars")
    query = pl.from_pandas(FRAME).lazy().select(to_polars(parse_expression(text).node, text, None, KINDS).alias("value"))
    got = query.collect(engine=pl.GPUEngine(executor="in-memory", raise_on_fail=True))["value"]
    assert _plain(got.to_list()) == EXPECTED[text]


@pytest.mark.gpu
@pytest.mark.parametrize("text", list(EXPECTED))
def test_try_cast_gives_the_written_answer_on_cudf(text: str) -> None:
    cudf = pytest.importorskip("cudf")
    got = parse_expression(text).evaluate(cudf.from_pandas(FRAME))
    assert _plain(got.to_pandas().tolist()) == EXPECTED[text]
