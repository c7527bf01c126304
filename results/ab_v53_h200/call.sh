#!/usr/bin/env bash
# v53 (the mma.sync kernels read each tail tile's mask bytes while its K rows are in flight, draft_visibility_bits;
# wgmma, combine, gate and shadow kernels' SASS identical to v52): quick parity and memcheck in configurations 1 and 2
# (stop on failure), then v52 against v53 in configuration 2 (sm_120's), then configuration 1, in the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
LIB=$PWD/kernel_ext/build/variants/v53.so
rc=0
for cfg in 1 2; do
  CUTOVER_KERNEL_TILES=$cfg CUTOVER_KERNEL_LIB=$LIB timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v53_cfg$cfg.json > $OUT/r/parity_quick_v53_cfg$cfg.log 2>&1; r=$?; echo "quick parity v53 config $cfg rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v53_cfg$cfg.log; [ $r = 0 ] || rc=$r
  CUTOVER_KERNEL_TILES=$cfg CUTOVER_KERNEL_LIB=$LIB timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v53_cfg$cfg.txt 2>&1; r=$?; echo "memcheck v53 config $cfg rc=$r ($SECONDS s)"; grep -E "ERROR SUMMARY|parity tiny" $OUT/r/memcheck_v53_cfg$cfg.txt; [ $r = 0 ] || rc=$r
done
pack
[ $rc = 0 ] || { echo "checks failed: stopping"; exit 0; }
for cfg in 2 1; do
  [ $SECONDS -lt 200 ] || break
  CUTOVER_KERNEL_TILES=$cfg OUT=/tmp/res$cfg GRIDS=combine ROUNDS=1 bash kernel_ext/device/ab_call.sh
  for v in v52 v53; do cp /tmp/ab_${v}_combine_1/bench.json $OUT/r/ab_${v}_cfg${cfg}_bench.json; done
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v52_cfg${cfg}_bench.json $OUT/r/ab_v53_cfg${cfg}_bench.json > $OUT/r/ab_compare_v52_vs_v53_cfg$cfg.txt; echo "config $cfg ($SECONDS s)"; head -4 $OUT/r/ab_compare_v52_vs_v53_cfg$cfg.txt; pack
done
