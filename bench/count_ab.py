"""Spillway's plan for some TPC-H queries, collected in process on the CPU (streaming): best of N seconds per query.

    cd <tree> && PYTHONPATH=<tree> /work/main/.venv/bin/python bench/count_ab.py q01,q04,q13 5

Run it from two trees (``git archive`` of each) one after the other for an A/B; SF 1 data is generated into
/tmp/spw_tpch_sf1 the first time (tpchgen-cli). Used for the int64 row counts (RESULTS, eighth session).
"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import spillway  # noqa: E402
from bench.gpu_tpch import generate, plan_engine
data = generate(Path("/tmp/spw_tpch_sf1"), 1, 1)
scratch = Path("/tmp/ab_scratch")
scratch.mkdir(parents=True, exist_ok=True)
run = plan_engine(data, scratch, "cpu")
out = {"tree": str(Path(spillway.__file__).parent.parent)}
for q in sys.argv[1].split(","):
    best = 1e9
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter(); run(q); best = min(best, time.perf_counter() - t)
    out[q] = round(best, 4)
print(json.dumps(out))
