#!/usr/bin/env bash
# v8, third call: call 2's gate ordering test could not fail (the kernel before the gate, a fill, releases nothing
# early). Its replacement puts the gate right behind our kernel and has it copy o's storage. Both ordering tests,
# three times each, against the shipped library and against the build without the two waits.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
for lib in libcutover_verify.so pdl_ab/nowait.so; do
  for i in 1 2 3; do
    tag=$(basename $lib .so)_$i
    CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/$lib timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_shadow_epilogue.py -k "right_behind" > $OUT/r/ordering_$tag.log 2>&1
    echo "$lib run $i: rc=$? $(tail -1 $OUT/r/ordering_$tag.log) ($SECONDS s)"
  done
done
grep -h "AssertionError: the" $OUT/r/ordering_*.log | sort | uniq -c
(cd $OUT && tar czf 0_all.tgz r)
