#!/usr/bin/env bash
# Phase marks of v47 on the multi-wave compute-bound shapes (batch 64, short prefixes), raw per-CTA marks kept.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/r/gpu.txt 2>&1
S="16,32,64,1024 8,64,64,1024 16,64,64,1024 16,32,64,4096 16,32,16,1024 16,32,16,4096 16,8,64,1024 8,8,64,1024"
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase47/libcutover_verify.so timeout 240 python3 kernel_ext/device/phase_times.py --shapes "$S" --raw $OUT/r/raw --json $OUT/r/phase_times.json > $OUT/r/phase_times.txt 2>&1; echo "phase rc=$? ($SECONDS s)"
cat $OUT/r/phase_times.txt
cd $OUT && tar czf 0_all.tgz r
