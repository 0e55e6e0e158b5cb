"""One query of the differential run on Spillway, PostgreSQL and DuckDB side by side: which one deviates.

DuckDB is the fast referee of fuzz.py; where it and Spillway differ, PostgreSQL (the language's reference,
docs/spec.md "SQL sources") decides. It runs on the four datasets fuzz.py uses (seeds 1000-1003), the tables
loaded into temporary tables of ``$SPILLWAY_TEST_POSTGRES_URL`` (default: the local test database)::

    cd bench/sql_differential && PYTHONPATH=../..:. ../../.venv/bin/python pg_referee.py "SELECT …"
    … pg_referee.py --triage /tmp/sqlfuzz/results_0.jsonl   # each of fuzz.py's mismatches: Spillway against PostgreSQL

Seen with it (2026-12-06): fuzz queries 340 and 447 differ from DuckDB only where DuckDB counts a negative
``SUBSTRING`` start from the end; Spillway's answers are PostgreSQL's.
"""
import json
import os
import sys

import psycopg
from harness import compare, duck, make_tables, service, write

URL = os.environ.get("SPILLWAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test").replace("+psycopg", "")
T_COLUMNS = "k bigint, i bigint, j bigint, f float8, g float8, s text, s2 text, d timestamp, b boolean"
U_COLUMNS = "k bigint, i bigint, s text, f float8"


def postgres(sql: str, t, u) -> list | str:
    with psycopg.connect(URL, autocommit=True) as con, con.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE t ({T_COLUMNS})")
        cur.execute(f"CREATE TEMP TABLE u ({U_COLUMNS})")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", t.rows())
        cur.executemany("INSERT INTO u VALUES (%s, %s, %s, %s)", u.rows())
        try:
            cur.execute(sql)
            return cur.fetchall()
        except psycopg.Error as exc:
            return f"error: {exc}".splitlines()[0]


def shown(result) -> object:
    return sorted(map(repr, result)) if isinstance(result, list) else result


def side_by_side(sql: str) -> None:
    for seed in range(1000, 1004):
        t, u = make_tables(seed)
        pt, pu = write(t, u, str(seed))
        ours = service(sql, pt, pu)
        print(seed, "spillway  ", shown(ours[1].rows()) if ours[0] == "ok" else ours)
        print(seed, "postgresql", shown(postgres(sql, t, u)))
        theirs = duck(sql, t, u)
        print(seed, "duckdb    ", shown(theirs[1]) if theirs[0] == "ok" else theirs)


def triage(results: str) -> None:
    """For each mismatch fuzz.py wrote: same as PostgreSQL on every dataset, PostgreSQL cannot run it, or the first difference."""
    data = {}
    for seed in range(1000, 1004):
        t, u = make_tables(seed)
        data[seed] = (t, u, *write(t, u, str(seed)))
    for line in open(results):
        row = json.loads(line)
        if row["st"] != "mismatch":
            continue
        verdict = "same as postgresql"
        for t, u, pt, pu in data.values():
            ours, theirs = service(row["sql"], pt, pu), postgres(row["sql"], t, u)
            if isinstance(theirs, str):
                verdict = f"postgresql cannot run it: {theirs[:100]}"
                break
            if ours[0] != "ok":
                verdict = f"spillway: {ours[0]}"
                break
            if (difference := compare(ours[1].rows(), theirs, "ORDER BY" in row["sql"].rsplit(")", 1)[-1])) is not None:
                verdict = "DIFFERS: " + difference.replace("duckdb", "postgresql")[:200]
                break
        print(row["q"], verdict)


if __name__ == "__main__":
    if sys.argv[1] == "--triage":
        triage(sys.argv[2])
    else:
        side_by_side(sys.argv[1])
