#!/usr/bin/env bash
# v59 = v56 + the gate's and the combine layouts' preferred shared-memory carveout set to the maximum (the main
# kernel's), so an SM need not re-split L1 / shared memory between a combine and the next call's main kernel.
# Quick parity of v59; A/B rounds, ours only: full grid x2 (early start), batch1 x2 and quick x2 in plain order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
v=v59; CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 150 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_$v.json > $OUT/r/parity_quick_$v.log 2>&1; r=$?; echo "$v quick parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_$v.log; [ $r = 0 ] || rm kernel_ext/build/variants/$v.so
pack
OUT=/tmp/res GRIDS="full" ROUNDS=2 bash kernel_ext/device/ab_call.sh
OUT=/tmp/res GRIDS="batch1 quick" ROUNDS=2 TAG=plain BENCH_ARGS=--no-early-start bash kernel_ext/device/ab_call.sh
for run in full_1 full_2 batch1_plain_1 batch1_plain_2 quick_plain_1 quick_plain_2; do for v in v56 v59; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  [ -f $OUT/r/ab_v59_$run.json ] || continue; python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v56_$run.json $OUT/r/ab_v59_$run.json > $OUT/r/ab_compare_v56_vs_v59_$run.txt; echo "== $run: v59 / v56"; sed -n 1,3p $OUT/r/ab_compare_v56_vs_v59_$run.txt; sed -n 6p $OUT/r/ab_compare_v56_vs_v59_$run.txt; done
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
pack
echo "($SECONDS s)"
