#!/usr/bin/env bash
# v58 = v56 + CombineLongSplitsMoreRows (<4, 1, 4, 17>) for calls of 67-132 rows whose requests may have more than
# 36 splits (batch-1 calls with H x T = 128 took CombineManySplits). v56aa = a second copy of v56 (A/A).
# Quick parity of v58; phase marks of v56 and v58 on batch-1 shapes; four A/B rounds on the batch1 grid and one on
# the full grid, ours only.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
v=v58; CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 150 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_$v.json > $OUT/r/parity_quick_$v.log 2>&1; r=$?; echo "$v quick parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_$v.log; [ $r = 0 ] || rm kernel_ext/build/variants/$v.so
pack
S="16,8,1,65536 8,16,1,65536 16,8,1,16384 8,16,1,16384 16,8,1,4096 8,16,1,4096 16,8,1,1024 8,8,1,65536"
for v in 56 58; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 60 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
pack
OUT=/tmp/res GRIDS="batch1" ROUNDS=4 bash kernel_ext/device/ab_call.sh
OUT=/tmp/res GRIDS="full" ROUNDS=1 bash kernel_ext/device/ab_call.sh
for run in batch1_1 batch1_2 batch1_3 batch1_4 full_1; do for v in v56 v56aa v58; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  for v in v56aa v58; do [ -f $OUT/r/ab_${v}_$run.json ] || continue; python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v56_$run.json $OUT/r/ab_${v}_$run.json > $OUT/r/ab_compare_v56_vs_${v}_$run.txt; echo "== $run: $v / v56"; sed -n 1p $OUT/r/ab_compare_v56_vs_${v}_$run.txt; done; done
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
pack
for v in 56 58; do echo "== phase v$v"; sed -n 2,10p $OUT/r/phase_times_v$v.txt | awk '{print $1, $(NF-2), $(NF-1), $NF}'; done
echo "($SECONDS s)"
