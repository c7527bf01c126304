#!/usr/bin/env bash
# v58 as shipped: racecheck on the tiny subset (which now includes 16/8/1/8000, the new combine layout's long batch).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
LIB=$PWD/kernel_ext/build/libcutover_verify.so
CUTOVER_KERNEL_LIB=$LIB timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v58_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY" $OUT/r/racecheck_v58_h200.txt; tail -1 $OUT/r/racecheck_v58_h200.txt
