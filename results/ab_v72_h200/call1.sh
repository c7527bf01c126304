#!/usr/bin/env bash
# Call 1: v72 (one wave at the least chunk that fits it) against v71, two interleaved rounds over the full and
# mixed grids; then the parity tests of the plan's mixed batches with v72, on the default path and in
# configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v72.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v72
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
CUTOVER_KERNEL_LIB=$V/v72.so timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
  -k "least_chunk or long_request_among or spread_lengths or plan_splits" > $OUT/r/parity_plan_v72.txt 2>&1
echo "plan parity tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_plan_v72.txt
pack
