#!/usr/bin/env bash
# v50 phase marks with the merge's inner marks, raw per-CTA marks saved.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
S="8,8,1,1024 8,8,1,16384 8,8,4,16384 8,8,64,1024"
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase50/libcutover_verify.so timeout 90 python3 kernel_ext/device/phase_times.py --shapes "$S" --raw $OUT/r/raw50 --json $OUT/r/phase_times_v50d.json > $OUT/r/phase_times_v50d.txt 2>&1; echo "phase rc=$? ($SECONDS s)"
cat $OUT/r/phase_times_v50d.txt | head -8
cd $OUT && tar czf 0_all.tgz r
