#!/usr/bin/env bash
# v48 (the one-part kernel's next gather before this tile's copy wait) against v47: one A/B round (full grid, ours
# only, early start); if memory-bound shapes gain, full parity, phase marks, GPU tests, racecheck of v48.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
OUT=/tmp/res GRIDS=full ROUNDS=1 bash kernel_ext/device/ab_call.sh
for v in v47 v48; do cp /tmp/ab_${v}_full_1/bench.json $OUT/r/ab_${v}_bench_1.json; done
python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v47_bench_1.json $OUT/r/ab_v48_bench_1.json > $OUT/r/ab_compare_v47_vs_v48_1.txt; head -9 $OUT/r/ab_compare_v47_vs_v48_1.txt; pack; echo "($SECONDS s)"
gain=$(python3 -c "import re,sys; t=open('$OUT/r/ab_compare_v47_vs_v48_1.txt').read(); m=float(re.search(r'memory-bound: median ([0-9.]+)', t).group(1)); print(1 if m < 0.99 else 0)")
[ "$gain" = 1 ] || { echo "no memory-bound gain: stopping"; exit 0; }
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v48.so timeout 130 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v48_h200.json > $OUT/r/parity_full_v48_h200.log 2>&1; echo "full parity rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v48_h200.log; pack
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase48/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "8,8,1,65536 8,8,4,16384 8,8,16,4096 8,8,64,1024" --json $OUT/r/phase_times_v48.json > $OUT/r/phase_times_v48.txt 2>&1; echo "phase rc=$? ($SECONDS s)"; cat $OUT/r/phase_times_v48.txt; pack
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v48.so timeout 60 python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v48_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v48_h200.log; pack
left=$((420 - SECONDS)); [ $left -gt 30 ] || exit 0
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v48.so timeout $left compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v48_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY|parity tiny" $OUT/r/racecheck_v48_h200.txt; pack
