"""The whitelist of a SQL source: one SELECT over the spec's named sources, parsed by sqlglot.

A SQL source's text is tokenized and parsed (PostgreSQL's grammar, names case-sensitive, as
Polars reads them) into a tree, and every node of the tree must be of a kind listed here:
query clauses, operators, literals, casts, ``CASE``, subqueries, and a listed set of
functions. A table is a named source of the spec or a CTE of the query, nothing else: no
table functions (``read_parquet(...)``), no file paths, no schema-qualified names. Anything
else is a :class:`SqlRefused` naming the field (``sources.q.sql``), the part and, where the
parser knows it, its line and column. Nothing downstream ever sees the user's text: the
lowering regenerates SQL from the checked tree (:mod:`jobs.sql_rewrite`).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from spillway.jobs.errors import SpecError
from spillway.jobs.expr import MAX_PAD
from spillway.jobs.sql_constant_aggs import constant_aggregate
from spillway.jobs.sql_filters import FilterRefused, filters_as_cases
from spillway.jobs.sql_named_windows import NamedWindowError, inline_named_windows
from spillway.jobs.sql_polars_forms import unordered_window_problem
from spillway.jobs.sql_windows import window_refusal

#: The dialect user text is read in: PostgreSQL's grammar with case-sensitive names.
DIALECT = sqlglot.Dialect.get_or_raise("postgres, normalization_strategy=case_sensitive")


class SqlRefused(SpecError):
    """A SQL source's text is outside the allowed SQL: the message names the part and where it is."""

    code = "invalid_sql"


#: SQL functions a query may call, by the name a user writes (the docs list these).
SQL_FUNCTIONS: dict[str, type[exp.Expression]] = {
    # aggregates
    "count": exp.Count, "sum": exp.Sum, "avg": exp.Avg, "min": exp.Min, "max": exp.Max, "median": exp.Median,
    "stddev": exp.Stddev, "stddev_samp": exp.StddevSamp, "variance": exp.Variance, "var_samp": exp.Variance,
    "covar_samp": exp.CovarSamp, "covar_pop": exp.CovarPop, "string_agg": exp.GroupConcat,
    # numbers
    "abs": exp.Abs, "ceil": exp.Ceil, "floor": exp.Floor, "round": exp.Round, "sqrt": exp.Sqrt, "exp": exp.Exp,
    "ln": exp.Ln, "power": exp.Pow, "sign": exp.Sign, "mod": exp.Mod,
    # strings
    "lower": exp.Lower, "upper": exp.Upper, "length": exp.Length, "trim": exp.Trim, "ltrim": exp.Trim, "rtrim": exp.Trim,
    "concat": exp.Concat, "replace": exp.Replace, "left": exp.Left, "right": exp.Right, "split_part": exp.SplitPart,
    "starts_with": exp.StartsWith, "ends_with": exp.EndsWith, "lpad": exp.Pad, "rpad": exp.Pad, "substring": exp.Substring,
    "reverse": exp.Reverse, "initcap": exp.Initcap,
    # nulls, choices, dates, types
    "coalesce": exp.Coalesce, "nullif": exp.Nullif, "greatest": exp.Greatest, "least": exp.Least,
    "extract": exp.Extract, "date_part": exp.Extract, "cast": exp.Cast,
}
_FUNCTION_NODES = frozenset(SQL_FUNCTIONS.values())
#: Functions that exist only as a window's: ``ROW_NUMBER() OVER (…)`` (jobs.sql_windows says which windows run).
SQL_WINDOW_FUNCTIONS: dict[str, type[exp.Expression]] = {
    "row_number": exp.RowNumber, "rank": exp.Rank, "dense_rank": exp.DenseRank, "ntile": exp.Ntile, "percent_rank": exp.PercentRank,
    "cume_dist": exp.CumeDist, "lag": exp.Lag, "lead": exp.Lead, "first_value": exp.FirstValue, "last_value": exp.LastValue,
}
_WINDOW_NODES = tuple(SQL_WINDOW_FUNCTIONS.values())
#: How deep parentheses (subqueries included) may nest, and how deep the parsed tree may be.
MAX_NESTING = 64
MAX_DEPTH = 512
#: Units of EXTRACT (and date_part) and of an INTERVAL literal.
EXTRACT_UNITS = frozenset({"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOW", "DOY", "HOUR", "MINUTE", "SECOND"})
INTERVAL_UNITS = frozenset({"YEAR", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND"})
#: Types a CAST may name.
CAST_TYPES = frozenset({
    exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT, exp.DataType.Type.DOUBLE,
    exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL, exp.DataType.Type.VARCHAR,
    exp.DataType.Type.TEXT, exp.DataType.Type.BOOLEAN, exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP,
})

# The query's shape: clauses, names, literals and operators. Functions are checked against
# SQL_FUNCTIONS, tables against the spec's names; every other node kind is refused.
_STRUCTURE: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit, exp.Offset,
    exp.With, exp.CTE, exp.TableAlias, exp.Subquery, exp.Union, exp.Intersect, exp.Except, exp.Distinct,
    exp.Table, exp.Column, exp.Identifier, exp.Star, exp.Alias, exp.Paren,
    exp.Literal, exp.Boolean, exp.Null, exp.Interval, exp.Var, exp.DataType, exp.DataTypeParam,
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.DPipe, exp.And, exp.Or, exp.Not,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.Like, exp.ILike, exp.In, exp.Between, exp.Exists,
    exp.Case, exp.If, exp.Window, exp.WindowSpec,
)
_WORDS = {exp.Drop: "DROP", exp.Create: "CREATE", exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE",
          exp.Copy: "COPY", exp.Command: "a command", exp.Set: "SET", exp.Pragma: "PRAGMA", exp.Use: "USE"}


def position(node: exp.Expression) -> str:
    """`` at line L, col C`` for the first token of ``node`` that the parser placed, else ''."""
    for part in node.walk():
        meta = part.meta if isinstance(part, exp.Expression) else {}
        if "line" in meta and "col" in meta:  # sqlglot's col is the token's last character: give its first
            return f" at line {meta['line']}, col {meta['col'] - (meta.get('end', 0) - meta.get('start', 0))}"
    return ""


def _token_at(token: Token) -> str:
    return f" at line {token.line}, col {token.col - (token.end - token.start)}"


def _statements(text: str, field: str) -> list[Token]:
    """The tokens of ``text``'s one statement: a second statement, even after a comment, is refused."""
    try:
        tokens = DIALECT.tokenize(text)
    except TokenError as exc:
        raise SqlRefused(f"{field}: cannot read the SQL: {exc}", field=field) from None
    statement = [t for t in tokens if t.token_type != TokenType.SEMICOLON]
    semicolons = [index for index, t in enumerate(tokens) if t.token_type == TokenType.SEMICOLON]
    after = [t for t in tokens[semicolons[0]:] if t.token_type != TokenType.SEMICOLON] if semicolons else []
    if after:
        raise SqlRefused(f"{field}: one SELECT statement only; a second statement begins with {after[0].text!r}{_token_at(after[0])}",
                         field=field)
    if not statement:
        raise SqlRefused(f"{field}: the SQL holds no statement", field=field)
    depth = deepest = 0
    for token in statement:  # the parser and rewrites recurse per level: bound it before they run
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
        deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            raise SqlRefused(f"{field}: the query nests parentheses more than {MAX_NESTING} deep{_token_at(token)}", field=field)
    first = statement[0]
    if first.token_type not in (TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN):
        raise SqlRefused(f"{field}: only a SELECT query is allowed, not {first.text.upper()!r}{_token_at(first)}", field=field)
    return statement


def parse_query(text: str, field: str) -> exp.Query:
    """``text`` as one SELECT query (possibly WITH, set operations), not yet whitelisted."""
    _statements(text, field)
    try:
        parsed = [tree for tree in sqlglot.parse(text, dialect=DIALECT) if tree is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first['line']}, col {first['col']}" if "line" in first else ""
        detail = first.get("description", str(exc).splitlines()[0])
        raise SqlRefused(f"{field}: cannot parse the SQL: {detail}{where}", field=field) from None
    if len(parsed) != 1:  # pragma: no cover - _statements saw one statement
        raise SqlRefused(f"{field}: one SELECT statement only", field=field)
    tree = parsed[0]
    if not isinstance(tree, exp.Query):
        word = next((name for kind, name in _WORDS.items() if isinstance(tree, kind)), type(tree).__name__.upper())
        raise SqlRefused(f"{field}: only a SELECT query is allowed, not {word}{position(tree)}", field=field)
    return tree


def _suggest(name: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _functions_hint(name: str) -> str:
    return f"{_suggest(name, SQL_FUNCTIONS)} (allowed: {', '.join(sorted(SQL_FUNCTIONS))})"


def _cte_names(tree: exp.Expression) -> set[str]:
    return {cte.alias_or_name for cte in tree.find_all(exp.CTE)}


class _Checker:
    """Walks a parsed query and refuses the first node outside the whitelist."""

    def __init__(self, field: str, sources: Collection[str], own_name: str | None) -> None:
        self.field = field
        self.sources = [name for name in sources if name != own_name]
        self.own_name = own_name
        self.tables: list[str] = []

    def refuse(self, node: exp.Expression, part: str, why: str = "") -> SqlRefused:
        """``part`` (what is refused), where it is, then ``why`` and what would do."""
        return SqlRefused(f"{self.field}: {part}{position(node)}{why}", field=self.field)

    def check(self, tree: exp.Query) -> None:
        self.depth(tree)
        ctes = _cte_names(tree)
        for node in tree.walk():
            if isinstance(node, exp.Table):
                self.table(node, ctes)
            elif isinstance(node, _WINDOW_NODES) and isinstance(node.parent, exp.Window) and node.arg_key == "this":
                pass  # its window is checked in detail()
            elif isinstance(node, _WINDOW_NODES):
                name = node.sql_name().lower()
                raise self.refuse(node, f"{name} is a window function", ": write it with OVER (ORDER BY …)")
            elif isinstance(node, exp.Anonymous):
                name = str(node.this).lower()
                raise self.refuse(node, f"unknown function '{name}'", _functions_hint(name))
            elif isinstance(node, exp.Func) and type(node) not in _FUNCTION_NODES and not isinstance(node, _STRUCTURE):
                name = node.sql_name().lower()
                raise self.refuse(node, f"function '{name}' is not allowed", _functions_hint(name))
            elif not isinstance(node, _STRUCTURE) and type(node) not in _FUNCTION_NODES:
                raise self.refuse(node, f"{_construct(node)} is not allowed in a SQL source")
            self.detail(node)

    def depth(self, tree: exp.Query) -> None:
        # The rewrites (sqlglot's qualify above all) take time quadratic in the tree's depth: bound it.
        stack = [(tree, 1)]
        while stack:
            node, level = stack.pop()
            if level > MAX_DEPTH:
                raise self.refuse(node, f"the query nests expressions more than {MAX_DEPTH} deep", "; split it with CTEs")
            stack.extend((child, level + 1) for child in node.iter_expressions())

    def table(self, node: exp.Table, ctes: set[str]) -> None:
        if not isinstance(node.this, exp.Identifier):
            name = node.this.sql_name().lower() if isinstance(node.this, exp.Func) else _construct(node.this)
            raise self.refuse(node, f"a table function ({name}) cannot be read", ": a SQL source reads only the spec's named sources "
                                    f"({', '.join(self.sources) or 'none'}) and its own CTEs")
        if node.args.get("db") or node.args.get("catalog"):
            raise self.refuse(node, f"'{node.sql(dialect=DIALECT)}' names a schema", ": tables are the spec's named sources, unqualified")
        name = node.name
        if name in ctes:
            return
        if name == self.own_name:
            raise self.refuse(node, f"a SQL source cannot read itself ('{name}')")
        if name not in self.sources:
            if any(ch in name for ch in "/\\.:~") or node.this.quoted and not name.isidentifier():
                raise self.refuse(node, f"'{name}' looks like a file path", ": a SQL source reads only the spec's named sources "
                                        f"({', '.join(self.sources) or 'none'}); define the files under sources and use that name")
            raise self.refuse(node, f"unknown table '{name}'", f"{_suggest(name, [*self.sources, *ctes])} (tables: the spec's named "
                                    f"sources {', '.join(self.sources) or '(none)'}, and the query's CTEs)")
        if name not in self.tables:
            self.tables.append(name)

    def detail(self, node: exp.Expression) -> None:
        """The checks inside allowed nodes: units, types, window shapes, join kinds."""
        if isinstance(node, exp.Extract):
            unit = node.this.name.upper() if isinstance(node.this, (exp.Var, exp.Identifier, exp.Literal)) else ""
            if unit not in EXTRACT_UNITS:
                raise self.refuse(node, f"EXTRACT of '{node.this.sql(dialect=DIALECT)}' is not allowed",
                                  f"; units: {', '.join(sorted(EXTRACT_UNITS))}")
        elif isinstance(node, exp.Interval):
            unit = node.unit.name.upper() if node.unit is not None else ""
            if unit.endswith("S"):
                unit = unit[:-1]
            if unit not in INTERVAL_UNITS or not isinstance(node.this, exp.Literal):
                raise self.refuse(node, f"interval '{node.sql(dialect=DIALECT)}'", ": write INTERVAL 'n' UNIT with a unit of "
                                        f"{', '.join(sorted(INTERVAL_UNITS))}")
        elif isinstance(node, exp.DataType) and isinstance(node.parent, exp.Cast):
            if node.this not in CAST_TYPES:
                allowed = ", ".join(sorted(t.value for t in CAST_TYPES))
                raise self.refuse(node, f"CAST to {node.sql(dialect=DIALECT)} is not allowed", f"; types: {allowed}")
        elif isinstance(node, exp.Pad):
            # As in the expression language: a width from data, or a huge one, would let one row take gigabytes.
            width = node.args.get("expression")
            if not (isinstance(width, exp.Literal) and width.is_int and 0 <= int(width.this) <= MAX_PAD):
                raise self.refuse(node, f"the width of {node.sql(dialect=DIALECT)[:60]} must be an integer literal from 0 to {MAX_PAD}")
        elif isinstance(node, exp.Window):
            self.window(node)
        elif isinstance(node, exp.Join):
            if node.args.get("using") or node.args.get("method"):
                raise self.refuse(node, "a join with USING or NATURAL is not allowed", ": write ON with the key columns")
        elif (wrong := constant_aggregate(node)) is not None:
            raise self.refuse(node, f"{node.sql(dialect=DIALECT)[:60]}", wrong)
        elif isinstance(node, exp.Select) and (node.args.get("laterals") or node.args.get("qualify")):
            raise self.refuse(node, "LATERAL and QUALIFY are not allowed")
        elif isinstance(node, exp.Select):
            self.comma_then_outer(node)
            if (wrong := unordered_window_problem(node)) is not None:
                raise self.refuse(wrong[0], f"{wrong[0].sql(dialect=DIALECT)[:60]}", wrong[1])

    def comma_then_outer(self, select: exp.Select) -> None:
        # SQL binds `FROM a, b RIGHT JOIN c` as a × (b RIGHT JOIN c); the rewrites read joins left to right.
        comma = False
        for join in select.args.get("joins") or []:
            side = (join.args.get("side") or "").upper()
            comma = comma or not (join.args.get("kind") or side or join.args.get("on") or join.args.get("using"))
            if comma and side in ("RIGHT", "FULL"):
                raise self.refuse(join, f"a {side} JOIN after a FROM list with commas is not run",
                                  ": write the tables before it as explicit JOINs (SQL binds it to the last table only)")

    def window(self, node: exp.Window) -> None:
        # Polars' SQL answers ordered windows differently from PostgreSQL and DuckDB: jobs/sql_windows.py says how.
        refused = window_refusal(node, DIALECT)
        if refused is not None:
            raise self.refuse(node, *refused)


def _construct(node: exp.Expression) -> str:
    if isinstance(node, (exp.Placeholder, exp.Parameter)):
        return f"a parameter ({node.sql(dialect=DIALECT)})"
    if isinstance(node, exp.All | exp.Any):
        return "ALL/ANY over a subquery"
    return f"{type(node).__name__.upper()} ({node.sql(dialect=DIALECT)[:60]})"


def check_sql(text: str, field: str, sources: Collection[str], own_name: str | None = None) -> tuple[exp.Query, list[str]]:
    """``text`` parsed and whitelisted: the query tree and the named sources it reads, in order of use.

    Parameters
    ----------
    text
        The user's SQL: one SELECT query.
    field
        Where it is in the spec (``sources.q.sql``); every error names it.
    sources
        The spec's named sources, which are the tables a query may read.
    own_name
        The SQL source's own name, which it may not read.

    Raises
    ------
    SqlRefused
        For anything outside the whitelist, naming the part and its position.
    """
    try:
        tree = parse_query(text, field)
        checker = _Checker(field, sources, own_name)
        try:
            inline_named_windows(tree)
            filters_as_cases(tree)
        except (NamedWindowError, FilterRefused) as refused:
            raise checker.refuse(refused.node, refused.part, refused.why) from None
        checker.check(tree)
    except RecursionError:  # a long chain of operators: the parser recurses once per level
        raise SqlRefused(f"{field}: the query is nested too deeply to check; split it with CTEs", field=field) from None
    return tree, checker.tables
