#!/usr/bin/env bash
# Instruction fetch or arithmetic? v56's plan as one out-of-line function (phasenoinl), and the same function
# called twice (phasenoinl2, mark 1 between the calls: the second walks the same code, warm in the instruction
# cache); v56's phase build for reference.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
S="8,8,1,1024 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,8,1,1024 16,32,64,1024"
for v in 56 noinl noinl2; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
for v in 56 noinl noinl2; do echo "== $v"; sed -n 2,8p $OUT/r/phase_times_v$v.txt | cut -c1-70; done
(cd $OUT && tar czf 0_all.tgz r)
