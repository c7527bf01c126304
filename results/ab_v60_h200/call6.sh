#!/usr/bin/env bash
# Call 6: v61 as shipped (v60 + the gather by 8 threads per row; dual-arch release library): every gpu-marked test,
# memcheck and racecheck in configuration 2, the full parity grid in configuration 2, quick parity in configuration
# 1, then the quick grid in configuration 2 with SGLang's kernels in the same run (as the H200 runs it: two blocks
# per SM).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
timeout 150 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v61.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v61.log
CUTOVER_KERNEL_TILES=2 timeout 100 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v61_cfg2.json > $OUT/r/parity_full_v61_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v61_cfg2.log
CUTOVER_KERNEL_TILES=1 timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v61_cfg1.json > $OUT/r/parity_quick_v61_cfg1.log 2>&1
echo "quick parity config 1 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v61_cfg1.log
CUTOVER_KERNEL_TILES=2 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v61_cfg2.txt 2>&1
echo "memcheck config 2 rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY" $OUT/r/memcheck_v61_cfg2.txt
pack
CUTOVER_KERNEL_TILES=2 timeout 270 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v61_cfg2.txt 2>&1
echo "racecheck config 2 rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY" $OUT/r/racecheck_v61_cfg2.txt; tail -1 $OUT/r/racecheck_v61_cfg2.txt
pack
[ $SECONDS -lt 460 ] || { echo "no time left for the quick grid"; exit 0; }
CUTOVER_KERNEL_TILES=2 timeout 90 python3 -m kernel_ext.bench --grid quick --label v61_cfg2 --out /tmp/bq > $OUT/r/bench_quick_v61_cfg2.log 2>&1
echo "quick grid config 2 rc=$? ($SECONDS s)"; cp /tmp/bq/bench.json $OUT/r/bench_quick_v61_cfg2.json; tail -20 $OUT/r/bench_quick_v61_cfg2.log; pack
