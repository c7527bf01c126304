#!/usr/bin/env bash
# v52 (v51 + the tail's 16 mask bytes per thread loaded before any is tested) against v47 and v51e: quick parity of
# all three configurations (stop on failure), phase marks of v47 and v52, two interleaved A/B rounds over the full
# grid, then v52's full parity, GPU tests and memcheck.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
LIB=$PWD/kernel_ext/build/variants/v52.so
rc=0
for cfg in 0 1 2; do
  CUTOVER_KERNEL_TILES=$cfg CUTOVER_KERNEL_LIB=$LIB timeout 150 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v52_cfg$cfg.json > $OUT/r/parity_quick_v52_cfg$cfg.log 2>&1; r=$?; echo "quick parity v52 config $cfg rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v52_cfg$cfg.log; [ $r = 0 ] || rc=$r
done
pack
[ $rc = 0 ] || { echo "parity failed: stopping"; exit 0; }
S="16,32,64,1024 8,64,64,1024 16,64,64,1024 16,32,16,1024 16,8,64,1024 16,8,16,4096 8,8,64,1024 8,8,4,16384 8,8,16,4096 8,8,1,1024"
for v in 47 52; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 60 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v47 v51e v52; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for r in 1 2; do for b in v47 v51e; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_${b}_bench_$r.json $OUT/r/ab_v52_bench_$r.json > $OUT/r/ab_compare_${b}_vs_v52_$r.txt; done; head -9 $OUT/r/ab_compare_v47_vs_v52_$r.txt; done
pack; echo "($SECONDS s)"
CUTOVER_KERNEL_LIB=$LIB timeout $((560 - SECONDS)) python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v52_h200.json > $OUT/r/parity_full_v52_h200.log 2>&1; echo "full parity rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v52_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout $((575 - SECONDS)) python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v52_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -2 $OUT/r/gpu_tests_v52_h200.log; pack
CUTOVER_KERNEL_LIB=$LIB timeout $((590 - SECONDS)) compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v52_h200.txt 2>&1; echo "memcheck rc=$? ($SECONDS s)"; grep "ERROR SUMMARY" $OUT/r/memcheck_v52_h200.txt; pack
for v in 47 52; do echo "== v$v"; sed -n 2,13p $OUT/r/phase_times_v$v.txt | cut -c1-175; done
