#!/usr/bin/env bash
# v52 as shipped (kernel_ext/build/libcutover_verify.so, sm_90a SASS identical to variants/v52.so): the full grid
# with SGLang's kernels, then racecheck on the tiny parity subset in the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
LIB=$PWD/kernel_ext/build/libcutover_verify.so
CUTOVER_KERNEL_LIB=$LIB timeout 470 python3 -m kernel_ext.bench --grid full --label v52 --out $OUT/bench > $OUT/bench_v52.log 2>&1; echo "bench rc=$? ($SECONDS s)"
(cd $OUT && tar czf 0_all.tgz bench bench_v52.log)
CUTOVER_KERNEL_LIB=$LIB timeout $((585 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v52_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY|parity tiny" $OUT/r/racecheck_v52_h200.txt
(cd $OUT && tar czf 0_all.tgz r bench bench_v52.log)
tail -24 $OUT/bench_v52.log
