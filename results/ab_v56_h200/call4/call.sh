#!/usr/bin/env bash
# v56 (the plan's request loops not unrolled) as the dual-arch release: full parity (stop on failure); phase marks
# of v56 and of the measurement-only plan oracle (each CTA's item kept across calls: the upper bound of a plan
# computed once per step); two A/B rounds of v54a, v56 and v56oracle (sm_90a); GPU tests, memcheck, racecheck.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
LIB=$PWD/kernel_ext/build/libcutover_verify.so
CUTOVER_KERNEL_LIB=$LIB timeout 130 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v56_h200.json > $OUT/r/parity_full_v56_h200.log 2>&1; r=$?; echo "full parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_full_v56_h200.log; pack
[ $r = 0 ] || { echo "parity failed: stopping"; exit 0; }
S="8,8,1,1024 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,8,1,1024 16,32,64,1024"
for v in 56 oracle; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
for v in 56 oracle; do echo "== $v"; sed -n 2,8p $OUT/r/phase_times_v$v.txt | cut -c1-70; done; pack
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for r in 1 2; do for v in v54a v56 v56oracle; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done
  for pair in "v54a v56" "v56 v56oracle"; do set -- $pair
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_$1_bench_$r.json $OUT/r/ab_$2_bench_$r.json > $OUT/r/ab_compare_$1_vs_$2_$r.txt; echo "== round $r: $2 / $1"; sed -n 1,3p $OUT/r/ab_compare_$1_vs_$2_$r.txt; sed -n 6p $OUT/r/ab_compare_$1_vs_$2_$r.txt; done; done
pack; echo "($SECONDS s)"
CUTOVER_KERNEL_LIB=$LIB timeout 60 python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v56_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v56_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v56_h200.txt 2>&1; echo "memcheck rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY" $OUT/r/memcheck_v56_h200.txt; pack
CUTOVER_KERNEL_LIB=$LIB timeout $((575 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v56_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY" $OUT/r/racecheck_v56_h200.txt; pack
