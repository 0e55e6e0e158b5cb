"""Which SQL windows a SQL source runs, what each one is in the window step's terms, and what is refused.

Polars' SQL front end (1.44) runs ``OVER (PARTITION BY …)`` aggregates as PostgreSQL and DuckDB do,
but its ordered windows answer differently, measured against DuckDB on rows with nulls and ties
(``tests/test_sql_windows.py``): ``ORDER BY`` inside ``OVER`` sorts nulls first whatever ``NULLS
LAST`` says; ``RANK`` and ``DENSE_RANK`` give a null key a null rank; a running ``SUM`` with ``ORDER
BY`` gives each of tied rows its own total (a ``ROWS`` frame, where SQL's default is ``RANGE``:
peers share one), and a running ``AVG`` the whole partition's; an ``ORDER BY`` over an expression
fails to plan. So a SELECT with an ordered window never reaches Polars' SQL with it:
:mod:`jobs.sql_window_run` computes its windows with the window step's lowering, and here each
window is read into that step's terms (:class:`SqlWindow`), or refused where it has none.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

#: Aggregates that run over a whole partition: ``func(x) OVER (PARTITION BY …)``.
PARTITION_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
#: SQL's window functions → the window step's func.
STEP_FUNCS: dict[type[exp.Expression], str] = {
    exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank", exp.Ntile: "ntile", exp.PercentRank: "percent_rank",
    exp.CumeDist: "cume_dist", exp.Lag: "lag", exp.Lead: "lead",
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "mean", exp.Min: "min", exp.Max: "max",
    exp.FirstValue: "first_value", exp.LastValue: "last_value",
}
#: Numbering functions: they take no value (NTILE its bucket count) and ignore a frame.
NUMBERING = ("row_number", "rank", "dense_rank", "ntile", "percent_rank", "cume_dist")
#: The most buckets NTILE takes, as the window step's field allows.
MAX_BUCKETS = 1_000_000
#: The largest LAG/LEAD offset and rolling frame, as the window step's fields allow.
MAX_OFFSET = 1_000_000
MAX_PRECEDING = 100_000
_FRAMES_RUN = ("ROWS or RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW (a running total; RANGE, the default, "
               "gives tied rows one total), ROWS BETWEEN n PRECEDING or CURRENT ROW AND CURRENT ROW or m FOLLOWING (n and m from 1 to "
               f"{MAX_PRECEDING}), and UNBOUNDED PRECEDING AND "
               "UNBOUNDED FOLLOWING")


@dataclass(frozen=True)
class SqlWindow:
    """One SQL window in the window step's terms.

    ``frame`` is the aggregates' frame (``partition``, ``running``, ``rolling``; None for the
    others); ``peers`` that a running frame is SQL's ``RANGE`` one, where rows with equal
    ``ORDER BY`` values share the value of the last of them.
    """

    func: str
    frame: str | None = None
    preceding: int | None = None
    peers: bool = False
    offset: int = 1
    buckets: int | None = None
    following: int | None = None


class WindowRefused(ValueError):
    """A window a SQL source does not run: ``part`` is what is refused, ``why`` why and what would do."""

    def __init__(self, part: str, why: str) -> None:
        super().__init__(part + why)
        self.part, self.why = part, why


def is_ordered(node: exp.Window) -> bool:
    """Whether ``node`` is more than an aggregate over its whole partition (Polars' SQL runs only those)."""
    return not (isinstance(node.this, PARTITION_AGGREGATES) and not node.args.get("order") and not node.args.get("spec"))


def window_refusal(node: exp.Window, dialect: object) -> tuple[str, str] | None:
    """None for a window a SQL source runs; else what is refused and why (``dialect`` writes the SQL shown)."""
    try:
        read_window(node, dialect)
    except WindowRefused as refused:
        return refused.part, refused.why
    return None


def read_window(node: exp.Window, dialect: object) -> SqlWindow:
    """``node`` in the window step's terms.

    Raises
    ------
    WindowRefused
        The window has no counterpart in the window step, or SQL gives it no defined meaning here.
    """
    func = node.this
    text = node.sql(dialect=dialect)
    shown = f"window '{text if len(text) <= 120 else text[:117] + '...'}' is not run"
    if isinstance(func, (exp.IgnoreNulls, exp.RespectNulls)):
        ignore = isinstance(func, exp.IgnoreNulls)
        raise WindowRefused(shown, ": IGNORE NULLS is not run: FIRST_VALUE and LAST_VALUE take the frame's first or last row, null or "
                                   "not (filter the nulls out in a CTE first)" if ignore else ": write it without RESPECT NULLS, the default")
    name = STEP_FUNCS.get(type(func))
    if name is None:
        raise WindowRefused(f"window function {func.sql(dialect=dialect)[:40]} OVER (…) is not run",
                            ": a SQL window runs row_number, rank, dense_rank, ntile, percent_rank, cume_dist, lag, lead, "
                            "and count, sum, avg, min, max, first_value and last_value over the partition, running or rolling")
    if isinstance(func.this, exp.Distinct):
        raise WindowRefused(shown, ": DISTINCT inside a window aggregate is not run")
    ordered, frame = node.args.get("order"), node.args.get("spec")
    if not ordered:
        if frame:
            raise WindowRefused(shown, ": a frame without ORDER BY inside OVER; drop the frame for a total over the partition")
        if name not in ("count", "sum", "mean", "min", "max"):
            raise WindowRefused(shown, f": {name} needs ORDER BY inside OVER")
        return SqlWindow(func=name, frame="partition")
    if name == "ntile":
        return SqlWindow(func=name, buckets=_buckets(func, shown))
    if name in NUMBERING:
        return SqlWindow(func=name)  # SQL ignores a frame here
    if name in ("lag", "lead"):
        return SqlWindow(func=name, offset=_offset(func, shown))
    return _aggregate(name, frame, shown)


def _offset(func: exp.Expression, shown: str) -> int:
    offset = func.args.get("offset")
    if offset is None:
        return 1
    if isinstance(offset, exp.Literal) and offset.is_int and 1 <= int(offset.this) <= MAX_OFFSET:
        return int(offset.this)
    raise WindowRefused(shown, f": the offset of LAG and LEAD must be an integer literal from 1 to {MAX_OFFSET}")


def _buckets(func: exp.Expression, shown: str) -> int:
    count = func.this
    if isinstance(count, exp.Literal) and count.is_int and 1 <= int(count.this) <= MAX_BUCKETS:
        return int(count.this)
    raise WindowRefused(shown, f": NTILE's bucket count must be an integer literal from 1 to {MAX_BUCKETS}")


def _bound(value: object) -> str:
    return (value.sql() if isinstance(value, exp.Expression) else str(value or "")).upper()


def _rows(value: object, limit: int) -> int | None:
    """A frame bound's row count: an integer literal from 1 to ``limit``, else None."""
    if isinstance(value, exp.Literal) and value.is_int and 1 <= int(value.this) <= limit:
        return int(value.this)
    return None


def _aggregate(name: str, frame: exp.Expression | None, shown: str) -> SqlWindow:
    """An ordered aggregate's frame: SQL's default (RANGE, peers share a total) or one the window step has."""
    if frame is None:
        return SqlWindow(func=name, frame="running", peers=True)
    kind, start, side = _bound(frame.args.get("kind")), _bound(frame.args.get("start")), _bound(frame.args.get("start_side"))
    end, end_side = _bound(frame.args.get("end")) or "CURRENT ROW", _bound(frame.args.get("end_side"))
    refused = WindowRefused(shown, f": its frame has no counterpart in the window step; frames that run: {_FRAMES_RUN}")
    if frame.args.get("exclude") is not None or kind not in ("ROWS", "RANGE") or (side != "PRECEDING" and start != "CURRENT ROW"):
        raise refused
    if start == "UNBOUNDED" and end == "UNBOUNDED" and end_side == "FOLLOWING":
        return SqlWindow(func=name, frame="partition")
    following = None
    if end != "CURRENT ROW":  # n FOLLOWING: ROWS frames only
        following = _rows(frame.args.get("end"), MAX_PRECEDING) if kind == "ROWS" and end_side == "FOLLOWING" else None
        if following is None or start == "UNBOUNDED":
            raise refused
    if start == "UNBOUNDED":
        return SqlWindow(func=name, frame="running", peers=kind == "RANGE")
    preceding = 0 if start == "CURRENT ROW" else _rows(frame.args.get("start"), MAX_PRECEDING)
    if kind == "ROWS" and preceding is not None:
        return SqlWindow(func=name, frame="rolling", preceding=preceding, following=following)
    raise refused
