#!/usr/bin/env bash
# One GPU session's measurements, each part one device call of at most 600 s, on a warm machine
# with RAPIDS and cudf-polars staged (../shared/gpu/README.md):
#
#     bash bench/gpu_session.sh tests [-s]  # pytest -m gpu over the whole suite (-s: with what each test prints)
#     bash bench/gpu_session.sh first      # the whole GPU suite, then bench/gpu_refusal_cost.py: one call after the install
#     bash bench/gpu_session.sh tpch10 [--rmm-pool 32GB]   # TPC-H SF 10 over REST, side by side with cudf-polars and DuckDB
#     bash bench/gpu_session.sh tpch100    # TPC-H SF 100, the same, two iterations each (data generated first, ~90 s)
#     bash bench/gpu_session.sh spill [--limit 2GB]   # after tpch10: jobs over a device limit below their working set
#     bash bench/gpu_session.sh concurrent # after tpch10: eight jobs at once on one GPU, 1, 2 and 4 workers
#     bash bench/gpu_session.sh multi      # TPC-H SF 10, every query across two workers sharing the GPU (DaskEngine)
#     bash bench/gpu_session.sh long [--copies 7000]  # one query over 5 minutes across two workers sharing the GPU (worker-ttl is 5); on an H100 a copy of SF 10 lineitem took 0.054 s at scale, twice less than calibrated
#     bash bench/gpu_session.sh multi-tests  # the GPU tests of jobs across the workers, of faults and of the submit's GPU check; its cost by file count
#     bash bench/gpu_session.sh plans      # TPC-H SF 10 over REST and in process with both orders of filters and read casts; semi joins two ways
#     bash bench/gpu_session.sh verify [--no-long]  # the CPU-only work of the ninth to twelfth sessions: chunk progress, SQL counts, TPC-H SQL on cudf-polars, SQL keys of unlike types, hash-join forms, FILTER, correlated names; then a 2000-copy long query's live progress
#
# Logs and JSON go under $OUT; bench/RESULTS.md records what they said.
set -u
source /tmp/site/gpu-env.sh
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
chmod +x /tmp/site/bin/* 2>/dev/null
export PATH=/tmp/site/bin:$PATH  # the staged tpchgen-cli: the TPC-H tests' data (else they skip)
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"

gpu_suite() {  # the whole GPU suite within $1 seconds; the other arguments go to pytest
    local limit=$1; shift
    timeout "$limit" python3 -m pytest -m gpu tests/ -o addopts="" -q -rs -p no:cacheprovider --durations=15 --continue-on-collection-errors "$@" > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests rc=$?"; grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -40
}
refusal_cost() {  # what the submit's question to cudf-polars costs by file count, within $1 seconds
    timeout "$1" python3 bench/gpu_refusal_cost.py --files 10,300,2300 --out "$OUT" > "$OUT/gpu_refusal_cost.log" 2>&1
    echo "refusal cost rc=$?"; cat "$OUT/gpu_refusal_cost.log"
}

part=${1:-}; shift || true  # what follows goes to bench/gpu_tpch.py (e.g. --rmm-pool 32GB)
case "$part" in
tests)
    # Every GPU-marked test of the suite (the fault tests start two workers on the one GPU).
    gpu_suite 560 "$@"
    ;;
tpch10)
    timeout 560 python3 bench/gpu_tpch.py --out "$OUT" --work /tmp/spw_tpch --sf 10 --parts 1 --gpus 0 \
        --engines spillway,spillway-plan,cudf-polars,duckdb --spillway-engines auto --gpu-trace-progress on,off --iterations 2 --deadline 520 "$@" \
        > "$OUT/tpch10.log" 2>&1
    echo "tpch10 rc=$?"; tail -40 "$OUT/tpch10.log"
    ;;
tpch100)
    timeout 580 python3 bench/gpu_tpch.py --out "$OUT" --work /tmp/spw_tpch100 --sf 100 --parts 1 --gpus 0 \
        --engines spillway,cudf-polars,duckdb --spillway-engines auto --iterations 2 --deadline 540 "$@" \
        > "$OUT/tpch100.log" 2>&1
    echo "tpch100 rc=$?"; tail -40 "$OUT/tpch100.log"
    ;;
multi)
    # One job across all GPU workers (cudf-polars' DaskEngine, 2 workers sharing the H200) beside one worker in memory, and cudf-polars' own DaskEngine.
    timeout 560 python3 bench/gpu_tpch.py --out "$OUT" --work /tmp/spw_tpch --sf 10 --parts 1 --engines spillway,cudf-polars,cudf-polars-dask,duckdb \
        --gpus 0,0 --gpu-multi-worker always --spillway-engines auto --gpu-trace-progress off --iterations 2 --deadline 520 "$@" \
        > "$OUT/multi.log" 2>&1
    echo "multi rc=$?"; tail -40 "$OUT/multi.log"
    ;;
long)
    # Within one 600 s call that also installs the wheels (~15 s).
    timeout 565 python3 bench/long_query.py --out "$OUT" --work /tmp/spw_tpch --sf 10 --target-s 340 --deadline 540 "$@" > "$OUT/long_query.log" 2>&1
    echo "long rc=$?"; tail -45 "$OUT/long_query.log"
    ;;
multi-tests)
    # The GPU tests of jobs across the workers and of faults (two workers sharing the GPU): ~100 s; then what the
    # submit's question to cudf-polars costs by file count (bench/gpu_refusal_cost.py).
    timeout 300 python3 -m pytest -m gpu tests/test_gpu_multi.py tests/test_gpu_faults.py tests/test_gpu_support.py tests/test_csv_edge_agreement.py tests/test_polars_counts.py tests/test_rank_progress.py -o addopts="" -q -rs -p no:cacheprovider "$@" \
        > "$OUT/gpu_multi_tests.log" 2>&1
    echo "multi tests rc=$?"; tail -15 "$OUT/gpu_multi_tests.log"
    refusal_cost 200
    ;;
verify)
    # What the ninth to twelfth sessions built without a GPU (~120 s of tests), then the long query's progress across two ranks (~200 s).
    long=1; if [ "${1:-}" = "--no-long" ]; then long=0; shift; fi
    timeout 200 python3 -m pytest -m gpu tests/test_gpu_trace_progress.py tests/test_rank_progress.py tests/test_sql_tpch.py tests/test_sql_source.py tests/test_sql_polars_forms.py tests/test_sql_key_types.py tests/test_sql_nan_greatest.py \
        tests/test_sql_hash_join_forms.py tests/test_sql_filters.py tests/test_sql_correlated_names.py tests/test_nan.py tests/test_polars_counts.py "tests/test_gpu_multi.py::test_a_job_runs_across_both_workers_and_commits_the_ranks_files" \
        -o addopts="" -q -rs -p no:cacheprovider "$@" > "$OUT/gpu_verify_tests.log" 2>&1
    echo "verify tests rc=$?"; tail -15 "$OUT/gpu_verify_tests.log"
    [ "$long" = 1 ] || exit 0
    timeout 330 python3 bench/long_query.py --out "$OUT" --work /tmp/spw_tpch --sf 10 --copies 2000 --deadline 310 > "$OUT/long_query.log" 2>&1
    echo "long rc=$?"; grep -E '"(state|run_s|changes|longest_unchanged_s|answer)"' "$OUT/long_query.json"
    ;;
first)
    # A fresh tree's first GPU call, after the install: the whole GPU suite (~300 s), then what the submit's question to
    # cudf-polars costs by file count; both within one 600 s call.
    gpu_suite 440 "$@"
    refusal_cost 100
    ;;
plans)
    timeout 420 python3 bench/gpu_tpch.py --out "$OUT" --work /tmp/spw_tpch --sf 10 --parts 1 --gpus 0 \
        --engines spillway,spillway-plan,spillway-plan-filters,cudf-polars,duckdb --spillway-engines auto --gpu-trace-progress off \
        --iterations 2 --deadline 400 "$@" > "$OUT/plans.log" 2>&1
    echo "plans rc=$?"; tail -30 "$OUT/plans.log"
    timeout 150 python3 bench/semi_joins.py --data /tmp/spw_tpch/sf10 --device gpu --out "$OUT" > "$OUT/semi_joins.log" 2>&1
    echo "semi joins rc=$?"; cat "$OUT/semi_joins.log"
    ;;
concurrent)
    timeout 560 python3 bench/gpu_concurrent.py --out "$OUT" --data /tmp/spw_tpch/sf10 "$@" > "$OUT/concurrent.log" 2>&1
    echo "concurrent rc=$?"; tail -12 "$OUT/concurrent.log"
    ;;
spill)
    timeout 560 python3 bench/gpu_spill.py --out "$OUT" --data /tmp/spw_tpch/sf10 --queries q01,q09,q18,q21 "$@" > "$OUT/spill.log" 2>&1
    echo "spill rc=$?"; tail -30 "$OUT/spill.log"
    ;;
*)
    echo "usage: bash bench/gpu_session.sh tests|first|tpch10|tpch100|plans|spill|concurrent|multi|multi-tests|long|verify" >&2; exit 2
    ;;
esac
