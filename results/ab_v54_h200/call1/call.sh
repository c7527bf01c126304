#!/usr/bin/env bash
# v54a / v54b (the many-split combine read in whole 128-byte lines: 4 groups x 9 splits, or 2 groups x 17) against
# v52: quick parity of both (stop on failure), phase marks of v52 and v54a, two interleaved A/B rounds over the full grid.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
rc=0
for v in v54a v54b; do
  CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 120 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_$v.json > $OUT/r/parity_quick_$v.log 2>&1; r=$?; echo "quick parity $v rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_$v.log; [ $r = 0 ] || rc=$r
done
pack
[ $rc = 0 ] || { echo "parity failed: stopping"; exit 0; }
S="8,8,4,16384 8,8,4,4096 8,8,4,65536 8,8,16,4096 8,8,1,65536 16,8,4,16384 16,32,4,4096 8,8,4,1024"
for v in 52 54a; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 60 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
pack
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v52 v54a v54b; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for r in 1 2; do for n in v54a v54b; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v52_bench_$r.json $OUT/r/ab_${n}_bench_$r.json > $OUT/r/ab_compare_v52_vs_${n}_$r.txt; head -9 $OUT/r/ab_compare_v52_vs_${n}_$r.txt; done; done
pack; echo "($SECONDS s)"
for v in 52 54a; do echo "== v$v"; sed -n 2,10p $OUT/r/phase_times_v$v.txt | cut -c1-175; done
