#!/usr/bin/env bash
# v56 as shipped (kernel_ext/build/libcutover_verify.so, sm_90a SASS identical to variants/v56.so; full parity, GPU
# tests, memcheck and racecheck passed in the previous call): quick parity in tile configurations 1 and 2 (the
# mma.sync kernels share the plan), then the full grid with SGLang's kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
LIB=$PWD/kernel_ext/build/libcutover_verify.so
pack() { (cd $OUT && tar czf 0_all.tgz r $(ls -d bench bench_v56.log 2>/dev/null)); }
for c in 1 2; do CUTOVER_KERNEL_LIB=$LIB CUTOVER_KERNEL_TILES=$c timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v56_cfg${c}_h200.json > $OUT/r/parity_quick_v56_cfg${c}_h200.log 2>&1; echo "cfg$c quick rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v56_cfg${c}_h200.log; done; pack
CUTOVER_KERNEL_LIB=$LIB timeout $((585 - SECONDS)) python3 -m kernel_ext.bench --grid full --label v56 --out $OUT/bench > $OUT/bench_v56.log 2>&1; echo "bench rc=$? ($SECONDS s)"
pack
tail -24 $OUT/bench_v56.log
