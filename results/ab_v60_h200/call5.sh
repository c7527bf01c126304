#!/usr/bin/env bash
# Call 5 (v61 candidates on v60, all at one block per SM): gA = the gather by 8 threads per row (patch_gather.py),
# gB = S's operands loaded two k-steps ahead into four accumulator chains (patch_sprefetch.py), gAB = both;
# s3tree = v60 as in the tree. Configuration 2 over the combine grid, two rounds, alternating order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v61
for cfg in 2 1; do
  CUTOVER_KERNEL_TILES=$cfg CUTOVER_KERNEL_LIB=$V/gAB_1sm.so timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_gAB_cfg$cfg.json > $OUT/r/parity_quick_gAB_cfg$cfg.log 2>&1
  echo "quick parity gAB config $cfg rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_gAB_cfg$cfg.log
done
CUTOVER_KERNEL_TILES=2 VARIANTS=$V OUT=/tmp/res5 GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
for round in 1 2; do for v in s3tree_1sm gA_1sm gB_1sm gAB_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done; done
for round in 1 2; do
  for pair in "s3tree_1sm gA_1sm" "s3tree_1sm gB_1sm" "s3tree_1sm gAB_1sm"; do set -- $pair
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_$1_cfg2_$round.json $OUT/r/ab_$2_cfg2_$round.json > $OUT/r/cmp_$1_vs_$2_cfg2_$round.txt
    echo "config 2 round $round: $1 -> $2"; head -3 $OUT/r/cmp_$1_vs_$2_cfg2_$round.txt
  done
done
echo "($SECONDS s)"; pack
