#!/usr/bin/env bash
# Call 1: v71 (the order's second pass from registers) against v70, two interleaved rounds over the full and mixed
# grids; then the parity tests that take the longest-first order (a long request among short ones, 80 and 160
# requests of spread lengths) with v71, on the default path and in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v71.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v71
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
CUTOVER_KERNEL_LIB=$V/v71.so timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
  -k "long_request_among or spread_lengths" > $OUT/r/parity_lf_v71.txt 2>&1
echo "longest-first parity tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_lf_v71.txt
pack
