#!/usr/bin/env bash
# Call 1: v63 (scorer and accumulator warps) against v62, configuration 2 at one block per SM (measurement-only
# builds, ../ab_v60_h200/one_block_per_sm.py). Quick parity of v63 and v63_1sm, the combine grid two rounds, then
# ncu --set full of v63_1sm at 8/8/4/16384 (v62_1sm's is in ../ab_v62_h200/call2/).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v63
for v in v63 v63_1sm; do
  CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/$v.so timeout 90 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_${v}_cfg2.json > $OUT/r/parity_quick_${v}_cfg2.log 2>&1
  rc=$?; echo "quick parity $v config 2 rc=$rc ($SECONDS s)"; tail -2 $OUT/r/parity_quick_${v}_cfg2.log
  [ $rc -eq 0 ] || { pack; exit 1; }
done
mkdir -p $V/ab && mv $V/v62_1sm.so $V/v63_1sm.so $V/ab/
CUTOVER_KERNEL_TILES=2 VARIANTS=$V/ab OUT=$OUT/r/logs GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
for round in 1 2; do
  for v in v62_1sm v63_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v62_1sm_cfg2_$round.json $OUT/r/ab_v63_1sm_cfg2_$round.json > $OUT/r/cmp_v62_1sm_vs_v63_1sm_cfg2_$round.txt
  echo "config 2 round $round: v62_1sm -> v63_1sm"; head -4 $OUT/r/cmp_v62_1sm_vs_v63_1sm_cfg2_$round.txt
done
echo "($SECONDS s)"; pack
left=$((560 - SECONDS)); [ $left -gt 60 ] || { echo "no time left for ncu"; exit 0; }
CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/ab/v63_1sm.so KERNEL=regex:verify_main_kernel SHAPES="8 8 4 16384" NCU_S=$left \
  OUT=$OUT/r/ncu_v63_1sm bash kernel_ext/device/ncu_full.sh > $OUT/r/ncu_v63_1sm.summary 2>&1
echo "ncu v63_1sm ($SECONDS s)"; grep -E "Duration|Issue Slots Busy|Issued Warp|Warp Cycles Per Issued" $OUT/r/ncu_v63_1sm.summary | head -6
rm -f $OUT/r/ncu_v63_1sm/*.ncu-rep
pack
