#!/usr/bin/env bash
# One GPU session's measurements, each part one device call of at most 600 s, on a warm machine
# with RAPIDS and cudf-polars staged (../shared/gpu/README.md):
#
#     bash bench/gpu_session.sh tests      # pytest -m gpu; the control-plane bench on the 16 cores; CUDA context probe
#     bash bench/gpu_session.sh tpch10 [--rmm-pool 32GB]   # TPC-H SF 10 over REST, side by side with cudf-polars and DuckDB
#     bash bench/gpu_session.sh tpch100    # TPC-H SF 100, the same, two iterations each (data generated first, ~90 s)
#     bash bench/gpu_session.sh spill [--limit 2GB]   # after tpch10: jobs over a device limit below their working set
#
# Logs and JSON go under $OUT; bench/RESULTS.md records what they said.
set -u
source /tmp/site/gpu-env.sh
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
chmod +x /tmp/site/bin/* 2>/dev/null
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"

part=${1:-}; shift || true  # what follows goes to bench/gpu_tpch.py (e.g. --rmm-pool 32GB)
case "$part" in
tests)
    timeout 330 python3 -m pytest -m gpu tests/test_gpu_support.py tests/test_gpu.py tests/test_engines.py tests/test_expr.py \
        tests/test_functions_reshape_gpu.py tests/test_gpu_placement.py $(ls tests/test_sql*.py 2>/dev/null) -o addopts="" -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests rc=$?"; tail -15 "$OUT/gpu_tests.log"
    # Does asking cudf-polars' translator (the service does, at submit) create a CUDA context in the service process?
    timeout 60 python3 - > "$OUT/context_probe.log" 2>&1 <<'PY'
import os, subprocess, time
import polars as pl
from jobs.gpu_support import gpu_refusal
frame = pl.LazyFrame({"a": [1, 2, 3], "t": ["2024-01-01"] * 3}).select(pl.col("a") * 2, pl.col("t").str.to_datetime())
start = time.perf_counter()
print("refusal:", gpu_refusal(frame), f"({(time.perf_counter() - start) * 1000:.1f} ms, first call)")
start = time.perf_counter()
print("refusal:", gpu_refusal(frame.select(pl.col("a"))), f"({(time.perf_counter() - start) * 1000:.1f} ms, second call)")
apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"], capture_output=True, text=True).stdout
print("this pid", os.getpid(), "compute apps:", apps.strip() or "(none)")
PY
    cat "$OUT/context_probe.log"
    timeout 200 python3 bench/control_plane.py --out "$OUT" --runs 10 > "$OUT/control_plane.log" 2>&1
    echo "control plane rc=$?"; tail -48 "$OUT/control_plane.log"
    ;;
tpch10)
    timeout 560 python3 bench/gpu_tpch.py --out "$OUT" --work /tmp/spw_tpch --sf 10 --parts 1 --gpus 0 \
        --engines spillway,spillway-plan,cudf-polars,duckdb --spillway-engines polars --iterations 2 --deadline 520 "$@" \
        > "$OUT/tpch10.log" 2>&1
    echo "tpch10 rc=$?"; tail -40 "$OUT/tpch10.log"
    ;;
tpch100)
    timeout 580 python3 bench/gpu_tpch.py --out "$OUT" --work /tmp/spw_tpch100 --sf 100 --parts 1 --gpus 0 \
        --engines spillway,cudf-polars,duckdb --spillway-engines polars --iterations 2 --deadline 540 "$@" \
        > "$OUT/tpch100.log" 2>&1
    echo "tpch100 rc=$?"; tail -40 "$OUT/tpch100.log"
    ;;
spill)
    timeout 560 python3 bench/gpu_spill.py --out "$OUT" --data /tmp/spw_tpch/sf10 --queries q01,q09,q18,q21 "$@" > "$OUT/spill.log" 2>&1
    echo "spill rc=$?"; tail -30 "$OUT/spill.log"
    ;;
*)
    echo "usage: bash bench/gpu_session.sh tests|tpch10|tpch100|spill" >&2; exit 2
    ;;
esac
