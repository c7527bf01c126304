#!/usr/bin/env bash
# Call 2: is v79c's 1.017x / 1.038x on the 8/8 1x65536+63x1024 mix a cost or one of that batch's modes? Four more
# interleaved rounds of the mixed grid (v75, v79c), then ncu's main-kernel and combine durations of that mix.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v79.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v79
VARIANTS=$V OUT=$OUT/r GRIDS="mixed" ROUNDS=4 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
timeout 90 python3 kernel_ext/device/ncu_mix.py --out $OUT/r 8 8 mix:1x65536+63x1024 $V/v75.so $V/v79c.so
pack
echo "done ($SECONDS s)"
