#!/usr/bin/env bash
# Call 2: v78b (v78 whose warps skip the pass after one vote where none of a call's first 64 requests is long) and
# v78n (measurement only: v78's instance with the pass never run, i.e. its item path alone) beside v75 and v75np:
# the long-request GPU tests with v78b, timelines of the four, two interleaved A/B rounds of v78b against v75 over
# the full and mixed grids.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v78b.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v78b
CUTOVER_KERNEL_LIB=$V/v78b.so timeout 150 python3 -m pytest -q -ra -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "long_request or spread_lengths or long_among_many or mixed_prefix" > $OUT/r/gpu_long_v78b.log 2>&1
echo "long-request tests rc=$? ($SECONDS s): $(tail -n 1 $OUT/r/gpu_long_v78b.log)"
SHAPES="8,8,16,1024 8,8,16,4096 8,16,16,1024 8,8,64,1024 16,16,4,1024 8,8,1,1024"
for lib in v75np v75 v78b v78n; do
  CUTOVER_KERNEL_LIB=$V/$lib.so timeout 90 python3 kernel_ext/device/timeline.py --shapes "$SHAPES" \
    --json $OUT/r/timeline_$lib.json > $OUT/r/timeline_$lib.txt 2>&1
  echo "timeline $lib rc=$? ($SECONDS s)"; tail -n 7 $OUT/r/timeline_$lib.txt
done
pack
VARIANTS=$V/ab OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "done ($SECONDS s)"
