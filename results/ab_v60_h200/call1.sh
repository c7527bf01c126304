#!/usr/bin/env bash
# v60 (the mma.sync kernels, what sm_120 runs): S in independent accumulator chains (c4), and the small tiles
# (configuration 2) three stages deep (c4s3). *_1sm: measurement-only builds whose configuration 2 reserves 120 KB
# per block, so one block per SM as on sm_120 (one_block_per_sm.py). Quick parity first (stop on failure), then
# configuration 2 A/B over the combine grid, two rounds, then configuration 1 (c4 only), then the full parity of c4s3
# in configuration 2 in the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_s3
rc=0
for spec in "c4s3 2" "c4s3_1sm 2" "c4 1"; do
  set -- $spec
  CUTOVER_KERNEL_TILES=$2 CUTOVER_KERNEL_LIB=$V/$1.so timeout 90 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_$1_cfg$2.json > $OUT/r/parity_quick_$1_cfg$2.log 2>&1; r=$?
  echo "quick parity $1 config $2 rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_$1_cfg$2.log; [ $r = 0 ] || rc=$r
done
CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/c4s3.so timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_c4s3_cfg2.txt 2>&1; r=$?
echo "memcheck c4s3 config 2 rc=$r ($SECONDS s)"; grep -E "ERROR SUMMARY|parity tiny" $OUT/r/memcheck_c4s3_cfg2.txt; [ $r = 0 ] || rc=$r
pack
[ $rc = 0 ] || { echo "checks failed: stopping"; exit 0; }
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
[ $SECONDS -lt 400 ] || { echo "no time left for the full parity"; exit 0; }
CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/c4s3.so timeout 170 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_c4s3_cfg2.json > $OUT/r/parity_full_c4s3_cfg2.log 2>&1
echo "full parity c4s3 config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_c4s3_cfg2.log; pack
