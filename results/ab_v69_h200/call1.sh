#!/usr/bin/env bash
# Call 1: two interleaved A/B rounds of v67 (HEAD) and v69 (work items longest first where a call has more than a
# wave) over the full grid and the mixed grid, ours only; then the full parity grid of v69 (its sm_90a image, which
# the release runs on the H200) on the default path and in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v69
VARIANTS=$V OUT=/tmp/res GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2 mixed_1 mixed_2; do
  for v in v67 v69; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  [ -f $OUT/r/ab_v69_$run.json ] || continue
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v67_$run.json $OUT/r/ab_v69_$run.json > $OUT/r/cmp_v67_vs_v69_$run.txt
  echo "== $run: v69 / v67"; sed -n 1,3p $OUT/r/cmp_v67_vs_v69_$run.txt
done
pack
echo "A/B done ($SECONDS s)"
CUTOVER_KERNEL_LIB=$V/v69.so timeout 150 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v69_default.json > $OUT/r/parity_full_v69_default.log 2>&1
echo "full parity default rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v69_default.log
CUTOVER_KERNEL_LIB=$V/v69.so CUTOVER_KERNEL_TILES=2 timeout 100 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v69_cfg2.json > $OUT/r/parity_full_v69_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v69_cfg2.log
pack
echo "($SECONDS s)"
