#!/usr/bin/env bash
# v58 as the dual-arch release (kernel_ext/build/libcutover_verify.so; sm_90a SASS identical, function by function,
# to the variant measured in results/ab_v58_h200/call1): full parity (stop on failure), quick parity in tile
# configurations 1 and 2 (the mma.sync kernels share the combine), GPU tests, memcheck on the tiny subset (which
# now includes a 128-row call through CombineLongSplitsMoreRows). No racecheck: the main kernels' SASS is v56's
# (racecheck-clean) and the combine uses no shared memory.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
LIB=$PWD/kernel_ext/build/libcutover_verify.so
CUTOVER_KERNEL_LIB=$LIB timeout 150 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v58_h200.json > $OUT/r/parity_full_v58_h200.log 2>&1; r=$?; echo "full parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_full_v58_h200.log; pack
[ $r = 0 ] || { echo "parity failed: stopping"; exit 0; }
for c in 1 2; do CUTOVER_KERNEL_LIB=$LIB CUTOVER_KERNEL_TILES=$c timeout 80 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v58_cfg${c}_h200.json > $OUT/r/parity_quick_v58_cfg${c}_h200.log 2>&1; echo "cfg$c quick rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v58_cfg${c}_h200.log; done; pack
CUTOVER_KERNEL_LIB=$LIB timeout 80 python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v58_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v58_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v58_h200.txt 2>&1; echo "memcheck rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY" $OUT/r/memcheck_v58_h200.txt; grep -c '^ok' $OUT/r/memcheck_v58_h200.txt; pack
echo "($SECONDS s)"
