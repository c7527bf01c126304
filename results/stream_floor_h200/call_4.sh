#!/usr/bin/env bash
# stream_floor.cu after its timing loop became one helper (queued_ms): the default build once, the evict-first build.
set -uo pipefail
mkdir -p $OUT
B="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/stream_floor.cu"
timeout 120 $B -o /tmp/sf && timeout 120 $B -DSTREAM_FLOOR_EVICT_FIRST=1 -o /tmp/sf_ef; echo "build rc=$?"
timeout 90 /tmp/sf $OUT/stream_floor_h200_4.json | tee $OUT/stream_floor_h200_4.txt; echo "floor rc=$?"
timeout 90 /tmp/sf_ef $OUT/stream_floor_ef_h200_2.json > $OUT/stream_floor_ef_h200_2.txt 2>&1; echo "floor ef rc=$?"; cat $OUT/stream_floor_ef_h200_2.txt
