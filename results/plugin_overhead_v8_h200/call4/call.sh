#!/usr/bin/env bash
# v8, fourth call, after the review's mends (the grid-dependency helpers moved to dependent_launch.cuh, SASS
# unchanged; the two ordering tests share their setup): every GPU test on the shipped library, then the two ordering
# tests three times against the build without the two waits (they must fail).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
timeout 300 python3 -m pytest -q -ra -m gpu -p no:cacheprovider tests/gpu > $OUT/r/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(tail -1 $OUT/r/gpu_tests.log) ($SECONDS s)"
for i in 1 2 3; do
  CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/pdl_ab/nowait.so timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_shadow_epilogue.py -k "right_behind" > $OUT/r/nowait_$i.log 2>&1
  echo "no-wait build run $i: rc=$? $(tail -1 $OUT/r/nowait_$i.log)"
done
grep -h "AssertionError: the" $OUT/r/nowait_*.log | sort | uniq -c
(cd $OUT && tar czf 0_all.tgz r)
