"""SQL forms Polars' SQL answers differently from SQL, rewritten to forms it answers right, or refused.

Each was found by a differential run against DuckDB (polars 1.44; cases in tests/test_sql_polars_forms.py):

- ``LENGTH`` is a uint32 and ``EXTRACT`` an int8 in Polars, so ``LENGTH(s) - 3`` was 4294967295 for ``'ab'``
  and ``EXTRACT(MONTH FROM d) * 100`` -80 for December: both are cast to BIGINT, SQL's room to spare. A
  ``SUM`` of a value cast to ``INT``/``SMALLINT`` stays 32-bit in Polars and wraps; SQL sums it in bigint.
- ``RIGHT(s, n)`` for ``len(s) < n < 2·len(s)`` took too few characters (``RIGHT('hello', 8)``: ``'llo'``), and
  ``LEFT``/``RIGHT`` of a null by 0 gave ``''``: guarded with ``CASE``.
- ``REPLACE(s, '', x)`` put ``x`` between every character; SQL leaves ``s`` as it is.
- ``SELECT SUM(i) OVER () FROM t`` (no column outside a window) gave one row, not one a row; ``SUM(SUM(i)) OVER ()``
  after ``GROUP BY`` each group's own sum, not the total (a list with ``PARTITION BY``): refused (ordered windows,
  which :mod:`jobs.sql_window_run` computes, are right).
- A correlated scalar subquery whose value is computed from an aggregate (``(SELECT COUNT(*) + 1 …)``,
  ``COALESCE(SUM(x), 0)``) was null for an outer row with no match (SQL computes it over no rows); one with
  ``ORDER BY``/``LIMIT`` ignored them; ``x IN (subquery)`` in a select list was false where SQL gives null: refused.
- A join whose ``ON`` is only an equality of one side's column with a literal (``t JOIN u ON u.k = 1``) was
  applied to the left table's column of that name: refused (write it in ``WHERE`` or a subquery).
- ``COVAR_SAMP`` of one pair and ``COVAR_POP`` of none were 0; SQL's are null (``n - 1 = 0``, ``n = 0``).
- ``COUNT(*)`` and ``COUNT(x)`` are Polars' row counts, uint32: cudf-polars' streaming executors sum a group's
  partial counts in that type, so a group of over 4,294,967,295 rows was counted modulo 2^32 (seen on an H100:
  883,414,071 for 48,128,054,327 rows). Under GROUP BY both become sums of a BIGINT 0/1 of a column, as the step
  language counts, where the SELECT's first source has a column known here (a table, a CTE, a subquery).
- A constant key in an aggregate's ``ORDER BY`` (``STRING_AGG(s, ',' ORDER BY s, 2)``: in an aggregate ``2`` is the
  number, not a position) failed at run time (a ShapeError); it orders nothing, so it is dropped.
- ``POWER(i, -1)`` of an integer failed at run time (Polars takes a negative integer exponent as unsigned) and
  ``POWER(i, 40)`` wrapped; SQL's ``power`` of integers is a double precision: the base is made a float.
- ``CAST(ts AS VARCHAR)`` of a timestamp column wrote six fractional digits (``2020-01-01 00:00:00.000000``); SQL
  writes the fraction only where there is one, without its trailing zeros (``2020-01-01 00:00:00``, ``… 13:45:30.5``).

The later ones were checked against PostgreSQL too (bench/sql_differential/pg_referee.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from spillway.jobs.sql_scopes import is_a_value

_BIGINT = exp.DataType.build("BIGINT")
_NARROW = (exp.DataType.Type.INT, exp.DataType.Type.SMALLINT)
#: What can make a value of a null (an aggregate over no rows).
_NOT_NULL_FROM_NULL = (exp.Coalesce, exp.Case, exp.If, exp.Is, exp.Greatest, exp.Least, exp.Nullif)


def _bigint(node: exp.Expression) -> exp.Expression:
    return exp.Cast(this=node, to=_BIGINT.copy())


def wide_integers(tree: exp.Expression) -> None:
    """``LENGTH`` and ``EXTRACT`` as BIGINT; a ``SUM`` of an ``INT``/``SMALLINT`` cast summed as BIGINT."""
    for node in list(tree.find_all(exp.Length, exp.Extract)):
        if not (isinstance(node.parent, exp.Cast) and node.parent.to.this == exp.DataType.Type.BIGINT):
            node.replace(_bigint(node.copy()))
    for total in list(tree.find_all(exp.Sum)):
        value = total.this
        if _narrow(value):
            value.replace(_bigint(value.copy()))


def _narrow(node: exp.Expression) -> bool:
    """A cast to INT or SMALLINT, maybe in parentheses or as every branch of a CASE (how integer casts round)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Case):
        branches = [branch.args.get("true") for branch in node.args.get("ifs") or []] + [node.args.get("default")]
        return all(branch is not None and _narrow(branch) for branch in branches)
    return isinstance(node, exp.Cast) and node.to.this in _NARROW


def null_covariances(tree: exp.Expression) -> None:
    """``COVAR_SAMP`` of fewer than two pairs and ``COVAR_POP`` of none as null, as SQL has them (Polars: 0).

    Windows of them are refused: jobs/sql_windows.py."""
    for covar in list(tree.find_all(exp.CovarSamp, exp.CovarPop)):
        a, b = covar.this, covar.expression
        pairs = exp.Count(this=exp.Case(ifs=[exp.If(this=exp.and_(exp.Not(this=exp.Is(this=a.copy(), expression=exp.Null())),
                                                                   exp.Not(this=exp.Is(this=b.copy(), expression=exp.Null()))),
                                                    true=exp.Literal.number(1))]))
        fewest = exp.Literal.number(1 if isinstance(covar, exp.CovarSamp) else 0)
        covar.replace(exp.Case(ifs=[exp.If(this=exp.GT(this=pairs, expression=fewest), true=covar.copy())]))


#: SQL types a row count reads cheaply to tell a row is there (a string column would be decoded for it).
_CHEAP_TYPES = ("BIGINT", "INT", "INTEGER", "SMALLINT", "DOUBLE", "REAL", "FLOAT", "DATE", "BOOLEAN", "TIMESTAMP")


def scalar_counts(tree: exp.Expression) -> None:
    """A scalar subquery that is one ``COUNT`` (no GROUP BY) as ``COALESCE((subquery), 0)``: SQL's count over no rows is
    0, and Polars' own plan of a correlated one (``(SELECT count(*) FROM u WHERE u.k > t.x)``, which sqlglot cannot make
    a join) gave null for the rows that matched none (a helper's hostile run, 2026-12-06)."""
    for subquery in list(tree.find_all(exp.Subquery)):
        select = subquery.this
        scalar = is_a_value(subquery) and not isinstance(subquery.parent, (exp.In, exp.Exists))
        if not scalar or not isinstance(select, exp.Select) or select.args.get("group"):
            continue
        projection = select.expressions[0] if len(select.expressions) == 1 else None
        value = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(value, exp.Count):
            name = subquery.alias  # an output name the subquery carries (an unnamed one is named by its text): the COALESCE's
            inner = subquery.copy()
            inner.set("alias", None)
            coalesce = exp.Coalesce(this=inner, expressions=[exp.Literal.number(0)])
            subquery.replace(exp.alias_(coalesce, name, quoted=True) if name else coalesce)


def wide_counts(tree: exp.Expression, tables: Mapping[str, Mapping[str, str]]) -> None:
    """In a SELECT with GROUP BY, ``COUNT(x)`` as ``SUM(CAST(x IS NOT NULL AS BIGINT))`` and ``COUNT(*)`` as such a sum
    of a 1 for every row.

    The 1 is ``CAST(c IS NULL AS BIGINT) + CAST(c IS NOT NULL AS BIGINT)`` of a column ``c`` of the first source the
    count's SELECT reads (Polars sums a literal once per group, not once per row); where that source has no column
    known here, the count stays as written. A group is never empty, so the sum is never SQL's null of no rows. Counts
    with no GROUP BY stay as written: over no rows the sum is null where a count is 0, and the ``COALESCE(…, 0)`` that
    would mend it trips Polars 1.44's common-subexpression elimination inside ``NULLIF``/``CASE`` (``SUM(x) /
    NULLIF(COALESCE(SUM(…), 0), 0)`` gave no row over no rows and one row a row otherwise). ``COUNT(DISTINCT …)`` and
    counts in windows stay as written too.
    """
    for count in list(tree.find_all(exp.Count)):
        if isinstance(count.parent, exp.Window) or isinstance(count.this, exp.Distinct) or isinstance(count.this, exp.Null):
            continue
        select = count.find_ancestor(exp.Select)
        if select is None or not select.args.get("group"):
            continue
        # COUNT(1), COUNT('a'): a value never null, on every row, counts the rows.
        if isinstance(count.this, exp.Star) or count.this.find(exp.Column) is None:
            column = _row_column(select, tables)
            if column is None:
                continue
            present = exp.Add(this=_bigint(exp.Paren(this=exp.Is(this=column, expression=exp.Null()))),
                              expression=_bigint(exp.Paren(this=exp.Not(this=exp.Is(this=column.copy(), expression=exp.Null())))))
        else:
            present = _bigint(exp.Paren(this=exp.Not(this=exp.Is(this=exp.Paren(this=count.this.copy()), expression=exp.Null()))))
        # Every projection has its alias by now (qualify names them), so the sum keeps the count's name.
        count.replace(exp.Sum(this=present))


def _row_column(select: exp.Select, tables: Mapping[str, Mapping[str, str]]) -> exp.Column | None:
    """A column of the first source ``select`` reads, qualified by its alias: one the query reads anyway, or a cheap one."""
    source = select.args.get("from_")
    source = source.this if isinstance(source, exp.From) else None
    if isinstance(source, exp.Table) and (cte := _cte(select, source.name)) is not None:
        columns = _output_names(cte.this)  # a CTE shadows a source of its name
    elif isinstance(source, exp.Table) and source.name in tables:
        columns = dict(tables[source.name])
    elif isinstance(source, exp.Subquery):
        columns = _output_names(source.this)
    else:
        return None
    if not columns or not isinstance(source, (exp.Table, exp.Subquery)):
        return None
    alias = source.alias_or_name
    read = [c.name for c in select.find_all(exp.Column) if c.table == alias and c.name in columns]
    cheap = [name for name, kind in columns.items() if kind.upper().startswith(_CHEAP_TYPES)]
    chosen = next((name for name in read if name in cheap), None) or (read[0] if read else None) or (cheap[0] if cheap else next(iter(columns)))
    return exp.column(exp.to_identifier(chosen, quoted=True), table=exp.to_identifier(alias, quoted=True))


def _cte(node: exp.Expression, name: str) -> exp.CTE | None:
    """The CTE called ``name`` that ``node`` sees: the nearest enclosing ``WITH`` that defines it."""
    scope: exp.Expression | None = node
    while scope is not None:
        with_ = scope.args.get("with_")
        if isinstance(with_, exp.With):
            for cte in with_.expressions:
                if cte.alias_or_name == name:
                    return cte
        scope = scope.parent
    return None


def _output_names(query: exp.Expression) -> dict[str, str]:
    """A query's output columns (a set operation's are its first branch's), their types unknown here."""
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.this
    if not isinstance(query, exp.Select):
        return {}
    return {projection.alias_or_name: "" for projection in query.expressions if projection.alias_or_name and not isinstance(projection, exp.Star)}


def aggregate_order_constants(tree: exp.Expression) -> None:
    """Drop the keys of an aggregate's ``ORDER BY`` that read no column (the ``ORDER BY`` too, when none is left)."""
    for order in list(tree.find_all(exp.Order)):
        if not isinstance(order.parent, exp.AggFunc) or order.this is None:
            continue
        keys = [key for key in order.expressions if key.find(exp.Column, exp.Subquery) is not None]
        if not keys:
            order.replace(order.this)
        elif len(keys) < len(order.expressions):
            order.set("expressions", keys)


def float_powers(tree: exp.Expression) -> None:
    """``POWER(x, y)`` (and ``x ^ y``) as ``POWER(x * 1.0, y)``: SQL's power of integers is a double.

    A product, not a cast: a cast would also turn text or a timestamp into a number, where Polars refuses a product of
    them at submit, as PostgreSQL refuses their power."""
    for power in list(tree.find_all(exp.Pow)):
        power.set("this", exp.Paren(this=exp.Mul(this=exp.Paren(this=power.this.copy()), expression=exp.Literal.number("1.0"))))


_TEXT_TYPES = (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT)


def timestamp_text(tree: exp.Expression, tables: Mapping[str, Mapping[str, str]]) -> None:
    """``CAST(c AS VARCHAR)`` (or ``TEXT``) of a timestamp column as SQL writes it: the fraction only where it is not
    zero, without trailing zeros. A date has no ``.`` and stays as it is; so does anything not known to be a column
    of a source's timestamps (its table named once in the query, so its alias is unambiguous)."""
    aliases: dict[str, set[str]] = {}
    for table in tree.find_all(exp.Table):
        aliases.setdefault(table.alias_or_name, set()).add(table.name)
    for cast in list(tree.find_all(exp.Cast)):
        column = cast.this
        if cast.to.this not in _TEXT_TYPES or cast.to.expressions or not isinstance(column, exp.Column):
            continue
        names = aliases.get(column.table, set())
        if len(names) != 1 or tables.get(next(iter(names)), {}).get(column.name) != "TIMESTAMP":
            continue
        text = cast.copy()
        trimmed = exp.Anonymous(this="RTRIM", expressions=[exp.Anonymous(this="RTRIM", expressions=[text.copy(), exp.Literal.string("0")]),
                                                           exp.Literal.string(".")])
        cast.replace(exp.Case(ifs=[exp.If(this=exp.Like(this=text.copy(), expression=exp.Literal.string("%.%")), true=trimmed)],
                              default=text))


def guarded_string_ends(tree: exp.Expression) -> None:
    """``LEFT``/``RIGHT`` null for a null string; ``RIGHT`` the whole string when it is no longer than asked;
    ``REPLACE`` of an empty literal pattern the string itself."""
    for node in reversed(list(tree.find_all(exp.Left, exp.Right))):  # innermost first: an outer one copies the inner
        text, count = node.this, node.expression
        ifs = [exp.If(this=exp.Is(this=text.copy(), expression=exp.Null()), true=exp.Null())]
        if isinstance(node, exp.Right):
            ifs.append(exp.If(this=exp.LTE(this=exp.Length(this=text.copy()), expression=count.copy()), true=text.copy()))
        node.replace(exp.Case(ifs=ifs, default=node.copy()))
    for replace in list(tree.find_all(exp.Replace)):
        pattern = replace.expression
        if isinstance(pattern, exp.Literal) and pattern.is_string and pattern.this == "":
            replace.replace(exp.Paren(this=replace.this.copy()))


def literal_only_join(select: exp.Select) -> exp.Join | None:
    """The first join of ``select`` whose ``ON`` relates no column of one side to the other's but holds an equality
    with a literal (which Polars applies to the wrong table); None if there is none. Tables must be qualified."""
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        if on is None:
            continue
        conditions = list(on.flatten()) if isinstance(on, exp.And) else [on]
        relates = any(len({column.table for column in condition.find_all(exp.Column)}) > 1 for condition in conditions)
        with_literal = any(isinstance(condition, exp.EQ) and any(isinstance(side, exp.Literal) for side in (condition.left, condition.right))
                           for condition in conditions)
        if with_literal and not relates:
            return join
    return None


def unordered_window_problem(select: exp.Select) -> tuple[exp.Expression, str] | None:
    """A window without ``ORDER BY`` in ``select`` that Polars' SQL answers wrongly, and what to write; None if none."""
    windows = [window for expression in select.expressions for window in expression.find_all(exp.Window) if window.parent_select is select]
    if any(window.args.get("order") for window in windows):
        return None  # jobs/sql_window_run.py computes every window of this SELECT with the window step: right
    # Only aggregates over the whole partition: the other windows without ORDER BY are refused by jobs/sql_windows.py.
    windows = [window for window in windows if isinstance(window.this, exp.AggFunc) and not window.args.get("spec")]
    for window in windows:
        # In a grouped SELECT the window is of the groups, even over COUNT(*): Polars counted each group's rows (4, 2, 1 …
        # where DuckDB gives the number of groups, a helper's hostile run).
        if select.args.get("group") or any(argument.find(exp.AggFunc) is not None for argument in window.this.iter_expressions()):
            return window, (": a window over an aggregate, or in a SELECT with GROUP BY, without ORDER BY is not run (Polars' SQL "
                            "gives each group its own value); compute the groups in a CTE, then the window over it, or order the window")
    whole_table = [window for window in windows if not window.args.get("partition_by")]
    reads_rows = any(column.find_ancestor(exp.Window) is None for expression in select.expressions for column in expression.find_all(exp.Column))
    if whole_table and not reads_rows and not select.args.get("group"):
        return whole_table[0], (": with no column outside a window in the select list, Polars' SQL gives one row for the whole "
                                "table; select a column of it too")
    return None


def _inside_an_aggregate(select: exp.Select) -> bool:
    """Whether the subquery ``select`` stands inside an aggregate's argument of its enclosing select."""
    aggregate = select.parent.find_ancestor(exp.AggFunc, exp.Select) if select.parent is not None else None
    return isinstance(aggregate, exp.AggFunc)


def _one_row(select: exp.Select) -> bool:
    """Whether ``select`` gives one row whatever it reads: one aggregate, no GROUP BY (nor HAVING, LIMIT, OFFSET)."""
    values = [value.unalias() for value in select.expressions]
    return (len(values) == 1 and isinstance(values[0], exp.AggFunc) and not select.args.get("group")
            and not any(select.args.get(arg) for arg in ("having", "limit", "offset")))


def subquery_problem(tree: exp.Expression) -> tuple[exp.Expression, str] | None:
    """A subquery of the qualified ``tree`` that Polars' SQL (after sqlglot's decorrelation) answers wrongly, and what to
    write instead; None if there is none."""
    for scope in traverse_scope(tree):
        select = scope.expression
        if not isinstance(select, exp.Select) or not scope.is_subquery:
            continue
        within = select.parent.parent if isinstance(select.parent, exp.Subquery) else select.parent
        if _inside_an_aggregate(select) and (scope.is_correlated_subquery or isinstance(within, (exp.Exists, exp.In)) or not _one_row(select)):
            # Made a join below the aggregate, it repeats or drops the rows aggregated: COUNT(*) FILTER (WHERE EXISTS
            # (SELECT 1 FROM u …)) counted each row once per row of u (a helper's hostile run, 2026-12-06).
            return select.parent, (": a subquery inside an aggregate's argument or FILTER is not run (the join it becomes "
                                   "repeats or drops the aggregated rows), except a scalar aggregate of no outer column; "
                                   "compute it in a CTE, join that, then aggregate")
        if isinstance(within, exp.In) and within.find_ancestor(exp.Where, exp.Having, exp.Join) is None:
            return within, (": x IN (subquery) outside WHERE and HAVING is not run (it gives false where SQL gives null); "
                            "write it in WHERE, or as a LEFT JOIN of the subquery's distinct values")
        if not scope.is_correlated_subquery or isinstance(within, exp.Exists):
            continue
        if select.args.get("order") or select.args.get("limit"):
            return select, (": a correlated subquery with ORDER BY or LIMIT is not run (its order and limit were ignored); "
                            "rank the rows in a CTE with row_number() OVER (PARTITION BY … ORDER BY …) and join the first")
        values = [value.unalias() for value in select.expressions]
        # Wrong only where the value over no rows is not null: a count, or what turns a null into a value. (A
        # comparison with 0.2 * AVG(x), TPC-H q17's, is null either way.)
        if len(values) == 1 and not isinstance(values[0], exp.AggFunc) and values[0].find(exp.AggFunc) is not None \
                and values[0].find(exp.Count, *_NOT_NULL_FROM_NULL) is not None:
            return select, (": a correlated subquery whose value is computed from an aggregate is not run (it is null where no "
                            "row matches, SQL computes it over no rows); select the bare aggregate and compute the rest outside, "
                            "e.g. COALESCE((SELECT SUM(x) …), 0)")
    return None
