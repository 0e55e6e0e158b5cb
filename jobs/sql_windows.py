"""Which SQL windows a SQL source runs, and for the rest what exactly is refused and what does it.

Polars' SQL front end (1.44) runs ``OVER (PARTITION BY …)`` aggregates as PostgreSQL and DuckDB do,
but its ordered windows answer differently, measured against DuckDB on rows with nulls and ties
(``tests/test_sql_source.py``): ``ORDER BY`` inside ``OVER`` sorts nulls first whatever ``NULLS
LAST`` says; ``RANK`` and ``DENSE_RANK`` give a null key a null rank; a running ``SUM`` with ``ORDER
BY`` gives each of tied rows its own total (a ``ROWS`` frame, where SQL's default is ``RANGE``:
peers share one), and a running ``AVG`` the whole partition's; an ``ORDER BY`` over an expression
fails to plan. So only unordered partition aggregates run; every other window is refused with
the spec's ``window`` step that computes it (docs/spec.md, "window"), which follows SQL's rules.
"""

from __future__ import annotations

from sqlglot import exp

#: Aggregates that run over a whole partition: ``func(x) OVER (PARTITION BY …)``.
PARTITION_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
# SQL's window functions → the window step's func (aggregates: the running frame once ordered).
_STEP_FUNCS: dict[type[exp.Expression], str] = {
    exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank", exp.Lag: "lag", exp.Lead: "lead",
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "mean", exp.Min: "min", exp.Max: "max",
}
_WHY_ORDERED = {
    "row_number": "Polars' SQL sorts a window's nulls first, whatever NULLS LAST says",
    "rank": "Polars' SQL sorts a window's nulls first and gives a null key a null rank",
    "dense_rank": "Polars' SQL sorts a window's nulls first and gives a null key a null rank",
    "lag": "Polars' SQL sorts a window's nulls first, whatever NULLS LAST says",
    "lead": "Polars' SQL sorts a window's nulls first, whatever NULLS LAST says",
    "count": "Polars' SQL sorts a window's nulls first and counts tied rows one by one (a ROWS frame; SQL's default is RANGE)",
    "sum": "Polars' SQL sorts a window's nulls first and sums tied rows one by one (a ROWS frame; SQL's default is RANGE)",
    "min": "Polars' SQL sorts a window's nulls first and takes tied rows one by one (a ROWS frame; SQL's default is RANGE)",
    "max": "Polars' SQL sorts a window's nulls first and takes tied rows one by one (a ROWS frame; SQL's default is RANGE)",
    "mean": "Polars' SQL gives a running AVG the whole partition's average",
}


def window_refusal(node: exp.Window, dialect: object) -> tuple[str, str] | None:
    """None for a window a SQL source runs; else what is refused and why, with the window step that does it.

    ``dialect`` writes the SQL shown in the message (the checker's own).
    """
    func = node.this
    ordered, frame = node.args.get("order"), node.args.get("spec")
    if isinstance(func, PARTITION_AGGREGATES) and not ordered and not frame:
        return None
    text = node.sql(dialect=dialect)
    shown = text if len(text) <= 120 else text[:117] + "..."
    name = _STEP_FUNCS.get(type(func))
    if name is None:
        return (f"window function {func.sql(dialect=dialect)[:40]} OVER (…) is not run",
                ": a SQL window runs count, sum, avg, min or max OVER (PARTITION BY …); the spec's window step has "
                "row_number, rank, dense_rank, lag, lead and running or rolling sum, count, mean, min and max")
    if not ordered:
        if frame:
            return f"window '{shown}' is not run", ": a frame without ORDER BY inside OVER; drop the frame for a total over the partition"
        return f"window '{shown}' is not run", f": {name} needs ORDER BY inside OVER; the spec's window step computes it with order_by"
    if frame:
        why = ("a frame inside OVER: Polars' SQL takes only ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW, and sorts "
               "a window's nulls first")
    else:
        why = "ORDER BY inside OVER: " + _WHY_ORDERED[name]
    return f"window '{shown}' is not run", f" ({why}, unlike PostgreSQL and DuckDB); " + _step_hint(node, name, dialect)


def _step_hint(node: exp.Window, name: str, dialect: object) -> str:
    """The window step that computes ``node``, to put after the SQL source (with its input as a column)."""
    keys = [_column(key, dialect) for key in node.args.get("partition_by") or []]
    order = [
        "{column: " + _column(ordered.this, dialect) + (", descending: true" if ordered.args.get("desc") else "") + "}"
        for ordered in (node.args["order"].expressions if node.args.get("order") else [])
    ]
    column: dict[str, str] = {"func": name}
    argument = node.this.this if name not in ("row_number", "rank", "dense_rank") else None
    if isinstance(argument, exp.Expression) and not isinstance(argument, exp.Star):
        column["column"] = _column(argument, dialect)
    if name in ("lag", "lead") and node.this.args.get("offset") is not None:
        column["offset"] = node.this.args["offset"].sql(dialect=dialect)
    if name in ("count", "sum", "mean", "min", "max"):
        column.update(_step_frame(node.args.get("spec")))
    if name in ("lag", "lead") and node.this.args.get("default") is not None:
        column["default"] = node.this.args["default"].sql(dialect=dialect)
    fields = ", ".join(f"{key}: {value}" for key, value in column.items())
    partition = f"partition_by: [{', '.join(keys)}], " if keys else ""
    tail = "; its frames are SQL's ROWS frames: add a column to order_by to break ties" if "frame" in column else ""
    return (f"compute it with the spec's window step after the SQL source: {{op: window, {partition}"
            f"order_by: [{', '.join(order)}], columns: {{<name>: {{{fields}}}}}}} (nulls last, as DuckDB orders them{tail})")


def _column(node: exp.Expression, dialect: object) -> str:
    """A column's name as the SQL source outputs it (no table qualifier); any other expression must become one first."""
    return node.name if isinstance(node, exp.Column) else f"<a column holding {node.sql(dialect=dialect)}>"


def _step_frame(spec: exp.Expression | None) -> dict[str, str]:
    """The window step's frame for an aggregate's SQL frame: running (SQL's default and UNBOUNDED
    PRECEDING), rolling for ``n PRECEDING AND CURRENT ROW``; other frames have no counterpart."""
    if spec is None:
        return {"frame": "running"}
    start, end = spec.args.get("start"), spec.args.get("end")
    start_text = start.sql() if isinstance(start, exp.Expression) else str(start or "")
    if str(end or "").upper() != "CURRENT ROW" or str(spec.args.get("start_side") or "").upper() != "PRECEDING":
        return {"frame": "running | rolling"}
    if start_text.upper() == "UNBOUNDED":
        return {"frame": "running"}
    return {"frame": "rolling", "preceding": start_text}
