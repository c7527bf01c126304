#!/usr/bin/env bash
# Prototype v49f (the combine inside the main kernel for one-row-tile calls, a per-request rendezvous) against
# v47: quick parity first (stop on failure), then two interleaved A/B rounds (full grid, ours only, early start).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v49f.so timeout 100 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v49f_h200.json > $OUT/r/parity_quick_v49f_h200.log 2>&1; rc=$?; echo "quick parity v49f rc=$rc ($SECONDS s)"; tail -3 $OUT/r/parity_quick_v49f_h200.log; pack
[ $rc = 0 ] || { echo "parity failed: stopping"; exit 0; }
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v47 v49f; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v47_bench_$r.json $OUT/r/ab_v49f_bench_$r.json > $OUT/r/ab_compare_v47_vs_v49f_$r.txt; head -9 $OUT/r/ab_compare_v47_vs_v49f_$r.txt; done; pack; echo "($SECONDS s)"
