#!/usr/bin/env bash
# Call 1: v73 (CombineTwoSplits merges a request's splits beyond two 3 per batch) against v71, two interleaved
# rounds over the full and mixed grids; then the release checks of the tree's library (v73, both archs, carried as
# kernel_ext/build/libcutover_verify.so): kernel_ext/device/final_call.sh.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v73.txz -C kernel_ext/build
VARIANTS=$PWD/kernel_ext/build/variants_v73 OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
BUILD=0 TAG=v73 OUT=$OUT/r bash kernel_ext/device/final_call.sh
pack
