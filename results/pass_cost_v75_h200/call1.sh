#!/usr/bin/env bash
# Call 1: the timeline (kernel_ext/device/timeline.py) of v75 and v75np (the pass never launched), two interleaved
# rounds on batch-16 and batch-64 calls and a batch-1 control; then one A/B round over the full grid.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v75np.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v75np
SHAPES="8,8,16,1024 8,8,16,4096 8,16,16,1024 16,8,16,1024 8,8,64,1024 16,16,4,1024 8,8,1,1024"
for round in 1 2; do
  for lib in v75 v75np; do
    [ $round = 2 ] && lib=$([ $lib = v75 ] && echo v75np || echo v75)
    CUTOVER_KERNEL_LIB=$V/$lib.so timeout 120 python3 kernel_ext/device/timeline.py --shapes "$SHAPES" \
      --json $OUT/r/timeline_${lib}_$round.json > $OUT/r/timeline_${lib}_$round.txt 2>&1
    echo "timeline $lib round $round rc=$? ($SECONDS s)"; tail -n 8 $OUT/r/timeline_${lib}_$round.txt
  done
done
pack
VARIANTS=$V OUT=$OUT/r GRIDS="full" ROUNDS=1 bash kernel_ext/device/ab_call.sh
pack
echo "done ($SECONDS s)"
