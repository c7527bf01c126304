#!/usr/bin/env bash
# Call 7 (a v62 candidate on v61, at one block per SM): skip = a warp skips O's rescale while every factor of its
# rows is 1 (patch_rescale_skip.py; exact). Quick parity of skip in configuration 2, then configuration 2 over the
# combine grid against v61 (v61t), two rounds, alternating order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v62
CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/skip_1sm.so timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_skip_cfg2.json > $OUT/r/parity_quick_skip_cfg2.log 2>&1
echo "quick parity skip config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_skip_cfg2.log
CUTOVER_KERNEL_TILES=2 VARIANTS=$V OUT=/tmp/res7 GRIDS=combine ROUNDS=2 bash kernel_ext/device/ab_call.sh
for round in 1 2; do for v in v61t_1sm skip_1sm; do cp /tmp/ab_${v}_combine_$round/bench.json $OUT/r/ab_${v}_cfg2_$round.json; done
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v61t_1sm_cfg2_$round.json $OUT/r/ab_skip_1sm_cfg2_$round.json > $OUT/r/cmp_v61t_1sm_vs_skip_1sm_cfg2_$round.txt
  echo "config 2 round $round: v61 -> skip"; head -4 $OUT/r/cmp_v61t_1sm_vs_skip_1sm_cfg2_$round.txt
done
echo "($SECONDS s)"; pack
