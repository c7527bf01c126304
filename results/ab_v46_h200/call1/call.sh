#!/usr/bin/env bash
# v46s (tile 1 gathered after S(0)) and v46t (the same only for calls of >= half a wave of splits) against v45.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
for v in v46s v46t; do
  CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 100 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_${v}_h200.json > $OUT/r/parity_quick_${v}_h200.log 2>&1; echo "quick parity $v rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_${v}_h200.log
done
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v45 v46s v46t; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for v in v46s v46t; do for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v45_bench_$r.json $OUT/r/ab_${v}_bench_$r.json > $OUT/r/ab_compare_v45_vs_${v}_$r.txt; head -9 $OUT/r/ab_compare_v45_vs_${v}_$r.txt; done; done; echo "($SECONDS s)"
S="8,8,1,1024 8,8,1,65536 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,32,4,16384"
for v in 45 46s 46t; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 60 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
head -9 $OUT/r/phase_times_v46s.txt
cd $OUT && tar czf 0_all.tgz r && echo tarred
