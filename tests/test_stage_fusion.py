"""Planning a Dask-engine job whose expressions share inputs: dask's blockwise fusion, under the stage recorder.

dask's ``Expr._substitute`` remembers only the expressions it left unchanged, so one it rebuilds is
rebuilt (and tokenized) again on every path that reaches it (dask/dask-expr#835): a graph whose
expressions share inputs costs time exponential in its depth to fuse. TPC-H q11 on the Dask engine
made 644,287 calls over 82 expressions, 15-30 s of the service's planning on 2 cores (and past the
test's 240 s under load). cluster/stages.py rebuilds each expression once per substitution.
"""

from __future__ import annotations

import dask
import dask.dataframe as dd
import pandas as pd
from dask._expr import Expr

from spillway.cluster.stages import StageLabels, recording


def _q11_shaped() -> dd.DataFrame:
    """TPC-H q11's shape (examples/tpch/q11.yaml) over a few rows: one filtered join feeding both a total and a
    grouped sum, which a cross join compares, then a sort."""
    parts = dd.from_pandas(pd.DataFrame({"partkey": [1, 2, 3, 4] * 5, "suppkey": list(range(20)), "cost": [1.5] * 20,
                                         "qty": list(range(20))}), npartitions=4)
    suppliers = dd.from_pandas(pd.DataFrame({"suppkey": list(range(20)), "nation": [0, 1] * 10}), npartitions=2)
    joined = parts.merge(suppliers, on="suppkey")
    joined = joined[joined.nation == 0]
    joined = joined.assign(value=joined.cost * joined.qty)
    total = joined[["value"]].assign(k=1).groupby("k").value.sum().rename("total").reset_index()
    total = total.assign(threshold=total.total * 0.0001, one=1)
    grouped = joined.groupby("partkey").value.sum().rename("value").reset_index()
    grouped = grouped.assign(one=1).merge(total, on="one")
    return grouped[grouped.value > grouped.threshold].sort_values("value", ascending=False)[["partkey", "value"]]


def _fusion(frame: dd.DataFrame, *, recorded: bool) -> tuple[int, Expr]:
    """How many times the final fusion calls ``Expr._substitute``, and the fused expression: under the recorder's
    wrappers, or with dask's own methods (``__wrapped__``)."""
    unfused = frame.optimize(fuse=False)  # the sort's divisions are computed here, as in the service's plan
    calls = 0
    installed, entry = Expr._substitute, Expr.substitute
    inner = installed if recorded else installed.__wrapped__

    def counting(self: Expr, old: object, new: object, _seen: set[str]) -> Expr:
        nonlocal calls
        calls += 1
        return inner(self, old, new, _seen)

    Expr._substitute = counting  # type: ignore[method-assign]
    try:
        if recorded:
            with recording(StageLabels()):
                fused = unfused.optimize()
        else:
            Expr.substitute = entry.__wrapped__  # type: ignore[method-assign]
            fused = unfused.optimize()
    finally:
        Expr._substitute, Expr.substitute = installed, entry  # type: ignore[method-assign]
    return calls, fused.expr


def test_fusion_under_the_stage_recorder_rebuilds_each_shared_expression_once() -> None:
    with dask.config.set({"dataframe.shuffle.method": "tasks", "scheduler": "sync"}):
        frame = _q11_shaped()
        with recording(StageLabels()):
            pass  # installs the recorder's wrappers (once per process), as the service's first plan does
        recorded_calls, recorded = _fusion(frame, recorded=True)
        plain_calls, plain = _fusion(frame, recorded=False)
    assert recorded._name == plain._name, "the same fused expression"
    assert sorted(map(str, recorded.__dask_graph__())) == sorted(map(str, plain.__dask_graph__()))
    assert recorded_calls * 5 < plain_calls, (recorded_calls, plain_calls)
