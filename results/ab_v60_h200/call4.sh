#!/usr/bin/env bash
# Call 4 of v60: the release library (dual-arch, three stages in configuration 2, no accumulator chains): every
# gpu-marked test (the parity cases and the early-start check now also in configuration 2), memcheck and racecheck
# in configuration 2, its full parity grid, quick parity in configuration 1; then ncu of configuration 2 at one
# block per SM (the s3_1sm build) on one compute-bound shape, for the next step.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
timeout 150 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v60.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -2 $OUT/r/gpu_tests_v60.log
for tool in memcheck racecheck; do
  CUTOVER_KERNEL_TILES=2 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/${tool}_v60_cfg2.txt 2>&1
  echo "$tool config 2 rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|parity tiny" $OUT/r/${tool}_v60_cfg2.txt
done
pack
CUTOVER_KERNEL_TILES=2 timeout 150 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v60_cfg2.json > $OUT/r/parity_full_v60_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v60_cfg2.log
CUTOVER_KERNEL_TILES=1 timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v60_cfg1.json > $OUT/r/parity_quick_v60_cfg1.log 2>&1
echo "quick parity config 1 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v60_cfg1.log
pack
[ $SECONDS -lt 380 ] || { echo "no time left for ncu"; exit 0; }
CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants_prof/s3_1sm.so OUT=$OUT/r KERNEL=regex:verify_main_kernel \
  NCU_S=150 SHAPES="16 64 4 16384" bash kernel_ext/device/ncu_full.sh
rm -f $OUT/r/*.ncu-rep; echo "($SECONDS s)"; pack
