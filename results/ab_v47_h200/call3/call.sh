#!/usr/bin/env bash
# Checks of v47 (the carried kernel_ext/build/libcutover_verify.so): full parity, configurations 1 and 2 quick,
# GPU tests, memcheck, racecheck; phase marks of v46 and v47.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
timeout 170 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v47_h200.json > $OUT/r/parity_full_v47_h200.log 2>&1; echo "full parity rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v47_h200.log
for c in 1 2; do CUTOVER_KERNEL_TILES=$c timeout 100 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v47_cfg${c}_h200.json > $OUT/r/parity_quick_v47_cfg${c}_h200.log 2>&1; echo "cfg$c quick rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v47_cfg${c}_h200.log; done
timeout 90 python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v47_h200.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -2 $OUT/r/gpu_tests_v47_h200.log
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v47_h200.txt 2>&1; echo "memcheck rc=$? ($SECONDS s)"; grep "ERROR SUMMARY" $OUT/r/memcheck_v47_h200.txt
S="8,8,1,1024 8,8,1,65536 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,32,4,16384"
for v in 46 47; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 60 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
head -8 $OUT/r/phase_times_v47.txt
cd $OUT && tar czf 0_all.tgz r && echo tarred
left=$((570 - SECONDS)); cd - > /dev/null
timeout $left compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v47_h200.txt 2>&1; echo "racecheck rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY|parity tiny" $OUT/r/racecheck_v47_h200.txt
cd $OUT && tar czf 0_all.tgz r && echo tarred again
