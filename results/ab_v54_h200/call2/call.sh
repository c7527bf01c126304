#!/usr/bin/env bash
# v54c (v54a with 12 splits per lane and long batch: 48 per round trip) against v54a: quick parity of v54c (stop on
# failure), quick parity of v54a in configurations 1 and 2, two interleaved A/B rounds over the full grid.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants
CUTOVER_KERNEL_LIB=$V/v54c.so timeout 120 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v54c.json > $OUT/r/parity_quick_v54c.log 2>&1; r=$?; echo "quick parity v54c rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v54c.log
pack
[ $r = 0 ] || { echo "parity failed: stopping"; exit 0; }
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v54a v54c; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v54a_bench_$r.json $OUT/r/ab_v54c_bench_$r.json > $OUT/r/ab_compare_v54a_vs_v54c_$r.txt; head -9 $OUT/r/ab_compare_v54a_vs_v54c_$r.txt; done
pack; echo "($SECONDS s)"
for cfg in 1 2; do
  CUTOVER_KERNEL_TILES=$cfg CUTOVER_KERNEL_LIB=$V/v54a.so timeout 150 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v54a_cfg$cfg.json > $OUT/r/parity_quick_v54a_cfg$cfg.log 2>&1; echo "quick parity v54a config $cfg rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v54a_cfg$cfg.log
done
pack
