#!/usr/bin/env bash
# Call 3 of v60: which of the two changes pays at one block per SM. s3_1sm = three stages alone; c4_1sm = chains
# alone at one block per SM. Configuration 2 A/B over the combine grid, two rounds, alternating order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_s3b
CUTOVER_KERNEL_TILES=2 VARIANTS=$V OUT=/tmp/res3 GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
for round in 1 2; do for v in base_1sm c4_1sm s3_1sm c4s3_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done; done
for round in 1 2; do
  for pair in "base_1sm c4_1sm" "base_1sm s3_1sm" "s3_1sm c4s3_1sm"; do set -- $pair
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_$1_cfg2_$round.json $OUT/r/ab_$2_cfg2_$round.json > $OUT/r/cmp_$1_vs_$2_cfg2_$round.txt
    echo "config 2 round $round: $1 -> $2"; head -3 $OUT/r/cmp_$1_vs_$2_cfg2_$round.txt
  done
done
echo "($SECONDS s)"; pack
