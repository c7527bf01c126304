#!/usr/bin/env bash
# A/A: two copies of v47's library, four interleaved rounds of the full grid (ours only, early start), the order
# reversed every other round: how much of an A/B's ratio is the order of the runs.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
OUT=$OUT/r GRIDS=full ROUNDS=4 bash kernel_ext/device/ab_call.sh
for r in 1 2 3 4; do for v in a47 b47; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_a47_bench_$r.json $OUT/r/ab_b47_bench_$r.json > $OUT/r/ab_compare_a47_vs_b47_$r.txt
  echo "== round $r (b47 / a47; $([ $((r % 2)) = 1 ] && echo 'a47 ran first' || echo 'b47 ran first'))"; sed -n 1,5p $OUT/r/ab_compare_a47_vs_b47_$r.txt; sed -n 8p $OUT/r/ab_compare_a47_vs_b47_$r.txt; done
cd $OUT && tar czf 0_all.tgz r && echo "($SECONDS s)"
