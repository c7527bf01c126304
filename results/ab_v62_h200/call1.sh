#!/usr/bin/env bash
# Call 1: v62 (8-warp small tiles) against v61, configuration 2. Quick parity of v62 and of its one-block-per-SM
# build; then A/B over the combine grid: v61_1sm / v62_1sm two rounds (alternating order), v61 / v62 (as the
# H200 runs configuration 2) one round.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v62
for v in v62 v62_1sm; do
  CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/$v.so timeout 90 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_${v}_cfg2.json > $OUT/r/parity_quick_${v}_cfg2.log 2>&1
  rc=$?; echo "quick parity $v config 2 rc=$rc ($SECONDS s)"; tail -2 $OUT/r/parity_quick_${v}_cfg2.log
  [ $rc -eq 0 ] || { pack; exit 1; }
done
mkdir -p $V/ab_1sm $V/ab_2 && cp $V/v61_1sm.so $V/v62_1sm.so $V/ab_1sm/ && cp $V/v61.so $V/v62.so $V/ab_2/
CUTOVER_KERNEL_TILES=2 VARIANTS=$V/ab_1sm OUT=$OUT/r/logs GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
CUTOVER_KERNEL_TILES=2 VARIANTS=$V/ab_2 OUT=$OUT/r/logs GRIDS=combine ROUNDS=1 bash kernel_ext/device/ab_call.sh
for round in 1 2; do for v in v61_1sm v62_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done; done
for v in v61 v62; do cp /tmp/ab_${v}_combine_1/bench.json $OUT/r/ab_${v}_cfg2_1.json; done
for pair in "v61_1sm v62_1sm 1" "v61_1sm v62_1sm 2" "v61 v62 1"; do set -- $pair
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_$1_cfg2_$3.json $OUT/r/ab_$2_cfg2_$3.json > $OUT/r/cmp_$1_vs_$2_cfg2_$3.txt
  echo "config 2 round $3: $1 -> $2"; head -4 $OUT/r/cmp_$1_vs_$2_cfg2_$3.txt
done
echo "($SECONDS s)"; pack
