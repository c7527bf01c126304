#!/usr/bin/env bash
# Where the plan's time goes: phase marks of v54 and of a diagnostic build whose mark 1 is taken when the plan's
# first index loads have landed (after the first warp sum) instead of after the whole plan.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
S="8,8,1,1024 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,8,1,1024 16,32,64,1024"
for v in 54 54diag; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 80 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
for v in 54 54diag; do echo "== v$v"; sed -n 2,8p $OUT/r/phase_times_v$v.txt | cut -c1-110; done
