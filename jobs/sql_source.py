"""A named source whose rows are a SQL SELECT over the spec's other named sources.

``sources: {q: {sql: "SELECT ... FROM orders JOIN lineitem ON ..."}}``: the text is parsed and
whitelisted (:mod:`jobs.sql_check`), rewritten into what Polars' SQL takes
(:mod:`jobs.sql_rewrite`), and planned at submit over empty frames of the sources' kinds, so
the output's columns and kinds are known before any work and later steps and sinks are checked
against them. The Polars engine runs the regenerated SQL with ``polars.SQLContext`` over the
sources' LazyFrames (a SELECT with ordered windows in three parts, :mod:`jobs.sql_window_run`); the
result is a LazyFrame, so cudf-polars can run it on the GPU too.
The Dask engine does not run SQL.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

import polars as pl
import sqlglot
from sqlglot import exp

from spillway.jobs.sources import Schema
from spillway.jobs.sql_check import SqlRefused, check_sql
from spillway.jobs.sql_correlated_names import unshared_correlated_names
from spillway.jobs.sql_exists import EXISTS_ALIAS, nan_safe_exists
from spillway.jobs.sql_key_types import cast_unlike_keys
from spillway.jobs.sql_nan_greatest import nan_greatest
from spillway.jobs.sql_window_run import DIALECT, has_ordered_windows, run_windowed
from spillway.jobs.sql_windows import WindowRefused

#: Each kind as the Polars type a source of that kind is read as (numbers: the widest integer,
#: which every numeric function takes; a float column would give the same kinds).
_KIND_DTYPES: dict[str, pl.DataType] = {
    "numeric": pl.Int64(), "string": pl.String(), "datetime": pl.Datetime("us"), "bool": pl.Boolean(),
}
_KIND_SQL = {"numeric": "BIGINT", "string": "VARCHAR", "datetime": "TIMESTAMP", "bool": "BOOLEAN"}
_POLARS_ERRORS = (pl.exceptions.PolarsError,)
# The SQL sources being planned, outermost first: one reading another that reads it back is a cycle.
_PLANNING: ContextVar[tuple[str, ...]] = ContextVar("spillway_sql_planning", default=())


def polars_kind(dtype: pl.DataType) -> str:
    """The coarse kind (jobs.sources.Schema) of a Polars type."""
    if dtype.is_numeric():
        return "numeric"
    if dtype == pl.String or dtype == pl.Categorical:
        return "string"
    if dtype.is_temporal() and dtype != pl.Duration and dtype != pl.Time:
        return "datetime"
    if dtype == pl.Boolean:
        return "bool"
    return "unknown" if dtype == pl.Null else "other"


@dataclass(frozen=True)
class SqlPlan:
    """A checked SQL source: the SQL Polars runs, the named sources it reads, its output's kinds."""

    sql: str
    tables: tuple[str, ...]
    schema: Schema


def _empty_frame(schema: Schema) -> pl.LazyFrame:
    return pl.LazyFrame(schema={name: _KIND_DTYPES.get(kind, pl.Null()) for name, kind in schema.items()})


def run_sql(sql: str, frames: Mapping[str, pl.LazyFrame], *, nan_terms: bool = True) -> pl.LazyFrame:
    """The LazyFrame of checked, regenerated ``sql`` over ``frames`` (by table name).

    With ``nan_terms`` (where it may run on cudf-polars, whose comparisons follow IEEE), comparisons that may meet a
    NaN are written out under NaN's total order (:mod:`jobs.sql_nan`; raises its NanTermsTooLarge where they make
    the query too large or too deep for Polars' SQL). Equalities of types Polars does not join (an integer and a
    float, say: known only from the frames) are cast to a common type (:mod:`jobs.sql_key_types`), and a ``MAX``
    or ``GREATEST`` of floats is NaN where one is (:mod:`jobs.sql_nan_greatest`), and a correlated condition's column
    whose name a table joined beside its own shares gets a name of its own (:mod:`jobs.sql_correlated_names`). Text with an ordered window is read back with sqlglot and split
    (:func:`jobs.sql_window_run.run_windowed`); any other runs as it is. Only text regenerated from a checked
    tree comes here.
    """
    from spillway.jobs.sql_rewrite import polars_text

    context = pl.SQLContext(dict(frames))
    schemas = {table: dict(frame.collect_schema()) for table, frame in frames.items()}
    # What only the sources tell (an integer key with a float one, a MAX of floats that may hold a NaN, column names two
    # joined tables share): the passes run on one parse and are written back only if any changed the query.
    typed_passes = sqlglot.parse_one(sql, dialect=DIALECT)
    # After the casts: a cast key has a name of its own already, and the casts read the columns' own names.
    if any([cast_unlike_keys(typed_passes, schemas), nan_greatest(typed_passes, schemas),
            unshared_correlated_names(typed_passes, schemas)]):
        sql = polars_text(typed_passes)
    exists = EXISTS_ALIAS in sql  # an EXISTS made a join with each group's extremes, which skip a NaN
    # With no float column a NaN still comes from a cast, a division or MAX's NaN tests (tests/test_sql_nan_greatest.py):
    # a plan for cudf-polars always gets the terms; the EXISTS rewrite's extremes meet a NaN of a float column only.
    if nan_terms or (exists and any(dtype.is_float() for schema in schemas.values() for dtype in schema.values())):
        from spillway.jobs.sql_nan import nan_aware  # comparisons that may meet a NaN, spelt out for cudf-polars' IEEE ones

        tree = nan_safe_exists(sqlglot.parse_one(sql, dialect=DIALECT), schemas)
        sql = polars_text(nan_aware(tree, schemas, DIALECT) if nan_terms else tree)
    with warnings.catch_warnings():  # Polars warns of its own casts of date literals
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            if "OVER" in sql and has_ordered_windows(tree := sqlglot.parse_one(sql, dialect=DIALECT)):
                return run_windowed(tree, context)  # type: ignore[arg-type]
            return context.execute(sql, eager=False)
        except pl.exceptions.SQLInterfaceError as exc:
            if nan_terms and "recursion limit" in str(exc):  # the checks at submit passed the query without the terms
                from spillway.jobs.sql_nan import NanTermsTooLarge

                raise NanTermsTooLarge("its comparisons over floats, written to order NaN on the GPU, nest deeper than "
                                       "Polars' SQL parser takes; split it with CTEs") from None
            raise


def _rewritten(tree: exp.Query, types: dict[str, dict[str, str]], field: str) -> list[str]:
    from sqlglot.errors import SqlglotError

    from spillway.jobs.sql_rewrite import polars_sql

    try:
        return polars_sql(tree, types, field)
    except RecursionError:  # a long chain of operators: the rewrites recurse once per level
        raise SqlRefused(f"{field}: the query is nested too deeply to check; split it with CTEs", field=field) from None
    except SqlglotError as exc:
        raise SqlRefused(f"{field}: cannot rewrite the query: {str(exc).splitlines()[0][:300]}", field=field) from None


#: Polars' words where a subquery still reads the outer query's columns (it runs no correlated subquery itself).
_CORRELATED = ("no table or struct column named", "subquery is not currently supported in this position")


def _polars_refusal(exc: Exception, tree: exp.Expression) -> str:
    """Why Polars' SQL refuses the query: its first line, and what to do where a correlated subquery is the cause."""
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(": Query {")[0]  # not its parse tree
    words = f"Polars' SQL cannot run this query: {reason[:300]}"
    if any(marker in reason for marker in _CORRELATED) and tree.find(exp.Subquery, exp.Exists, exp.In):
        words += ("; a subquery reads the outer query's columns in a form that cannot be made a join (only AND-ed "
                  "equalities, and one <> in EXISTS, can): join the tables, or compute the subquery in a CTE and join it")
    return words


def plan_sql(text: str, field: str, name: str, sources: list[str], schema_of: Callable[[str], Schema]) -> SqlPlan:
    """Check the SQL source ``name`` (its text at ``field``) against the spec's named ``sources``.

    ``schema_of`` gives a named source's columns and kinds. The query is parsed, whitelisted,
    rewritten and planned by Polars over empty frames of those kinds, which is how its output's
    kinds are known; Polars refusing the query (a construct its SQL does not take) is a
    :class:`SqlRefused` naming it.

    Raises
    ------
    SqlRefused
        The query is outside the allowed SQL, reads an unknown table or column, or Polars
        cannot run it.
    """
    tree, tables = check_sql(text, field, sources, own_name=name)
    schemas = {table: schema_of(table) for table in tables}
    types = {table: {c: _KIND_SQL.get(k, "VARCHAR") for c, k in s.items()} for table, s in schemas.items()}
    refusal = ""
    for sql in _rewritten(tree, types, field):
        try:
            # Run on no rows, not only planned: Polars finds a mean of text or text compared with a number only then.
            # No NaN terms: they change no output type, and the job's own plan writes them (a refusal there names the source).
            planned = run_sql(sql, {table: _empty_frame(s) for table, s in schemas.items()}, nan_terms=False).collect().schema
            break
        except _POLARS_ERRORS as exc:
            refusal = refusal or _polars_refusal(exc, tree)
        except WindowRefused as exc:  # a window over values of a kind it does not take, or in a correlated subquery
            refusal = refusal or str(exc)
        except RecursionError:  # splitting a query with ordered windows walks it once per level
            refusal = refusal or "the query is nested too deeply to run; split it with CTEs"
    else:
        raise SqlRefused(f"{field}: {refusal}", field=field)
    return SqlPlan(sql=sql, tables=tuple(tables), schema={column: polars_kind(dtype) for column, dtype in planned.items()})


def plan_sql_source(name: str, text: str, sources: list[str], schema_of: Callable[[str, str], Schema]) -> SqlPlan:
    """:func:`plan_sql` for the named source ``name``, whose tables' schemas ``schema_of`` gives
    (by name and the field that reads them); a cycle of SQL sources is refused.

    Raises
    ------
    SqlRefused
        As :func:`plan_sql`, or when the sources it reads lead back to ``name``.
    """
    field = f"sources.{name}.sql"
    planning = _PLANNING.get()
    if name in planning:
        cycle = " → ".join([*planning[planning.index(name):], name])
        raise SqlRefused(f"{field}: sources form a cycle: {cycle}; a SQL source cannot depend on itself", field=field)
    token = _PLANNING.set((*planning, name))
    try:
        return plan_sql(text, field, name, sources, lambda table: schema_of(table, field))
    finally:
        _PLANNING.reset(token)


__all__ = ["SqlPlan", "SqlRefused", "plan_sql", "plan_sql_source", "polars_kind", "run_sql"]
