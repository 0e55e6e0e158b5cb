"""A checked SQL tree → the SQL text Polars' SQL front end runs, with SQL's meaning kept.

Polars' SQL (``polars.SQLContext``) takes most of a SELECT but not all of it; these rewrites,
each on the checked tree, bring a query within what it takes without changing its answer:

- every column is qualified with its table and every ``*`` expanded (sqlglot's ``qualify``),
  which also finds unknown columns, named here with the nearest name;
- an ``EXISTS`` correlated by keys and one ``<>`` becomes a join with each key's smallest and
  largest value (:mod:`jobs.sql_exists`), an uncorrelated ``NOT IN (subquery)`` two joins with SQL's
  nulls (:mod:`jobs.sql_not_in`), and a SELECT with one ``COUNT(DISTINCT x)`` beside sums, extremes and counts
  two groupings (:mod:`jobs.sql_distinct_counts`); other correlated and uncorrelated subqueries in
  ``WHERE``/``HAVING`` (``EXISTS``, ``IN``, scalar comparisons) become joins with grouped
  derived tables (sqlglot's ``unnest_subqueries``);
- a ``FROM a, b, c`` list followed by explicit joins becomes inner joins on the ``WHERE``'s
  equalities (Polars binds an explicit join to the list's last table only);
- a ``LEFT JOIN``'s conditions on the right table alone move into a derived table over it, and
  those on the tables before it into a key (``r.k = CASE WHEN cond THEN l.k END``); a ``RIGHT`` or
  ``FULL JOIN``'s conditions on either side alone into that side's key,
  an ``INNER JOIN``'s non-key conditions into ``WHERE`` (Polars' ``ON`` takes key equalities; one of ``OR``-ed
  conditions with no key is a ``CROSS JOIN`` filtered by ``WHERE``);
- a literal compared with an expression is written on the right (``x > 1`` for ``1 < x``: Polars 1.44
  miscounts the rows of ``0 < CASE … END`` after a ``WHERE``);
- ``COVAR_SAMP`` of fewer than two pairs and ``COVAR_POP`` of none are null, as SQL's are (Polars': 0);
- ``LENGTH``/``EXTRACT`` are BIGINT, ``LEFT``/``RIGHT``/``REPLACE`` guarded (:mod:`jobs.sql_polars_forms`);
- ``%`` truncates toward zero, as SQL's does (Polars' floors): ``sign(a) * (abs(a) % abs(b))``;
  ``x IS [NOT] TRUE/FALSE`` is never null (:mod:`jobs.sql_truth`); ``CAST(float AS INT)`` rounds;
- ``DATE '...' ± INTERVAL ...`` of literals is computed now, and date literals are written as typed
  literals Polars reads as constants (:mod:`jobs.sql_dates`; cudf-polars runs neither strptime nor offset_by);
- ``LIKE`` with a literal pattern becomes ``=``, ``starts_with``, ``ends_with`` or a regex without
  Polars' ``(?s)`` flag, which cudf-polars refuses, and a short ``IN`` list of literals ``OR``-ed
  equalities, which cudf-polars fails on (:mod:`jobs.sql_gpu_forms`);
- an output column with no name gets its SQL text as one (``sum(l_quantity)``, as DuckDB);
- ordered windows stay in the text: when it runs, :mod:`jobs.sql_window_run` splits each SELECT that
  has one and computes them with the window step's lowering.

Only the tree is read; the user's text is never handed on.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries

from spillway.jobs.sql_check import DIALECT, SqlRefused, position
from spillway.jobs.sql_dates import fold_date_literals
from spillway.jobs.sql_distinct_counts import distinct_counts_as_two_groupings
from spillway.jobs.sql_exists import and_all, conjuncts, decorrelate_exists
from spillway.jobs.sql_gpu_forms import in_list_as_equalities, like_as_string_functions
from spillway.jobs.sql_groups import grouping_error, key_conditions_to_where
from spillway.jobs.sql_not_in import not_in_as_joins
from spillway.jobs.sql_polars_forms import aggregate_order_constants, float_powers, guarded_string_ends, literal_only_join, null_covariances, scalar_counts, subquery_problem, timestamp_text, wide_counts, wide_integers
from spillway.jobs.sql_truth import truth_tests

#: The dialect the regenerated SQL is written in for Polars.
OUTPUT_DIALECT = "postgres"


def _output_selects(tree: exp.Query) -> list[exp.Select]:
    """The SELECTs whose column names are the query's: the first branch of each set operation."""
    while isinstance(tree, exp.SetOperation):
        tree = tree.this
    if isinstance(tree, exp.Subquery):
        return _output_selects(tree.this)
    return [tree] if isinstance(tree, exp.Select) else []


def _name_outputs(tree: exp.Query) -> None:
    for select in _output_selects(tree):
        for projection in list(select.expressions):
            if not isinstance(projection, (exp.Alias, exp.Column, exp.Star)):
                name = projection.sql(dialect="duckdb", normalize_functions="lower")
                projection.replace(exp.alias_(projection.copy(), exp.to_identifier(name, quoted=True)))


def _tables_of(node: exp.Expression) -> set[str]:
    return {column.table for column in node.find_all(exp.Column) if column.table}


def _source_name(node: exp.Expression) -> str:
    return node.alias_or_name


def _is_plain_join(join: exp.Join) -> bool:
    """A comma join (``FROM a, b``): no kind, side, ON or USING."""
    return not (join.args.get("kind") or join.args.get("side") or join.args.get("on") or join.args.get("using"))


def _explicit_comma_joins(select: exp.Select) -> None:
    """``FROM a, b, c ... JOIN d`` → ``FROM a JOIN b ON .. JOIN c ON .. JOIN d``, keys from the WHERE's equalities."""
    joins: list[exp.Join] = list(select.args.get("joins") or [])
    plain = [join for join in joins if _is_plain_join(join)]
    if not plain or select.args.get("from_") is None:
        return
    rest = [join for join in joins if not _is_plain_join(join)]
    where = select.args.get("where")
    conditions = conjuncts(where.this if where else None)
    joined = {_source_name(select.args["from_"].this)}
    pending = {_source_name(join.this): join for join in plain}
    rebuilt: list[exp.Join] = []
    while pending:
        pick, keys = None, []
        for name, join in pending.items():  # the first table the WHERE ties to those joined so far
            keys = [c for c in conditions if isinstance(c, exp.EQ) and _tables_of(c) and name in _tables_of(c)
                    and _tables_of(c) <= joined | {name} and len(_tables_of(c)) == 2
                    and all(isinstance(side, exp.Column) for side in (c.left, c.right))]
            if keys:
                pick = name
                break
        if pick is None:
            if not rest:  # only comma joins, one without a key: Polars plans the WHERE (an OR of keys, say) itself
                return
            pick, keys = next(iter(pending)), []
        join = pending.pop(pick)
        conditions = [c for c in conditions if not any(c is k for k in keys)]
        rebuilt.append(exp.Join(this=join.this, on=and_all(keys)) if keys else exp.Join(this=join.this, kind="CROSS"))
        joined.add(pick)
    select.set("joins", [*rebuilt, *rest])
    select.set("where", exp.Where(this=and_all(conditions)) if conditions else None)


def _key_equality(condition: exp.Expression, left: set[str], right: str) -> bool:
    if not isinstance(condition, exp.EQ) or not all(isinstance(s, exp.Column) for s in (condition.left, condition.right)):
        return False
    tables = [condition.left.table, condition.right.table]
    return right in tables and any(t in left for t in tables if t != right)


def _of_left_alone(condition: exp.Expression, left: set[str]) -> bool:
    """Whether ``condition`` reads only tables joined before (and no subquery)."""
    return condition.find(exp.Query, exp.Subquery) is None and _tables_of(condition) <= left


def _conditions_in_a_key(key: exp.EQ, conditions: list[exp.Expression], right: str, first: str, *, of_right: bool) -> bool:
    """An outer join's conditions on one side, as that side's key: ``r.k = CASE WHEN cond THEN l.k END`` for the tables
    joined before (only where ``l`` is the FROM's table, the ``first``), ``CASE WHEN cond THEN r.k END = l.k`` for the
    joined table (``of_right``); whether they were (else they stay in the ``ON``, as written).

    A row whose condition is false or null then has a null key and matches nothing, as SQL has it, whichever side
    the join keeps. Polars planned a LEFT JOIN's conditions as a nested loop join (every pair of rows), which
    cudf-polars 26.10 failed on with "Hash join right table is empty" (an H100, 2026-12-06), and refuses them in a
    RIGHT or FULL JOIN ("not supported with non-equi join conditions"); the key keeps it a hash join on both engines.
    """
    # By the tables each side reads: the other side may be a CASE already (a FULL JOIN's conditions on both sides).
    right_is_this = {column.table for column in key.this.find_all(exp.Column)} == {right}
    side = "this" if right_is_this == of_right else "expression"
    if not of_right and not (isinstance(key.args[side], exp.Column) and key.args[side].table == first):
        return False  # a key of a table joined before: Polars takes no expression there ("'alias' is not allowed in a join key")
    guarded = exp.Case(ifs=[exp.If(this=and_all([c.copy() for c in conditions]), true=key.args[side].copy())])
    key.set(side, guarded)
    return True


def _polars_join_conditions(select: exp.Select) -> None:
    """Polars' ON takes key equalities: move an inner join's other conditions to WHERE (all of them, as a cross join's,
    where an OR stands with no key beside it), a left join's conditions
    on its right table alone into a derived table over that table, and those on the tables before it into a key; a
    right or full join's conditions on either side alone into that side's key."""
    from_ = select.args.get("from_")
    if from_ is None:
        return
    seen = {_source_name(from_.this)}
    extra_where: list[exp.Expression] = []
    joins = list(select.args.get("joins") or [])
    for index, join in enumerate(joins):
        name = _source_name(join.this)
        # A WHERE is applied after a later RIGHT or FULL join, which would drop the rows it adds.
        outer_later = any((later.args.get("side") or "").upper() in ("RIGHT", "FULL") for later in joins[index + 1:])
        if (on := join.args.get("on")) is not None:  # ON (a = b): Polars refuses a parenthesised constraint
            join.set("on", on := and_all([part.unnest() for part in conjuncts(on.unnest())]))
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if on is not None and kind not in ("SEMI", "ANTI"):
            parts = conjuncts(on)
            keys = [c for c in parts if _key_equality(c, seen, name)]
            others = [c for c in parts if not any(c is k for k in keys)]
            if others and side == "" and keys and not outer_later:
                extra_where.extend(others)
                join.set("on", and_all(keys))
            elif side == "" and not keys and not outer_later and any(isinstance(c, exp.Or) for c in others):
                # An OR of conditions with no key beside it ("unsupported join constraint operator 'Or'"): every pair of
                # rows is a candidate, so a cross join filtered by WHERE is the same inner join.
                extra_where.extend(others)
                join.set("on", None)
                join.set("kind", "CROSS")
            elif others and side == "LEFT" and keys and all(_tables_of(c) == {name} or _of_left_alone(c, seen) for c in others):
                right_alone = [c for c in others if _tables_of(c) == {name}]
                if right_alone:
                    inner = exp.select("*").from_(join.this.copy()).where(and_all([c.copy() for c in right_alone]))
                    join.set("this", exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True))))
                left_alone = [c for c in others if _tables_of(c) != {name}]
                if left_alone and _conditions_in_a_key(keys[0], left_alone, name, _source_name(from_.this), of_right=False):
                    left_alone = []
                join.set("on", and_all([*keys, *left_alone]))
            elif others and side in ("RIGHT", "FULL") and keys and all(_tables_of(c) == {name} or _of_left_alone(c, seen) for c in others):
                # Each side's conditions null that side's key: a derived table would drop rows a RIGHT or FULL JOIN keeps.
                kept = []
                for of_right, alone in ((True, [c for c in others if _tables_of(c) == {name}]),
                                        (False, [c for c in others if _tables_of(c) != {name}])):
                    if alone and not _conditions_in_a_key(keys[0], alone, name, _source_name(from_.this), of_right=of_right):
                        kept.extend(alone)
                join.set("on", and_all([*keys, *kept]))
        seen.add(name)
    if extra_where:
        where = select.args.get("where")
        select.set("where", exp.Where(this=and_all([*(conjuncts(where.this) if where else []), *extra_where])))


def _sql_remainders(tree: exp.Expression) -> None:
    for mod in reversed(list(tree.find_all(exp.Mod))):  # innermost first, so an outer one copies the rewritten inner one
        a, b = mod.this.copy(), mod.expression.copy()
        magnitude = exp.Paren(this=exp.Mod(this=exp.Abs(this=a), expression=exp.Abs(this=b)))
        mod.replace(exp.Paren(this=exp.Mul(this=exp.Sign(this=a.copy()), expression=magnitude)))


def _polars_function_names(tree: exp.Expression) -> None:
    # PostgreSQL writes MEDIAN as PERCENTILE_CONT(0.5) WITHIN GROUP (...), which Polars lacks.
    for median in list(tree.find_all(exp.Median)):
        median.replace(exp.Anonymous(this="MEDIAN", expressions=[median.this.copy()]))
    # sqlglot writes PostgreSQL's ROUND(double, n) as ROUND(CAST(x AS DECIMAL), n), which Polars casts to a 38-digit
    # decimal: a NaN, an infinity or a float past 10^29 then fails the job ("conversion from f64 to decimal[38,9]
    # failed"). A float rounds its binary value here (docs/spec.md).
    for rounding in list(tree.find_all(exp.Round)):
        if rounding.args.get("decimals") is not None:
            rounding.replace(exp.Anonymous(this="ROUND", expressions=[rounding.this.copy(), rounding.args["decimals"].copy()]))


def _number(node: exp.Expression) -> Decimal | None:
    if isinstance(node, exp.Paren):
        return _number(node.this)
    if isinstance(node, exp.Neg):
        inner = _number(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return Decimal(node.this)
        except InvalidOperation:
            return None
    return None


_FOLD = {exp.Add: Decimal.__add__, exp.Sub: Decimal.__sub__, exp.Mul: Decimal.__mul__}


def _fold_literals(tree: exp.Expression) -> None:
    """Arithmetic of number literals computed exactly, as SQL's exact numerics are (``.06 + 0.01`` is
    0.07, not the float 0.06999999999999999 that Polars' float literals would give)."""
    changed = True
    while changed:
        changed = False
        for node in list(tree.find_all(*_FOLD)):
            left, right = _number(node.this), _number(node.expression)
            if left is not None and right is not None:
                value = _FOLD[type(node)](left, right)
                literal = exp.Literal.number(format(value, "f"))
                node.replace(exp.Paren(this=exp.Neg(this=exp.Literal.number(format(-value, "f")))) if value < 0 else literal)
                changed = True
                break


#: Each comparison with its sides swapped: ``1 < x`` is ``x > 1``.
_MIRRORED: dict[type[exp.Expression], type[exp.Expression]] = {
    exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def _literals_on_the_right(tree: exp.Expression) -> None:
    """``1 < x`` written ``x > 1``: Polars 1.44 gives one row for a literal compared with a ``CASE`` after a
    ``WHERE`` (``SELECT 0 < CASE WHEN id > 7 THEN w ELSE 0.5 END … WHERE id < 4``: a row, or a ShapeError beside
    another column, where there are three), and the mirrored form is the same comparison."""
    for node in list(tree.find_all(*_MIRRORED)):
        if isinstance(node.this, (exp.Literal, exp.Neg)) and node.this.find(exp.Column) is None and not isinstance(node.expression, exp.Literal):
            node.replace(_MIRRORED[type(node)](this=node.expression.copy(), expression=node.this.copy()))


def _unknown_column(exc: OptimizeError, tree: exp.Expression, tables: Mapping[str, Mapping[str, str]], field: str) -> SqlRefused:
    message = str(exc)
    wanted = message.split("'")[1] if message.count("'") >= 2 else ""
    known = sorted({column for columns in tables.values() for column in columns})
    close = difflib.get_close_matches(wanted.split(".")[-1], known, n=1) if wanted else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    node = next((c for c in tree.find_all(exp.Column) if c.name == wanted.split(".")[-1]), None)
    where = position(node) if node is not None else ""
    return SqlRefused(f"{field}: {message.rstrip('.')}{hint}{where}", field=field)


_INTEGER_TYPES = (exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT)
_NOT_NUMBERS = (exp.Boolean, exp.Predicate, exp.Connector, exp.Not, exp.Like, exp.ILike, exp.In, exp.Between, exp.Exists, exp.DPipe)


def _number_operand(node: exp.Expression, text_columns: set[str]) -> bool:
    """Whether ``node`` is not known to be text, a date or a bool (so ``floor`` of it plans)."""
    if isinstance(node, exp.Literal):
        return not node.is_string
    if isinstance(node, exp.Column):
        return node.name not in text_columns
    return not isinstance(node, _NOT_NUMBERS)


def _rounding_integer_casts(tree: exp.Expression, text_columns: set[str]) -> None:
    """``CAST(x AS INT)`` of a float rounds to the nearest integer, ties to even, as PostgreSQL and DuckDB cast a
    double (Polars truncates): ``CASE WHEN x = floor(x) THEN CAST(x AS INT) ELSE CAST(round(x) AS INT) END``, so an
    integer goes through exactly. Where ``x`` turns out to be text after all, ``floor`` fails on the empty
    frames and the candidate without this rewrite runs."""
    for cast in reversed(list(tree.find_all(exp.Cast))):
        target = cast.args.get("to")
        if not (isinstance(target, exp.DataType) and target.this in _INTEGER_TYPES) or not _number_operand(cast.this, text_columns):
            continue
        x = cast.this
        rounded = exp.Cast(this=exp.Round(this=x.copy()), to=target.copy())
        whole = exp.EQ(this=x.copy(), expression=exp.Floor(this=x.copy()))
        cast.replace(exp.Paren(this=exp.Case(ifs=[exp.If(this=whole, true=exp.Cast(this=x.copy(), to=target.copy()))], default=rounded)))


def _finish(tree: exp.Query, round_casts: set[str] | None, tables: Mapping[str, Mapping[str, str]]) -> str:
    if round_casts is not None:
        _rounding_integer_casts(tree, round_casts)
    for select in list(tree.find_all(exp.Select)):
        key_conditions_to_where(select)
        _explicit_comma_joins(select)
        _polars_join_conditions(select)
    _fold_literals(tree)
    _literals_on_the_right(tree)
    _sql_remainders(tree)
    null_covariances(tree)
    aggregate_order_constants(tree)
    float_powers(tree)
    timestamp_text(tree, tables)
    wide_counts(tree, tables)
    scalar_counts(tree)
    guarded_string_ends(tree)
    wide_integers(tree)
    fold_date_literals(tree)
    like_as_string_functions(tree)
    in_list_as_equalities(tree)
    truth_tests(tree)
    return polars_text(tree)


def polars_text(tree: exp.Expression) -> str:
    """The text Polars runs for a finished tree, or for one read back from such a text (sqlglot reads a typed date
    literal back as a cast and ``MEDIAN`` as PostgreSQL's ``PERCENTILE_CONT``, which Polars takes neither of)."""
    fold_date_literals(tree)
    _polars_function_names(tree)
    # Every identifier quoted: a name made by a rewrite (sqlglot's unnest_subqueries: ``_u_0.select``) may be a keyword.
    return tree.sql(dialect=OUTPUT_DIALECT, comments=False, identify=True)


def polars_sql(tree: exp.Query, tables: Mapping[str, Mapping[str, str]], field: str) -> list[str]:
    """The SQL texts Polars may run for a checked query over ``tables`` (name → column → SQL type),
    best first: decorrelated, then as written (where decorrelating needs arrays, which Polars lacks,
    its own planner takes correlated EXISTS); each with integer casts that round, then as Polars casts.

    Raises
    ------
    SqlRefused
        An unknown or ambiguous column, named with the nearest known one.
    """
    tree = tree.copy()
    _name_outputs(tree)
    try:
        tree = qualify(tree, dialect=DIALECT, schema={name: dict(columns) for name, columns in tables.items()}, identify=True)
    except OptimizeError as exc:
        raise _unknown_column(exc, tree, tables, field) from None
    if (broken := grouping_error(tree)) is not None:
        raise SqlRefused(f"{field}: {broken[0]}{position(broken[1])}", field=field)
    if (wrong := subquery_problem(tree)) is not None:
        raise SqlRefused(f"{field}: {wrong[0].sql(dialect=DIALECT)[:80]}{position(wrong[0])}{wrong[1]}", field=field)
    for select in tree.find_all(exp.Select):
        if (join := literal_only_join(select)) is not None:
            raise SqlRefused(f"{field}: the join ON {join.args['on'].sql(dialect=DIALECT)[:80]}{position(join)} compares one table's "
                             "column with a literal and relates no column of the other: Polars' SQL applies it to the wrong table; "
                             "write the condition in WHERE, or join a subquery that filters that table", field=field)
    for select in list(tree.find_all(exp.Select)):
        key_conditions_to_where(select)  # before unnesting: HAVING k IN (SELECT …) on a group key is a WHERE's
        having = select.args.get("having")
        if having is not None and (left := next((n for n in having.find_all(exp.In) if n.args.get("query")), None)) is not None:
            # Unnested, it tests a joined column beside the aggregates, which Polars fails on as it runs ("cannot cast List").
            raise SqlRefused(f"{field}: {left.sql(dialect=DIALECT)[:80]}{position(left)}: IN (SELECT …) in HAVING over an aggregate "
                             "is not run; compute the groups in a CTE and test them in its WHERE", field=field)
        decorrelate_exists(select)
        not_in_as_joins(select)
    for select in list(tree.find_all(exp.Select)):
        distinct_counts_as_two_groupings(select)
    bases = []
    # sqlglot joins an IN subquery whose value is a window aggregate (COUNT(*) OVER …) without grouping it,
    # which repeats the outer rows once per match: subqueries in WHERE or HAVING with a window stay as written.
    windowed = any(clause.find(exp.Window) for clause in tree.find_all(exp.Where, exp.Having))
    if any(tree.find_all(exp.Subquery, exp.Exists, exp.In)) and not windowed:
        unnested = unnest_subqueries(tree.copy())
        if not any(unnested.find_all(exp.ArrayAgg, exp.Unnest, exp.Array)):
            bases.append(unnested)
    bases.append(tree)
    text_columns = {column for columns in tables.values() for column, kind in columns.items() if kind != "BIGINT"}
    candidates: list[str] = []
    for base in bases:
        for round_casts in (text_columns, None):
            if (sql := _finish(base.copy(), round_casts, tables)) not in candidates:
                candidates.append(sql)
    return candidates
