#!/usr/bin/env bash
# Call 1: v78 (the long-request pass run by the combine's own warps after their items, no blocks of its own)
# against v75 and v75np (v75 with the pass never launched: the cost floor for calls without a long request).
# The long-request GPU tests with v78; timelines of the three; two interleaved A/B rounds over the full and mixed
# grids; ncu of the 8/8 1x65536+63x1024 mix's combine.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v78.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v78
CUTOVER_KERNEL_LIB=$V/v78.so timeout 150 python3 -m pytest -q -ra -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "long_request or spread_lengths or long_among_many or mixed_prefix" > $OUT/r/gpu_long_v78.log 2>&1
echo "long-request tests rc=$? ($SECONDS s): $(tail -n 1 $OUT/r/gpu_long_v78.log)"
SHAPES="8,8,16,1024 8,8,16,4096 8,16,16,1024 8,8,64,1024 16,16,4,1024 8,8,1,1024"
for lib in v75np v75 v78; do
  CUTOVER_KERNEL_LIB=$V/$lib.so timeout 90 python3 kernel_ext/device/timeline.py --shapes "$SHAPES" \
    --json $OUT/r/timeline_$lib.json > $OUT/r/timeline_$lib.txt 2>&1
  echo "timeline $lib rc=$? ($SECONDS s)"; tail -n 7 $OUT/r/timeline_$lib.txt
done
pack
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
timeout 60 python3 kernel_ext/device/ncu_mix.py --out $OUT/r 8 8 mix:1x65536+63x1024 $V/v75.so $V/v78.so
pack
echo "done ($SECONDS s)"
