#!/usr/bin/env bash
# Is the plan's ~1.5 us after its data arrived a cold-start cost? Phase marks of v54, v56 (the plan's request
# loops not unrolled: 21.0 -> 10.8 KB of SASS before the first barrier) and a diagnostic build of v54 that runs
# the plan twice (mark 1 between: the second run is warm in the instruction, constant and L1 caches); then two
# A/B rounds over the full grid, v54a.so against v56.so (sm_90a builds).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
S="8,8,1,1024 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,8,1,1024 16,32,64,1024"
for v in 54 56 twice; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
for v in 54 56 twice; do echo "== $v"; sed -n 2,8p $OUT/r/phase_times_v$v.txt | cut -c1-70; done; pack
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for r in 1 2; do for v in v54a v56; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v54a_bench_$r.json $OUT/r/ab_v56_bench_$r.json > $OUT/r/ab_compare_v54a_vs_v56_$r.txt; echo "== round $r"; head -10 $OUT/r/ab_compare_v54a_vs_v56_$r.txt; done
pack; echo "($SECONDS s)"
