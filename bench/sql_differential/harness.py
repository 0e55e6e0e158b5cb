"""Run SQL through Spillway's SQL-source path and through DuckDB; compare."""
import math, datetime as dt, decimal, os, random, traceback, warnings
import polars as pl, duckdb
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.errors import SpecError
warnings.simplefilter("ignore")
OUT = os.environ.get("SPILLWAY_SQL_FUZZ_DIR", "/tmp/sqlfuzz")
D = os.path.join(OUT, "data"); os.makedirs(D, exist_ok=True)

# DuckDB has no initcap: PostgreSQL's (first letter of each alphanumeric run upper, the rest lower)
INITCAP = """CREATE MACRO initcap(x) AS CASE WHEN x IS NULL THEN NULL ELSE array_to_string(list_transform(regexp_extract_all(x, '[^\\pL\\pN]+|[\\pL\\pN]+'), lambda w: upper(w[1]) || lower(w[2:])), '') END"""
STR_POOL = ["a", "", " a ", "Ab c", "a,b,c", "é", "héllo wörld", "a_b", "a%b", "ABC", "abc", "x", "b", "  ", "aa", "hello world foo"]

def make_tables(seed, nan=False):
    r = random.Random(seed)
    def maybe(v, p=0.2): return None if r.random() < p else v
    n = r.choice([0, 1, 2, 3, 5, 8, 12, 20]) if seed % 7 else 0
    m = r.choice([0, 1, 3, 6, 10])
    fl = [-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.25, -3.75, 10.0, 1e-3, 123.456, 7.0]
    if nan: fl = fl + [float("nan")] * 2
    dates = [dt.datetime(2020, 1, 31), dt.datetime(2024, 2, 29), dt.datetime(1999, 12, 31), dt.datetime(2023, 3, 15, 13, 45, 30), dt.datetime(2021, 1, 1), dt.datetime(2020, 12, 31, 23, 59, 59)]
    t = pl.DataFrame({
        "k": [maybe(r.randint(0, 3)) for _ in range(n)],
        "i": [maybe(r.randint(-10, 10)) for _ in range(n)],
        "j": [maybe(r.choice([-3, -2, -1, 0, 1, 2, 3, 7])) for _ in range(n)],
        "f": [maybe(r.choice(fl)) for _ in range(n)],
        "g": [maybe(r.choice(fl)) for _ in range(n)],
        "s": [maybe(r.choice(STR_POOL)) for _ in range(n)],
        "s2": [maybe(r.choice(STR_POOL)) for _ in range(n)],
        "d": [maybe(r.choice(dates)) for _ in range(n)],
        "b": [maybe(r.random() < 0.5) for _ in range(n)],
    }, schema={"k": pl.Int64, "i": pl.Int64, "j": pl.Int64, "f": pl.Float64, "g": pl.Float64, "s": pl.String, "s2": pl.String, "d": pl.Datetime("us"), "b": pl.Boolean})
    u = pl.DataFrame({
        "k": [maybe(r.randint(0, 4)) for _ in range(m)],
        "i": [maybe(r.randint(-5, 5)) for _ in range(m)],
        "s": [maybe(r.choice(STR_POOL)) for _ in range(m)],
        "f": [maybe(r.choice(fl)) for _ in range(m)],
    }, schema={"k": pl.Int64, "i": pl.Int64, "s": pl.String, "f": pl.Float64})
    return t, u

def write(t, u, tag):
    pt, pu = f"{D}/t_{tag}.parquet", f"{D}/u_{tag}.parquet"
    t.write_parquet(pt); u.write_parquet(pu)
    return pt, pu

def service(sql, pt, pu, cpu=True):
    spec = JobSpec.model_validate({"name": "f", "sources": {"t": {"format": "parquet", "path": pt}, "u": {"format": "parquet", "path": pu},
                                   "q": {"sql": sql}}, "source": "q", "sink": {"path": os.path.join(OUT, "out")}})
    try:
        plan = plan_spec(spec)
        frame = build_lazyframe(plan, filters_before_casts=cpu, ieee_comparisons=not cpu)
    except SpecError as e:
        return ("refused", str(e)[:300])
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt): raise
        return ("planerror", f"{type(e).__name__}: {str(e)[:300]}")
    try:
        res = frame.collect(engine="streaming")  # as a CPU job runs it (jobs/polars_run.py): the in-memory engine differs
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt): raise
        return ("runerror", f"{type(e).__name__}: {str(e)[:300]}")
    return ("ok", res)

def duck(sql, t, u):
    con = duckdb.connect()
    con.execute("SET default_null_order='nulls_last_on_asc_first_on_desc'")
    con.execute("SET error_on_division_by_zero=false")
    con.execute(INITCAP)
    con.execute("CREATE MACRO rnd(x, n := 0) AS round_even(x, n)")  # documented: round of a float is half-to-even
    con.register("t", t.to_arrow()); con.register("u", u.to_arrow())
    try:
        rel = con.execute(sql.replace("ROUND(", "RND("))
        rows = rel.fetchall()
        return ("ok", rows)
    except Exception as e:
        return ("error", f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        con.close()

def norm(v):
    if v is None: return ("N",)
    if isinstance(v, bool): return ("B", v)
    if isinstance(v, (int, float, decimal.Decimal)):
        x = float(v)
        if math.isnan(x): return ("NaN",)
        return ("F", x)
    if isinstance(v, dt.datetime): return ("T", v.replace(tzinfo=None))
    if isinstance(v, dt.date): return ("T", dt.datetime(v.year, v.month, v.day))
    if isinstance(v, dt.timedelta): return ("D", v.total_seconds())
    if isinstance(v, str): return ("S", v)
    if isinstance(v, (list, tuple)): return ("L", tuple(norm(x) for x in v))
    return ("O", repr(v))

def sortkey(row):
    out = []
    for x in row:
        if x[0] == "F":
            y = x[1]
            out.append(("F", float(f"{y:.6g}") if math.isfinite(y) else y))
        else:
            out.append((x[0], repr(x[1:])))
    return out

def close(a, b):
    if a[0] != b[0]: return False
    if a[0] == "F":
        x, y = a[1], b[1]
        if math.isinf(x) or math.isinf(y): return x == y
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    return a == b

def compare(srows, drows, ordered):
    s = [tuple(norm(v) for v in r) for r in srows]
    d = [tuple(norm(v) for v in r) for r in drows]
    if len(s) != len(d): return f"rowcount {len(s)} vs duckdb {len(d)}"
    if s and len(s[0]) != len(d[0]): return f"colcount {len(s[0])} vs {len(d[0])}"
    if not ordered:
        s = sorted(s, key=sortkey); d = sorted(d, key=sortkey)
    for a, b in zip(s, d):
        if not all(close(x, y) for x, y in zip(a, b)):
            return f"row {a} vs duckdb {b}"
    return None

def check(sql, tag, t, u, pt, pu, ordered=False, duck_sql=None, cpu=True):
    sv = service(sql, pt, pu, cpu)
    dk = duck(duck_sql or sql, t, u)
    if sv[0] == "refused": return ("refused", sv[1])
    if sv[0] in ("planerror", "runerror"):
        return (sv[0], sv[1] + (" | duckdb: " + dk[1] if dk[0] == "error" else " | duckdb ok"))
    if dk[0] == "error": return ("duckerror", dk[1])
    diff = compare(sv[1].rows(), dk[1], ordered)
    if diff: return ("mismatch", diff)
    return ("same", None)
