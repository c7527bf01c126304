#!/usr/bin/env bash
# v47 candidates against v46: v47c (combine: 6 splits per lane and batch past 32), v47p (L2 prefetch of tile it + 2
# in the one-part kernel), v47cp (both). Quick parity of v47cp, two interleaved A/B rounds, phase marks.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v47cp.so timeout 100 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v47cp_h200.json > $OUT/r/parity_quick_v47cp_h200.log 2>&1; echo "quick parity v47cp rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v47cp_h200.log
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v46 v47c v47p v47cp; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for v in v47c v47p v47cp; do for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v46_bench_$r.json $OUT/r/ab_${v}_bench_$r.json > $OUT/r/ab_compare_v46_vs_${v}_$r.txt; echo "== $v round $r"; sed -n 3,5p $OUT/r/ab_compare_v46_vs_${v}_$r.txt; sed -n 1p $OUT/r/ab_compare_v46_vs_${v}_$r.txt; done; done; echo "($SECONDS s)"
S="8,8,1,1024 8,8,1,65536 8,8,4,16384 8,8,16,4096 8,8,64,1024 8,8,16,65536"
for v in 46 47cp; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 60 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
cat $OUT/r/phase_times_v47cp.txt
cd $OUT && tar czf 0_all.tgz r && echo tarred
