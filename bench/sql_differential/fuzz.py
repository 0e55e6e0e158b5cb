"""Random SQL sources against DuckDB (a helper's differential run, 2026-12-05): ``start count datasets``.

    cd bench/sql_differential && PYTHONPATH=../.. ../../.venv/bin/python fuzz.py 0 300 4

Runs queries ``start``..``start+count`` of gen.py's generator over ``datasets`` random table pairs through the Polars
engine's SQL path (harness.service) and DuckDB (harness.duck), and writes each refusal, error and difference to
``$SPILLWAY_SQL_FUZZ_DIR/results_<start>.jsonl`` (default /tmp/sqlfuzz); it prints the counts. A difference is a
lead, not a verdict: check it against PostgreSQL's semantics (harness.py says how values are compared).
"""
import os
import sys, json, collections, time
from harness import *
from gen import G
start, count, nds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = open(os.path.join(OUT, f"results_{start}.jsonl"), "w")
datasets = []
for s in range(nds):
    t, u = make_tables(1000 + s); pt, pu = write(t, u, str(1000 + s)); datasets.append((str(1000 + s), t, u, pt, pu))
stats = collections.Counter()
t0 = time.time()
for q in range(start, start + count):
    sql, ordered = G(q).query()
    for tag, t, u, pt, pu in datasets:
        st, msg = check(sql, tag, t, u, pt, pu, ordered)
        stats[st] += 1
        if st in ("refused", "duckerror") :
            out.write(json.dumps({"q": q, "sql": sql, "ds": tag, "st": st, "msg": msg}) + "\n")
            break  # schema-level: same for all datasets
        if st != "same":
            out.write(json.dumps({"q": q, "sql": sql, "ds": tag, "st": st, "msg": msg}) + "\n")
            break
    out.flush()
print(stats, time.time() - t0)
