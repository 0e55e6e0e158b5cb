"""TPC-H's official SQL as SQL sources, collected in process on the CPU (Polars' streaming engine): best of N seconds per query.

    cd <tree> && PYTHONPATH=<tree> /work/main/.venv/bin/python bench/sql_count_ab.py q01,q04,q13,q21,q22 5

Run it from two trees (``git archive`` of each) one after the other for an A/B; SF 1 data is generated into
/tmp/spw_tpch_sf1 the first time (tpchgen-cli). Used for SQL's COUNT as BIGINT sums (RESULTS, ninth session).
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import spillway  # noqa: E402
from bench.gpu_tpch import generate  # noqa: E402
from bench.tpch_examples import QUERIES, TABLES  # noqa: E402
from spillway.jobs.polars_frame import build_lazyframe  # noqa: E402
from spillway.jobs.spec import JobSpec  # noqa: E402
from spillway.jobs.validate import plan_spec  # noqa: E402

data = generate(Path("/tmp/spw_tpch_sf1"), 1, 1)
out: dict[str, object] = {"tree": str(Path(spillway.__file__).parent.parent)}
for name in sys.argv[1].split(","):
    sources: dict[str, object] = {table: {"format": "parquet", "path": str(data / table)} for table in TABLES}
    sources["answer"] = {"sql": QUERIES[name]}
    spec = {"name": f"sql_{name}", "sources": sources, "source": "answer", "sink": {"path": "/tmp/unused-sql-count-ab"}}
    frame = build_lazyframe(plan_spec(JobSpec.model_validate(spec)))
    best = 1e9
    for _ in range(int(sys.argv[2])):
        started = time.perf_counter()
        frame.collect(engine="streaming")
        best = min(best, time.perf_counter() - started)
    out[name] = round(best, 4)
print(json.dumps(out))
