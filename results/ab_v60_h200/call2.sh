#!/usr/bin/env bash
# Call 2 of v60: the A/Bs of call 1, which did not run (ab_call.sh prefixed $PWD to an absolute VARIANTS path;
# fixed). Same variants, same order; call 1's checks passed.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_s3
CUTOVER_KERNEL_TILES=2 VARIANTS=$V OUT=/tmp/res2 GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
for round in 1 2; do for v in base c4 c4s3 base_1sm c4s3_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done; done
cp /tmp/res2/*.log $OUT/r/ 2>/dev/null
for round in 1 2; do
  for pair in "base c4" "base c4s3" "base_1sm c4s3_1sm"; do set -- $pair
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_$1_cfg2_$round.json $OUT/r/ab_$2_cfg2_$round.json > $OUT/r/cmp_$1_vs_$2_cfg2_$round.txt
    echo "config 2 round $round: $1 -> $2"; head -4 $OUT/r/cmp_$1_vs_$2_cfg2_$round.txt
  done
done
echo "($SECONDS s)"; pack
mkdir -p /tmp/cfg1 && cp $V/base.so $V/c4.so /tmp/cfg1/
CUTOVER_KERNEL_TILES=1 VARIANTS=/tmp/cfg1 OUT=/tmp/res1 GRIDS=combine ROUNDS=1 bash kernel_ext/device/ab_call.sh
for v in base c4; do cp /tmp/ab_${v}_combine_1/bench.json $OUT/r/ab_${v}_cfg1_1.json; done
python3 kernel_ext/device/ab_compare.py $OUT/r/ab_base_cfg1_1.json $OUT/r/ab_c4_cfg1_1.json > $OUT/r/cmp_base_vs_c4_cfg1_1.txt
echo "config 1: base -> c4 ($SECONDS s)"; head -4 $OUT/r/cmp_base_vs_c4_cfg1_1.txt; pack
