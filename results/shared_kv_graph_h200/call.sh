#!/usr/bin/env bash
# v47, full grid with SGLang's kernels, verify_shared_kv_fwd timed as graph replays; then the small chains'
# kernel sums (profiler) against graph times.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
export CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v47.so
mkdir -p $OUT/chain
timeout 150 python3 kernel_ext/device/chain_kernels.py --out $OUT/chain > $OUT/chain/log.txt 2>&1; echo "chain rc=$? ($SECONDS s)"
cat $OUT/chain/log.txt | tail -12
timeout 460 python3 -m kernel_ext.bench --grid full --label v47g --out $OUT/bench > $OUT/bench_v47g.log 2>&1; echo "bench rc=$? ($SECONDS s)"
tail -3 $OUT/bench_v47g.log
cd $OUT && tar czf 0_all.tgz chain bench bench_v47g.log && echo tarred
