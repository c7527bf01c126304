#!/usr/bin/env bash
# v58 as shipped (kernel_ext/build/libcutover_verify.so): the full grid with SGLang's kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
LIB=$PWD/kernel_ext/build/libcutover_verify.so
pack() { (cd $OUT && tar czf 0_all.tgz $(ls -d bench bench_v58.log 2>/dev/null)); }
CUTOVER_KERNEL_LIB=$LIB timeout $((560 - SECONDS)) python3 -m kernel_ext.bench --grid full --label v58 --out $OUT/bench > $OUT/bench_v58.log 2>&1; echo "bench rc=$? ($SECONDS s)"
pack
tail -24 $OUT/bench_v58.log
