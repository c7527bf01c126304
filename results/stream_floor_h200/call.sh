#!/usr/bin/env bash
# The stream floor (kernel_ext/device/stream_floor.cu): the default build, twice; then the evict-first build (last:
# its first run stopped with "illegal instruction").
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/floor
B="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/stream_floor.cu"
timeout 120 $B -o /tmp/sf && timeout 120 $B -DSTREAM_FLOOR_EVICT_FIRST=1 -o /tmp/sf_ef; echo "build rc=$? ($SECONDS s)"
for r in 1 2; do timeout 90 /tmp/sf $OUT/floor/stream_floor_h200_$r.json | tee $OUT/floor/stream_floor_h200_$r.txt; echo "floor $r rc=$? ($SECONDS s)"; done
timeout 90 compute-sanitizer --tool memcheck /tmp/sf > $OUT/floor/memcheck.txt 2>&1; echo "memcheck rc=$?"; grep "ERROR SUMMARY" $OUT/floor/memcheck.txt
timeout 90 /tmp/sf_ef $OUT/floor/stream_floor_ef_h200.json | tee $OUT/floor/stream_floor_ef_h200.txt; echo "floor ef rc=$? ($SECONDS s)"
cd $OUT && tar czf 0_all.tgz floor && echo tarred
