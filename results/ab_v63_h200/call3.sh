#!/usr/bin/env bash
# Call 3: v65 (a scorer keeps Q_REG_STEPS k-steps of Q in registers) against v65q0 (the same code reading all of Q from shared memory), configuration 2 at one block
# per SM. Quick parity of each v65 variant, the combine grid two rounds, then ncu --set full of v65q28_1sm at
# 8/8/4/16384 if time is left.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v65
for v in v65q0_1sm v65q18_1sm v65q24_1sm v65q28_1sm; do
  CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/$v.so timeout 90 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_${v}_cfg2.json > $OUT/r/parity_quick_${v}_cfg2.log 2>&1
  rc=$?; echo "quick parity $v config 2 rc=$rc ($SECONDS s)"; tail -1 $OUT/r/parity_quick_${v}_cfg2.log
  [ $rc -eq 0 ] || { pack; exit 1; }
done
CUTOVER_KERNEL_TILES=2 VARIANTS=$V OUT=$OUT/r/logs GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
for round in 1 2; do
  for v in v65q0_1sm v65q18_1sm v65q24_1sm v65q28_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done
  for v in v65q18_1sm v65q24_1sm v65q28_1sm; do
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v65q0_1sm_cfg2_$round.json $OUT/r/ab_${v}_cfg2_$round.json > $OUT/r/cmp_v65q0_1sm_vs_${v}_cfg2_$round.txt
    echo "config 2 round $round: v65q0_1sm -> $v"; head -3 $OUT/r/cmp_v65q0_1sm_vs_${v}_cfg2_$round.txt
  done
done
echo "($SECONDS s)"; pack
left=$((560 - SECONDS)); [ $left -gt 60 ] || { echo "no time left for ncu"; exit 0; }
CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/v65q28_1sm.so KERNEL=regex:verify_main_kernel SHAPES="8 8 4 16384" NCU_S=$left \
  OUT=$OUT/r/ncu_v65q28_1sm bash kernel_ext/device/ncu_full.sh > $OUT/r/ncu_v65q28_1sm.summary 2>&1
echo "ncu v65q28_1sm ($SECONDS s)"; grep -E "Duration|Issued Warp|Warp Cycles Per Issued" $OUT/r/ncu_v65q28_1sm.summary | head -4
rm -f $OUT/r/ncu_v65q28_1sm/*.ncu-rep
pack
