#!/usr/bin/env bash
# CombineLongSplits in whole lines (v57 candidates, sm_90a): v57L34 = CombineLayout<4, 1, 4, 34> (136 splits per
# round trip, as v56's <8, 1, 4, 17>, 254 registers), v57L17 = <4, 1, 4, 17> (68 per round trip, 154 registers).
# Quick parity of each (stop on failure); phase marks of v56 and both on the batch-1 long-split shapes; two A/B
# rounds on the combine grid and one on the full grid, ours only.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
for v in v57L34 v57L17; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 90 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_$v.json > $OUT/r/parity_quick_$v.log 2>&1; r=$?; echo "$v quick parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_$v.log; [ $r = 0 ] || rm kernel_ext/build/variants/$v.so; done; pack
S="8,8,1,65536 8,8,1,16384 16,8,1,65536 8,16,1,65536 16,16,1,4096 8,8,4,16384"
for v in 56 57L34 57L17; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
for v in 56 57L34 57L17; do echo "== $v"; sed -n 2,8p $OUT/r/phase_times_v$v.txt | awk '{print $1, $(NF-2), $(NF-1), $NF}'; done; pack
OUT=/tmp/res GRIDS="combine" ROUNDS=2 bash kernel_ext/device/ab_call.sh
OUT=/tmp/res GRIDS="full" ROUNDS=1 bash kernel_ext/device/ab_call.sh
for run in combine_1 combine_2 full_1; do for v in v56 v57L34 v57L17; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  for v in v57L34 v57L17; do [ -f $OUT/r/ab_${v}_$run.json ] || continue; python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v56_$run.json $OUT/r/ab_${v}_$run.json > $OUT/r/ab_compare_v56_vs_${v}_$run.txt; echo "== $run: $v / v56"; sed -n 1,3p $OUT/r/ab_compare_v56_vs_${v}_$run.txt; sed -n 6p $OUT/r/ab_compare_v56_vs_${v}_$run.txt; sed -n 9,10p $OUT/r/ab_compare_v56_vs_${v}_$run.txt; done; done
pack; echo "($SECONDS s)"
