#!/usr/bin/env bash
# Call 2: call 1 measured v69 at 1.009x of v67 on the full grid, B = 1 shapes too (one wave: v67's order, so the
# cost is the code's, not the order's). Two interleaved A/B rounds of v67, v69, and both with the warp-0 plan
# out of line (__noinline__, the kernel argument __grid_constant__ so the call takes no copy of it: v67g, v69g),
# over the full and mixed grids, ours only. The variants come compressed (the carry limit).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v69.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v69
VARIANTS=$V OUT=/tmp/res GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2 mixed_1 mixed_2; do
  for v in v67 v67g v69 v69g; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  for v in v67g v69 v69g; do
    [ -f $OUT/r/ab_${v}_$run.json ] || continue
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v67_$run.json $OUT/r/ab_${v}_$run.json > $OUT/r/cmp_v67_vs_${v}_$run.txt
    echo "== $run: $v / v67"; sed -n 1,3p $OUT/r/cmp_v67_vs_${v}_$run.txt
  done
done
pack
echo "($SECONDS s)"
