#!/usr/bin/env bash
# v54 as shipped: memcheck and racecheck on the tiny parity subset.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
LIB=$PWD/kernel_ext/build/libcutover_verify.so
CUTOVER_KERNEL_LIB=$LIB timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v54_h200.txt 2>&1; echo "memcheck rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY|parity tiny" $OUT/r/memcheck_v54_h200.txt
CUTOVER_KERNEL_LIB=$LIB timeout $((440 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v54_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY|parity tiny" $OUT/r/racecheck_v54_h200.txt
