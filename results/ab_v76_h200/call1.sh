#!/usr/bin/env bash
# Call 1: v76 (v72's least fitting chunk, out of line, searched from the first chunk) and v76i (the same inline)
# against v75. First the plan's GPU tests with v76; then two interleaved rounds over the full and mixed grids; then
# ncu's duration of the main kernel and the combine at 8/8 1x65536+63x1024 (kernel_ext/device/ncu_mix.py).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v76.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v76
CUTOVER_KERNEL_LIB=$V/v76.so timeout 150 python3 -m pytest -q -ra -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "least_chunk or long_request or spread_lengths or long_among_many" > $OUT/r/gpu_plan_v76.log 2>&1
echo "plan tests rc=$? ($SECONDS s): $(tail -n 1 $OUT/r/gpu_plan_v76.log)"
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
python3 kernel_ext/device/ncu_mix.py --out $OUT/r 8 8 mix:1x65536+63x1024 $V/v75.so $V/v76.so $V/v76i.so
python3 kernel_ext/device/ncu_mix.py --out $OUT/r 8 8 even:1x65536+63x1024 $V/v75.so
pack
echo "done ($SECONDS s)"
