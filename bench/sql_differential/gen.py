"""Random SQL over t(k,i,j,f,g,s,s2,d,b) and u(k,i,s,f)."""
import random

class G:
    def __init__(self, seed):
        self.r = random.Random(seed)
    def c(self, *xs): return self.r.choice(xs)
    def p(self, x): return self.r.random() < x

    # ---- numbers
    def num(self, d=0, tab="t"):
        r = self.r
        if d >= 3 or self.p(0.35):
            return self.c(*( [f"{tab}.i", f"{tab}.j", f"{tab}.k", f"{tab}.f", f"{tab}.g"] if tab == "t" else [f"{tab}.i", f"{tab}.k", f"{tab}.f"]))
        if self.p(0.1):
            return self.c("0", "1", "2", "-3", "2.5", "-0.5", "NULL", "7", "-7")
        k = r.randint(0, 16)
        a = lambda: self.num(d + 1, tab)
        if k == 0: return f"({a()} {self.c('+', '-', '*')} {a()})"
        if k == 1: return f"({a()} / {a()})"
        if k == 2: return f"({a()} % {a()})"
        if k == 3: return f"{self.c('ABS', 'CEIL', 'FLOOR', 'SIGN', 'ROUND')}({a()})"
        if k == 4: return f"ROUND({a()}, {self.c(-1, 0, 1, 2)})"
        if k == 5: return f"MOD({a()}, {a()})"
        if k == 6: return f"COALESCE({a()}, {a()})"
        if k == 7: return f"NULLIF({a()}, {a()})"
        if k == 8: return f"{self.c('GREATEST', 'LEAST')}({a()}, {a()}{', ' + a() if self.p(0.5) else ''})"
        if k == 9: return f"CASE WHEN {self.bool(d + 1, tab)} THEN {a()}{' ELSE ' + a() if self.p(0.6) else ''} END"
        if k == 10: return f"CAST({a()} AS {self.c('BIGINT', 'INT', 'DOUBLE', 'SMALLINT')})"
        if k == 11: return f"LENGTH({self.str(d + 1, tab)})"
        if k == 12 and tab == "t": return f"EXTRACT({self.c('YEAR', 'QUARTER', 'MONTH', 'WEEK', 'DAY', 'DOW', 'DOY', 'HOUR', 'MINUTE', 'SECOND')} FROM {self.date(d + 1)})"
        if k == 13: return f"POWER({a()}, {self.c(0, 1, 2, 3, -1, 0.5)})"
        if k == 14: return f"SQRT(ABS({a()}))"
        if k == 15: return f"(- {a()})"
        return f"CASE {a()} WHEN {self.c('0', '1', '2', 'NULL')} THEN {a()} ELSE {a()} END"

    # ---- strings
    def str(self, d=0, tab="t"):
        r = self.r
        if d >= 3 or self.p(0.35):
            return self.c(*([f"{tab}.s", f"{tab}.s2"] if tab == "t" else [f"{tab}.s"]))
        if self.p(0.1):
            return self.c("'a'", "''", "'Ab c'", "NULL", "'héllo'", "' x '")
        k = r.randint(0, 15)
        a = lambda: self.str(d + 1, tab)
        n = lambda: self.c(-3, -1, 0, 1, 2, 5)
        if k == 0: return f"({a()} || {a()})"
        if k == 1: return f"CONCAT({a()}, {a()}{', ' + a() if self.p(0.4) else ''})"
        if k == 2: return f"{self.c('LOWER', 'UPPER', 'TRIM', 'LTRIM', 'RTRIM', 'REVERSE', 'INITCAP')}({a()})"
        if k == 3: return f"REPLACE({a()}, {self.c(chr(39)+'a'+chr(39), chr(39)+chr(39), chr(39)+' '+chr(39))}, {self.c(chr(39)+'xy'+chr(39), chr(39)+chr(39))})"
        if k == 4: return f"{self.c('LEFT', 'RIGHT')}({a()}, {n()})"
        if k == 5: return f"SPLIT_PART({a()}, {self.c(chr(39)+','+chr(39), chr(39)+' '+chr(39), chr(39)+chr(39), chr(39)+'ab'+chr(39))}, {self.c(-2, -1, 0, 1, 2, 3)})"
        if k == 6: return f"{self.c('LPAD', 'RPAD')}({a()}, {self.c(0, 1, 3, 6)}{', ' + self.c(chr(39)+'xy'+chr(39), chr(39)+chr(39), chr(39)+'*'+chr(39)) })"
        if k == 7: return f"SUBSTRING({a()}, {n()}{', ' + str(self.c(-1, 0, 1, 2, 10)) if self.p(0.7) else ''})"
        if k == 8: return f"SUBSTRING({a()} FROM {n()}{' FOR ' + str(self.c(0, 1, 2, 10)) if self.p(0.6) else ''})"
        if k == 9: return f"CAST({self.num(d + 1, tab)} AS VARCHAR)"
        if k == 10: return f"COALESCE({a()}, {a()})"
        if k == 11: return f"NULLIF({a()}, {a()})"
        if k == 12: return f"CASE WHEN {self.bool(d + 1, tab)} THEN {a()}{' ELSE ' + a() if self.p(0.6) else ''} END"
        if k == 13: return f"TRIM({self.c('BOTH', 'LEADING', 'TRAILING')} {self.c(chr(39)+'a'+chr(39), chr(39)+' a'+chr(39))} FROM {a()})"
        if k == 14: return f"{self.c('GREATEST', 'LEAST')}({a()}, {a()})"
        return f"CAST({self.c('t.b', 'TRUE', 't.d') if tab == 't' else 'TRUE'} AS VARCHAR)"

    def date(self, d=0):
        k = self.r.randint(0, 6)
        if k <= 2: return "t.d"
        if k == 3: return f"(t.d {self.c('+', '-')} INTERVAL '{self.c(1, 2, 13)}' {self.c('MONTH', 'DAY', 'YEAR', 'HOUR', 'WEEK')})"
        if k == 4: return self.c("DATE '2020-01-31'", "TIMESTAMP '2024-02-29 10:00:00'", "(DATE '2020-01-31' + INTERVAL '1' MONTH)")
        if k == 5: return "CAST(t.d AS DATE)"
        return f"COALESCE(t.d, DATE '2000-01-01')"

    # ---- booleans
    def bool(self, d=0, tab="t"):
        r = self.r
        if d >= 3 or self.p(0.15):
            return self.c("t.b", "TRUE", "FALSE", "NULL") if tab == "t" else self.c("TRUE", "FALSE")
        k = r.randint(0, 14)
        cmp = self.c("=", "<>", "<", "<=", ">", ">=")
        if k <= 2: return f"{self.num(d + 1, tab)} {cmp} {self.num(d + 1, tab)}"
        if k == 3: return f"{self.str(d + 1, tab)} {cmp} {self.str(d + 1, tab)}"
        if k == 4 and tab == "t": return f"{self.date(d + 1)} {cmp} {self.c(chr(39)+'x'+chr(39), 'DATE ' + chr(39) + '2021-01-01' + chr(39), 'TIMESTAMP ' + chr(39) + '2020-12-31 23:59:59' + chr(39))}".replace("'x'", "DATE '2020-01-31'")
        if k == 5: return f"{self.c(self.num(d+1, tab), self.str(d+1, tab))} IS {self.c('', 'NOT ')}NULL"
        if k == 6: return f"({self.bool(d + 1, tab)} {self.c('AND', 'OR')} {self.bool(d + 1, tab)})"
        if k == 7: return f"NOT ({self.bool(d + 1, tab)})"
        if k == 8: return f"{self.num(d + 1, tab)} {self.c('', 'NOT ')}IN ({', '.join(self.r.sample(['0', '1', '-1', 'NULL', '2.5', '5', '-3'], self.r.randint(1, 4)))})"
        if k == 9: return f"{self.str(d + 1, tab)} {self.c('', 'NOT ')}IN ({', '.join(self.r.sample([chr(39)+'a'+chr(39), chr(39)+chr(39), 'NULL', chr(39)+'é'+chr(39), chr(39)+'ABC'+chr(39)], self.r.randint(1, 3)))})"
        if k == 10: return f"{self.num(d + 1, tab)} {self.c('', 'NOT ')}BETWEEN {self.num(d + 1, tab)} AND {self.num(d + 1, tab)}"
        if k == 11:
            pat = self.c("'a%'", "'%a'", "'%'", "'_'", "'a_b'", "'a\\_b'", "'%\\%%'", "''", "'A%'", "'%b%c'", "'__'", "'%_'", "'h_llo%'", "'%.%'", "'a[b]%'", "'(a'")
            return f"{self.str(d + 1, tab)} {self.c('', 'NOT ')}{self.c('LIKE', 'ILIKE')} {pat}"
        if k == 12: return f"({self.bool(d + 1, tab)}) IS {self.c('', 'NOT ')}{self.c('TRUE', 'FALSE')}"
        if k == 13: return f"{self.c('STARTS_WITH', 'ENDS_WITH')}({self.str(d + 1, tab)}, {self.c(chr(39)+'a'+chr(39), chr(39)+chr(39), 't.s2' if tab == 't' else chr(39)+'b'+chr(39))})"
        return f"COALESCE({self.bool(d + 1, tab)}, {self.bool(d + 1, tab)})"

    def any(self, d=0):
        k = self.r.randint(0, 9)
        if k <= 4: return self.num(d)
        if k <= 7: return self.str(d)
        if k == 8: return self.bool(d)
        return self.date(d)

    # ---- aggregates
    def agg(self):
        k = self.r.randint(0, 13)
        x = self.num(1)
        if k == 0: return f"SUM({self.c('', 'DISTINCT ')}{x})"
        if k == 1: return f"COUNT({self.c('', 'DISTINCT ')}{self.any(1)})"
        if k == 2: return "COUNT(*)"
        if k == 3: return f"AVG({self.c('', 'DISTINCT ')}{x})"
        if k == 4: return f"{self.c('MIN', 'MAX')}({self.any(1)})"
        if k == 5: return f"MEDIAN({x})"
        if k == 6: return f"{self.c('STDDEV', 'STDDEV_SAMP', 'VARIANCE', 'VAR_SAMP')}({x})"
        if k == 7: return f"{self.c('COVAR_SAMP', 'COVAR_POP')}({x}, {self.num(1)})"
        if k == 8: return f"STRING_AGG({self.str(1)}, {self.c(chr(39)+','+chr(39), chr(39)+chr(39))} ORDER BY {self.str(1)}, {self.num(1)})"
        if k == 9: return f"SUM({x}) + {self.c('1', 'COUNT(*)', 'MIN(t.i)')}"
        if k == 10: return f"{self.c('SUM', 'AVG', 'MAX')}(CASE WHEN {self.bool(1)} THEN {x}{' ELSE ' + self.num(2) if self.p(0.5) else ''} END)"
        if k == 11: return f"COALESCE({self.c('SUM', 'MAX', 'AVG')}({x}), {self.c('0', '-1')})"
        if k == 12: return f"COUNT({x}) {self.c('+', '*', '-')} {self.c('SUM', 'MIN')}({self.num(1)})"
        return f"{self.c('SUM', 'MIN', 'MAX', 'AVG', 'COUNT')}({x}) / NULLIF(COUNT(*), 0)"

    # ---- queries
    def query(self):
        k = self.r.randint(0, 14)
        if k <= 3:
            n = self.r.randint(1, 3)
            cols = ", ".join(f"{self.any()} AS c{m}" for m in range(n))
            w = f" WHERE {self.bool()}" if self.p(0.4) else ""
            return f"SELECT {cols} FROM t{w}", False
        if k <= 6:
            key = self.c("t.k", "t.b", "t.s", "t.k % 2", "t.i > 0", "COALESCE(t.k, -1)", "LOWER(t.s)", "EXTRACT(YEAR FROM t.d)", "t.d", "CAST(t.f AS BIGINT)", "t.f")
            aggs = ", ".join(f"{self.agg()} AS a{m}" for m in range(self.r.randint(1, 3)))
            w = f" WHERE {self.bool()}" if self.p(0.3) else ""
            h = f" HAVING {self.c('COUNT(*) > 1', 'SUM(t.i) > 0', 'MAX(t.f) IS NOT NULL', 'MIN(t.s) < ' + chr(39) + 'b' + chr(39), 'AVG(t.j) >= 0')}" if self.p(0.3) else ""
            return f"SELECT {key} AS key, {aggs} FROM t{w} GROUP BY {key}{h}", False
        if k <= 8:
            aggs = ", ".join(f"{self.agg()} AS a{m}" for m in range(self.r.randint(1, 3)))
            w = f" WHERE {self.bool()}" if self.p(0.5) else ""
            return f"SELECT {aggs} FROM t{w}", False
        if k == 9:
            e = self.any()
            return f"SELECT DISTINCT {e} AS c0{', ' + self.any() + ' AS c1' if self.p(0.4) else ''} FROM t", False
        if k == 10:
            op = self.c("UNION", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL")
            a, b = self.c(("t.k", "u.k"), ("t.s", "u.s"), ("t.i", "u.i"), ("t.f", "u.f"), ("t.k, t.s", "u.k, u.s"))
            return f"SELECT {a} FROM t {op} SELECT {b} FROM u", False
        if k == 11:
            side = self.c("", "LEFT ", "RIGHT ", "FULL ", "INNER ")
            on = self.c("t.k = u.k", "t.s = u.s", "t.k = u.k AND t.i = u.i", "t.k = u.k AND u.i > 0", "t.k = u.k AND t.i > u.i", "t.k = u.k AND t.f < 1", "t.i < u.i", "t.k = u.k OR t.s = u.s", "t.k + 1 = u.k", "COALESCE(t.k, 0) = COALESCE(u.k, 0)", "t.f = u.f")
            w = f" WHERE {self.c('u.i IS NULL', 't.i IS NULL', 'u.s > ' + chr(39) + 'a' + chr(39), 't.i > 0', 'u.k IS NOT NULL')}" if self.p(0.3) else ""
            cols = self.c("t.k, t.i, u.k, u.i", "t.s, u.s", "t.i, u.f", "COUNT(*)", "t.k, COUNT(u.i)")
            g = " GROUP BY t.k" if "COUNT(u.i)" in cols else ""
            return f"SELECT {cols} FROM t {side}JOIN u ON {on}{w}{g}", False
        if k == 12:
            q = self.c(
                "SELECT t.i FROM t WHERE t.k IN (SELECT u.k FROM u)",
                "SELECT t.i FROM t WHERE t.k NOT IN (SELECT u.k FROM u)",
                "SELECT t.i FROM t WHERE t.k NOT IN (SELECT u.k FROM u WHERE u.k IS NOT NULL)",
                "SELECT t.i, t.k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k)",
                "SELECT t.i, t.k FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k)",
                "SELECT t.i, t.k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.i <> t.i)",
                "SELECT t.i, (SELECT MAX(u.i) FROM u WHERE u.k = t.k) AS m FROM t",
                "SELECT t.i, (SELECT COUNT(*) FROM u WHERE u.k = t.k) AS m FROM t",
                "SELECT t.i, (SELECT SUM(u.i) FROM u WHERE u.k = t.k) AS m FROM t",
                "SELECT t.i FROM t WHERE t.i > (SELECT AVG(u.i) FROM u)",
                "SELECT t.i FROM t WHERE t.i > (SELECT AVG(u.i) FROM u WHERE u.k = t.k)",
                "SELECT t.i FROM t WHERE t.i < (SELECT COUNT(*) FROM u WHERE u.k = t.k)",
                "SELECT t.i FROM t WHERE t.i = (SELECT MAX(u.i) FROM u WHERE u.k = t.k)",
                "SELECT t.i, (SELECT MIN(u.s) FROM u) AS m FROM t",
                "SELECT t.k FROM t WHERE t.s IN (SELECT u.s FROM u WHERE u.k = t.k)",
                "SELECT t.k FROM t WHERE t.s NOT IN (SELECT u.s FROM u WHERE u.k = t.k)",
                "SELECT t.k FROM t WHERE t.i NOT IN (SELECT u.i FROM u WHERE u.k > 1)",
                "SELECT t.k FROM t WHERE (t.i, t.k) IN (SELECT u.i, u.k FROM u)",
                "SELECT t.k, t.i FROM t WHERE t.i IN (SELECT u.i FROM u) OR t.k = 1",
                "SELECT t.k, t.i FROM t WHERE NOT (t.i IN (SELECT u.i FROM u))",
                "SELECT t.k, t.i FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k) OR t.i > 5",
                "SELECT t.k, t.i FROM t WHERE t.i > ALL (SELECT u.i FROM u)",
                "SELECT x.k, x.n FROM (SELECT t.k, COUNT(*) AS n FROM t GROUP BY t.k) x WHERE x.n > 1",
                "WITH c AS (SELECT t.k, SUM(t.i) AS s FROM t GROUP BY t.k) SELECT c.k, c.s, u.i FROM c LEFT JOIN u ON c.k = u.k",
                "SELECT t.k FROM t WHERE t.k IN (SELECT u.k FROM u WHERE u.i > t.i)",
                "SELECT t.k FROM t WHERE t.k = ANY (SELECT u.k FROM u)",
                "SELECT t.i, (SELECT u.i FROM u WHERE u.k = t.k AND u.i IS NOT NULL ORDER BY u.i LIMIT 1) AS m FROM t",
            )
            return q, False
        if k == 13:
            f = self.c("ROW_NUMBER()", "RANK()", "DENSE_RANK()", "NTILE(3)", "PERCENT_RANK()", "CUME_DIST()", "LAG(t.i)", "LEAD(t.i, 2, -1)",
                       "FIRST_VALUE(t.i)", "LAST_VALUE(t.i)", "SUM(t.i)", "AVG(t.f)", "COUNT(t.i)", "COUNT(*)", "MIN(t.s)", "MAX(t.d)", "SUM(t.f)")
            part = self.c("", "PARTITION BY t.k ", "PARTITION BY t.b ", "PARTITION BY t.s ")
            ordk = self.c("t.i", "t.f", "t.s", "t.d", "t.i DESC", "t.f DESC NULLS LAST", "t.i NULLS FIRST", "t.k, t.i", "t.i + t.j")
            fr = self.c("", "", "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", "ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING",
                        "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING", "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", "ROWS 2 PRECEDING")
            if f in ("ROW_NUMBER()", "NTILE(3)", "LAG(t.i)", "LEAD(t.i, 2, -1)") or "ROWS" in fr:
                # need total order to be deterministic: add all columns
                ordk = ordk + ", t.k, t.i, t.j, t.f, t.g, t.s, t.s2, t.d, t.b"
                # still can tie on fully duplicate rows; fine: identical rows give identical outputs per multiset? not for row_number
            over = f"OVER ({part}ORDER BY {ordk} {fr})" if self.p(0.85) or f in ("ROW_NUMBER()", "RANK()", "DENSE_RANK()", "NTILE(3)", "PERCENT_RANK()", "CUME_DIST()", "LAG(t.i)", "LEAD(t.i, 2, -1)", "FIRST_VALUE(t.i)", "LAST_VALUE(t.i)") else f"OVER ({part.strip()})"
            return f"SELECT t.k, t.i, t.s, {f} {over} AS w FROM t", False
        # ORDER BY + LIMIT over all selected cols
        n = self.r.randint(1, 2)
        exprs = [self.any() for _ in range(n)]
        cols = ", ".join(f"{e} AS c{m}" for m, e in enumerate(exprs))
        ob = ", ".join(f"c{m} {self.c('', 'ASC', 'DESC')} {self.c('', 'NULLS FIRST', 'NULLS LAST')}" for m in range(n))
        lim = self.c("", " LIMIT 3", " LIMIT 2 OFFSET 1", " OFFSET 2", " LIMIT 0")
        return f"SELECT {cols} FROM t ORDER BY {ob}{lim}", True
