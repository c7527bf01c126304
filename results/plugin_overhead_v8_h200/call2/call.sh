#!/usr/bin/env bash
# The gate and the epilogue as programmatic dependents (v8), second call: the shipped dual-arch library built from
# the tree (its sm_90a SASS is call 1's EG, function by function). Every GPU test; the two new ordering tests also
# against a build without the two waits (must be able to fail); memcheck of the gate, the epilogue and the output
# choice; the plugin benchmark on its four default shapes.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
timeout 300 python3 -m pytest -q -ra -m gpu -p no:cacheprovider tests/gpu > $OUT/r/gpu_tests.log 2>&1
echo "gpu tests rc=$? ($SECONDS s)"; tail -3 $OUT/r/gpu_tests.log; pack
for i in 1 2 3; do
  CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/pdl_ab/nowait.so timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_shadow_epilogue.py -k "right_behind" > $OUT/r/nowait_tests_$i.log 2>&1
  echo "ordering tests on the build without waits, run $i: rc=$? ($SECONDS s)"; tail -1 $OUT/r/nowait_tests_$i.log
done
pack
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernel_ext/device/fastpath_memcheck.py > $OUT/r/memcheck.txt 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|workload done" $OUT/r/memcheck.txt; pack
timeout 150 python3 -m cutover.plugin.bench_overhead --reps 30 --out $OUT/r/plugin_overhead > $OUT/r/bench.log 2>&1
echo "bench rc=$? ($SECONDS s)"; tail -8 $OUT/r/bench.log; pack
