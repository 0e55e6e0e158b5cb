"""A SELECT with ordered windows, run in three parts so that its windows give SQL's answers.

Polars' SQL answers ordered windows differently from PostgreSQL and DuckDB (:mod:`jobs.sql_windows`),
so each SELECT that has one is split, on the checked and regenerated tree, into

1. an *inner* SELECT without windows: the same ``FROM``, ``WHERE``, ``GROUP BY`` and ``HAVING``
   (windows are evaluated after them), whose outputs are, as named columns, every window's
   argument, partition keys and order keys, and each part of the select list and ``ORDER BY``
   outside the windows that reads the rows;
2. the windows, computed on the inner query's LazyFrame by the window step's own lowering
   (:func:`jobs.window_polars.window_columns`: the same Polars expressions and rules), with SQL's
   ``RANGE`` frame where SQL has it (tied rows share the running value of the last of them);
3. an *outer* SELECT over that frame with the rest: the select list with each window replaced by
   its column, ``DISTINCT``, ``ORDER BY``, ``LIMIT`` and ``OFFSET``.

SELECTs are split innermost first (a CTE before the CTEs and the query that read it); each split
SELECT's windowed frame is registered as a table and the SELECT replaced by its outer part, so
the query Polars finally runs has no ordered window left. Only the regenerated tree is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from spillway.jobs.polars_rows import with_row_numbers
from spillway.jobs.spec import SortKey, WindowColumn, WindowStep
from spillway.jobs.sql_windows import NUMBERING, SqlWindow, WindowRefused, is_ordered, read_window
from spillway.jobs.window_polars import window_columns

#: The dialect the regenerated SQL is read and written in (jobs.sql_rewrite.OUTPUT_DIALECT).
DIALECT = "postgres"
_PREFIX = "__spillway_w"
# Nodes that read the rows: a part of an expression holding none of them is a constant the outer query keeps.
_READS_ROWS = (exp.Column, exp.Star, exp.AggFunc, exp.Subquery, exp.Query, exp.Window)


OrderKey = tuple[str, bool, bool]  # an inner column, descending, nulls first
Keys = tuple[tuple[str, ...], tuple[OrderKey, ...]]  # a window's partition columns and order keys


def owned_windows(select: exp.Select) -> list[exp.Window]:
    """The windows evaluated by ``select`` itself (not by a query nested in it)."""
    return [node for node in select.find_all(exp.Window) if node.parent_select is select and node.arg_key != "windows"]


def has_ordered_windows(tree: exp.Expression) -> bool:
    """Whether any SELECT of ``tree`` has a window Polars' SQL would answer differently."""
    return any(is_ordered(node) for node in tree.find_all(exp.Window))


def _post_order(tree: exp.Expression) -> list[exp.Select]:
    """The SELECTs of ``tree``, each after those nested in it, CTEs before the queries that read them
    (iteratively: a query may nest hundreds deep)."""
    order: list[exp.Select] = []
    stack: list[tuple[exp.Expression, bool]] = [(tree, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            if isinstance(node, exp.Select):
                order.append(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(list(node.iter_expressions())))
    return order


@dataclass(frozen=True)
class _Window:
    """A window of the split SELECT: what it computes, over which inner columns, into which column."""

    column: WindowColumn
    keys: Keys
    name: str
    peers: bool = False
    node: exp.Window | None = None  # None for the outer query's helpers


@dataclass
class _Split:
    """One SELECT's split: the inner query's named outputs and the windows computed over them."""

    outputs: dict[str, str] = field(default_factory=dict)  # the SQL of an inner expression → its column
    inner: list[exp.Expression] = field(default_factory=list)
    windows: dict[str, _Window] = field(default_factory=dict)  # by the window's SQL (or a helper's description)
    numbers: Iterator[int] = field(default_factory=itertools.count)

    def fresh(self) -> str:
        return f"{_PREFIX}{next(self.numbers)}"

    def column(self, node: exp.Expression) -> str:
        """The inner query's column holding ``node`` (one column per distinct expression)."""
        key = node.sql(dialect=DIALECT)
        if key not in self.outputs:
            self.outputs[key] = self.fresh()
            self.inner.append(exp.alias_(node.copy(), exp.to_identifier(self.outputs[key], quoted=True)))
        return self.outputs[key]

    def window(self, node: exp.Window) -> exp.Expression:
        """The outer query's expression for the window ``node``: its column, or for LAG and LEAD with a
        default, ``CASE`` on whether a row lies ``offset`` rows away (the default may be any expression)."""
        key = node.sql(dialect=DIALECT)
        shape = read_window(node, DIALECT)
        if key not in self.windows:
            self.windows[key] = _Window(self.step_column(node, shape), self.keys(node), self.fresh(), shape.peers, node)
        value: exp.Expression = exp.column(self.windows[key].name, quoted=True)
        default = node.this.args.get("default") if shape.func in ("lag", "lead") else None
        if default is None or isinstance(default, exp.Null):
            return value
        partition, order = self.windows[key].keys
        numbered = self.helper((partition, order), WindowColumn(func="row_number"))
        if shape.func == "lag":
            exists: exp.Expression = exp.GT(this=numbered, expression=exp.Literal.number(shape.offset))
        else:
            rows = self.helper((partition, ()), WindowColumn(func="count", column=self.column(exp.Literal.number(1))))
            exists = exp.LTE(this=exp.Add(this=numbered, expression=exp.Literal.number(shape.offset)), expression=rows)
        return exp.Case(ifs=[exp.If(this=exists, true=value)], default=self.outer(default.copy()))

    def step_column(self, node: exp.Window, shape: SqlWindow) -> WindowColumn:
        """The window step's column for ``node``, its argument an inner column (``COUNT(*)``: of a constant)."""
        argument = None if shape.func in NUMBERING else node.this.this
        source = None if argument is None else self.column(exp.Literal.number(1) if isinstance(argument, exp.Star) else argument)
        offset = shape.offset if shape.func in ("lag", "lead") else None
        return WindowColumn(func=shape.func, column=source, offset=offset, frame=shape.frame, preceding=shape.preceding,  # type: ignore[arg-type]
                            following=shape.following, buckets=shape.buckets)

    def helper(self, keys: Keys, column: WindowColumn) -> exp.Column:
        """A window of the outer query's own (a row number, a partition's size), computed once per keys."""
        key = repr((keys, column))
        if key not in self.windows:
            self.windows[key] = _Window(column, keys, self.fresh())
        return exp.column(self.windows[key].name, quoted=True)

    def keys(self, node: exp.Window) -> Keys:
        partition = tuple(self.column(key) for key in node.args.get("partition_by") or [])
        order = tuple((self.column(key.this), bool(key.args.get("desc")), bool(key.args.get("nulls_first")))
                      for key in (node.args["order"].expressions if node.args.get("order") else []))
        return partition, order

    def outer(self, node: exp.Expression, aliases: frozenset[str] = frozenset()) -> exp.Expression:
        """``node`` as the outer query computes it: windows by their columns, each part that reads the
        rows by an inner column; an unqualified column named in ``aliases`` is an output of the outer query."""
        if isinstance(node, exp.Window):
            return self.window(node)
        if isinstance(node, exp.Column) and not node.table and node.name in aliases:
            return node
        if not any(isinstance(part, exp.Window) or (isinstance(part, exp.Column) and not part.table and part.name in aliases)
                   for part in node.walk(prune=lambda part: isinstance(part, exp.Query))):
            return exp.column(self.column(node), quoted=True) if any(isinstance(p, _READS_ROWS) for p in node.walk()) else node
        for child in list(node.iter_expressions()):
            rewritten = self.outer(child, aliases)
            if rewritten is not child:
                child.replace(rewritten)
        return node


def _ctes_in_view(select: exp.Select) -> list[exp.CTE]:
    """The CTEs ``select`` may read from the queries around it: each enclosing WITH's, up to its own CTE."""
    found: list[exp.CTE] = []
    child: exp.Expression = select
    node = select.parent
    while node is not None:
        if isinstance(node, exp.With):
            found[:0] = node.expressions[:child.index or 0] if isinstance(child, exp.CTE) else []
        elif isinstance(node.args.get("with_"), exp.With) and child is not node.args["with_"]:
            found[:0] = node.args["with_"].expressions
        child, node = node, node.parent
    return found


def _inner_query(select: exp.Select, split: _Split) -> exp.Select:
    inner = select.copy()
    for clause in ("distinct", "order", "limit", "offset", "windows"):
        inner.set(clause, None)
    inner.set("expressions", split.inner)
    ctes = [*_ctes_in_view(select), *(select.args["with_"].expressions if select.args.get("with_") else [])]
    inner.set("with_", exp.With(expressions=[cte.copy() for cte in ctes]) if ctes else None)
    return inner


def _with_windows(frame: pl.LazyFrame, split: _Split) -> pl.LazyFrame:
    """``frame`` with every window's column: one window step per partition and order."""
    schema = frame.collect_schema()
    for window in split.windows.values():
        if window.node is not None and window.column.column is not None:
            _check_kind(window.node, window, schema[window.column.column])
    steps: dict[Keys, list[_Window]] = {}
    for window in split.windows.values():
        steps.setdefault(window.keys, []).append(window)
    for (partition, order), windows in steps.items():
        frame, sort_keys = _null_placement(frame, order)
        step = WindowStep(op="window", partition_by=list(partition), order_by=sort_keys, columns={w.name: w.column for w in windows})
        inputs = {w.name: _decimal_input(w.column, schema[w.column.column]) for w in windows if w.column.column is not None}
        frame = window_columns(frame, step, inputs)
        peers = [*partition, *(key.column for key in sort_keys)]
        frame = _share_among_peers(frame, peers, [w.name for w in windows if w.peers])
        exact = {w.name: _decimal_output(w.column, schema[w.column.column]) for w in windows if w.column.column is not None}
        frame = frame.with_columns(pl.col(name).cast(dtype) for name, dtype in exact.items() if dtype is not None)
    return frame


def _decimal_input(column: WindowColumn, dtype: pl.DataType) -> pl.Expr:
    """A window's input; of a decimal, a float where Polars has no decimal form: ``AVG`` (a double, as
    DuckDB's AVG of a decimal) and the rolling ``SUM``, ``MIN`` and ``MAX`` (cast back after)."""
    value = pl.col(column.column or "")
    if isinstance(dtype, pl.Decimal) and (column.func == "mean" or (column.frame == "rolling" and column.func != "count")):
        return value.cast(pl.Float64)
    return value


def _decimal_output(column: WindowColumn, dtype: pl.DataType) -> pl.DataType | None:
    """The decimal type a rolling aggregate of a decimal, computed in floats, is given back: exact where
    the sum has at most 15 significant digits (SUM's precision is 38, as Polars' SQL gives it)."""
    if not (isinstance(dtype, pl.Decimal) and column.frame == "rolling" and column.func in ("sum", "min", "max")):
        return None
    return pl.Decimal(38, dtype.scale) if column.func == "sum" else dtype


def _check_kind(node: exp.Window, window: _Window, dtype: pl.DataType) -> None:
    """SUM and AVG take numbers, a running or rolling MIN and MAX numbers or dates (the window step's rule)."""
    func, frame = window.column.func, window.column.frame
    if func in ("sum", "mean") and not dtype.is_numeric():
        takes = "numbers"
    elif func in ("min", "max") and frame in ("running", "rolling") and not (dtype.is_numeric() or dtype.is_temporal()):
        takes = "numbers or dates over a running or rolling frame"
    else:
        return
    raise WindowRefused(f"window '{node.sql(dialect=DIALECT)[:120]}' is not run",
                        f": {node.this.sql_name().upper()} takes {takes}, not {dtype}")


def _null_placement(frame: pl.LazyFrame, order: tuple[OrderKey, ...]) -> tuple[pl.LazyFrame, list[SortKey]]:
    """The window step's sort keys for SQL's: it puts nulls last, so a key whose nulls come first is
    preceded by whether it is null (false first), a key of its own that the step sorts ascending."""
    keys: list[SortKey] = []
    for column, descending, nulls_first in order:
        if nulls_first:
            flag = f"{column}_nulls_first"
            frame = frame.with_columns(pl.col(column).is_not_null().alias(flag))
            keys.append(SortKey(column=flag))
        keys.append(SortKey(column=column, descending=descending))
    return frame, keys


def _share_among_peers(frame: pl.LazyFrame, peers: list[str], columns: list[str]) -> pl.LazyFrame:
    """SQL's default frame for an ordered aggregate is ``RANGE``: rows with equal order keys (peers)
    share the running value of the last of them. The step computed a ``ROWS`` running value on the
    frame in its order, which the next expressions still see: each row takes the value of its peers'
    last row, found by row position (one ``max`` over the peers each; a position counted within
    the peers was three times slower on 2 M rows in 100,000 peer groups)."""
    if not columns:
        return frame
    position, last = f"{_PREFIX}position", f"{_PREFIX}last"
    frame = with_row_numbers(frame, position)
    frame = frame.with_columns((pl.col(position) == pl.col(position).max().over(peers)).alias(last))
    shared = [pl.when(pl.col(last)).then(pl.col(name)).max().over(peers).alias(name) for name in columns]
    return frame.with_columns(shared).drop(position, last)


def _refuse_correlated(select: exp.Select) -> None:
    """The inner query runs on its own: a SELECT with windows must not read the columns of a query around it."""
    for scope in traverse_scope(select.root()):
        if scope.expression is select and scope.external_columns:
            column = scope.external_columns[0].sql(dialect=DIALECT)
            raise WindowRefused(f"a window in a subquery that reads {column} of the query around it is not run",
                                ": compute the window in a CTE or derived table, then join it")


def split_select(select: exp.Select, context: pl.SQLContext, table: str) -> exp.Select:
    """Register ``select``'s windowed frame as ``table`` in ``context``; the outer SELECT that reads it."""
    _refuse_correlated(select)
    split = _Split()
    projections = []
    for projection in select.expressions:
        name = projection.alias_or_name
        body = projection.this if isinstance(projection, exp.Alias) else projection
        projections.append(exp.alias_(split.outer(body.copy()), exp.to_identifier(name, quoted=True)))
    aliases = frozenset(projection.alias_or_name for projection in select.expressions)
    order = select.args.get("order")
    if order is not None:
        order = order.copy()
        for key in order.expressions:
            key.set("this", split.outer(key.this, aliases))
    inner = _inner_query(select, split)
    frame = context.execute(inner.sql(dialect=DIALECT), eager=False)
    context.register(table, _with_windows(frame, split))
    outer = exp.select(*projections).from_(exp.to_table(table, quoted=True))
    for clause in ("distinct", "limit", "offset"):
        outer.set(clause, select.args.get(clause).copy() if select.args.get(clause) else None)
    outer.set("order", order)
    return outer


def run_windowed(tree: exp.Query, context: pl.SQLContext) -> pl.LazyFrame:
    """The LazyFrame of ``tree`` (checked and regenerated SQL, read back) over ``context``'s tables,
    its ordered windows computed by the window step's lowering."""
    tree = tree.copy()
    taken = set(context.tables())
    names = (name for name in (f"__spillway_window_{n}" for n in itertools.count()) if name not in taken)
    for select in _post_order(tree):
        if not any(is_ordered(node) for node in owned_windows(select)):
            continue
        outer = split_select(select, context, next(names))
        if select is tree:
            tree = outer
        else:
            select.replace(outer)
    return context.execute(tree.sql(dialect=DIALECT), eager=False)
