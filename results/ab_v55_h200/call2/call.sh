#!/usr/bin/env bash
# v55 (v54 whose plan keeps lane l's prefix in a register, divides in 32 bits where the value fits and reduces
# with redux.sync): full parity of the dual-arch library (stop on failure), phase marks of v54 and v55, one A/B
# round over the full grid (v54a.so, v55.so: sm_90a builds), the GPU tests, memcheck, then racecheck in the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
LIB=$PWD/kernel_ext/build/libcutover_verify.so
CUTOVER_KERNEL_LIB=$LIB timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v55_h200.json > $OUT/r/parity_full_v55_h200.log 2>&1; r=$?; echo "full parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_full_v55_h200.log; pack
[ $r = 0 ] || { echo "parity failed: stopping"; exit 0; }
S="8,8,1,1024 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,8,1,1024 16,32,64,1024"
for v in 54 55; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
for v in 54 55; do sed -n 2,8p $OUT/r/phase_times_v$v.txt | cut -c1-62; done
OUT=/tmp/res GRIDS=full ROUNDS=1 bash kernel_ext/device/ab_call.sh
for v in v54a v55; do cp /tmp/ab_${v}_full_1/bench.json $OUT/r/ab_${v}_bench_1.json; done
python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v54a_bench_1.json $OUT/r/ab_v55_bench_1.json > $OUT/r/ab_compare_v54a_vs_v55_1.txt; head -10 $OUT/r/ab_compare_v54a_vs_v55_1.txt; pack; echo "($SECONDS s)"
CUTOVER_KERNEL_LIB=$LIB timeout 60 python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v55_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v55_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v55_h200.txt 2>&1; echo "memcheck rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY" $OUT/r/memcheck_v55_h200.txt; pack
CUTOVER_KERNEL_LIB=$LIB timeout $((350 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v55_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY" $OUT/r/racecheck_v55_h200.txt; pack
