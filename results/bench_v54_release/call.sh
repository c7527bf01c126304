#!/usr/bin/env bash
# v54 as shipped (kernel_ext/build/libcutover_verify.so, sm_90a SASS identical to variants/v54a.so): full parity,
# the GPU tests, then the full grid with SGLang's kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
LIB=$PWD/kernel_ext/build/libcutover_verify.so
pack() { (cd $OUT && tar czf 0_all.tgz r $(ls -d bench bench_v54.log 2>/dev/null)); }
CUTOVER_KERNEL_LIB=$LIB timeout 110 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v54_h200.json > $OUT/r/parity_full_v54_h200.log 2>&1; echo "full parity rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v54_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout 80 python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v54_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -2 $OUT/r/gpu_tests_v54_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout $((592 - SECONDS)) python3 -m kernel_ext.bench --grid full --label v54 --out $OUT/bench > $OUT/bench_v54.log 2>&1; echo "bench rc=$? ($SECONDS s)"
pack
tail -24 $OUT/bench_v54.log
