#!/usr/bin/env bash
# Call 1: v79c (v75's pass blocks with a cheaper census: the first 64 requests' split counts loaded beside the
# output choice, a warp vote, and the scan only where a request may be long) against v75: the long-request GPU
# tests with v79c, timelines of both, two interleaved A/B rounds over the full and mixed grids.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v79.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v79
CUTOVER_KERNEL_LIB=$V/v79c.so timeout 150 python3 -m pytest -q -ra -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "long_request or spread_lengths or long_among_many or mixed_prefix" > $OUT/r/gpu_long_v79c.log 2>&1
echo "long-request tests rc=$? ($SECONDS s): $(tail -n 1 $OUT/r/gpu_long_v79c.log)"
SHAPES="8,8,16,1024 8,8,16,4096 8,16,16,1024 8,8,64,1024 16,16,4,1024 8,8,1,1024"
for lib in v75 v79c; do
  CUTOVER_KERNEL_LIB=$V/$lib.so timeout 90 python3 kernel_ext/device/timeline.py --shapes "$SHAPES" \
    --json $OUT/r/timeline_$lib.json > $OUT/r/timeline_$lib.txt 2>&1
  echo "timeline $lib rc=$? ($SECONDS s)"; tail -n 7 $OUT/r/timeline_$lib.txt
done
pack
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "done ($SECONDS s)"
