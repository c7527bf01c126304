#!/usr/bin/env bash
# The benchmark's timing with and without the spin kernel ahead of each replay (v47's library, ours only, full
# grid, early start), in the order old, new, new, old.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
export CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v47.so
run() {  # method round
  if [ $1 = old ]; then timeout 80 python3 kernel_ext/build/bench_v47timing.py --grid full --no-triton --label v47-$1 --out /tmp/t_$1_$2 > $OUT/r/$1_$2.log 2>&1
  else timeout 80 python3 -m kernel_ext.bench --grid full --no-triton --label v47-$1 --out /tmp/t_$1_$2 > $OUT/r/$1_$2.log 2>&1; fi
  echo "$1 round $2 rc=$? ($SECONDS s)"; cp /tmp/t_$1_$2/bench.json $OUT/r/bench_$1_$2.json
}
run old 1; run new 1; run new 2; run old 2
for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/bench_old_$r.json $OUT/r/bench_new_$r.json > $OUT/r/ab_compare_old_vs_new_$r.txt; sed -n 1,9p $OUT/r/ab_compare_old_vs_new_$r.txt; done
cd $OUT && tar czf 0_all.tgz r && echo "($SECONDS s)"
