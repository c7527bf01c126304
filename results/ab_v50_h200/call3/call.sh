#!/usr/bin/env bash
# v50b (v50 with its rendezvous loads before the epilogue, division-free staging and a two-pass merge) against v47:
# quick parity with the merge checks (stop on failure), phase marks of both, two interleaved A/B rounds.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v50b.so timeout 150 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v50b_h200.json > $OUT/r/parity_quick_v50b_h200.log 2>&1; rc=$?; echo "quick parity v50b rc=$rc ($SECONDS s)"; tail -8 $OUT/r/parity_quick_v50b_h200.log; pack
S="8,8,1,1024 8,8,1,16384 8,8,1,65536 8,8,4,4096 8,8,4,16384 8,8,16,4096 8,8,64,1024 8,8,16,65536"
for v in 50b 47; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 90 python3 kernel_ext/device/phase_times.py --shapes "$S" --raw $OUT/r/raw$v --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
cat $OUT/r/phase_times_v50b.txt; pack
[ $rc = 0 ] || { echo "parity failed: stopping"; exit 0; }
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v47 v50b; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v47_bench_$r.json $OUT/r/ab_v50b_bench_$r.json > $OUT/r/ab_compare_v47_vs_v50b_$r.txt; head -9 $OUT/r/ab_compare_v47_vs_v50b_$r.txt; done; pack; echo "($SECONDS s)"
