#!/usr/bin/env bash
# Call 2: the toy's mode 4 (one loop, barrier.sync 0) plain and under racecheck and synccheck; quick parity on the
# default path (wgmma) of v66a (the part barrier as sync_block) and v66b (one loop over the parts, __syncthreads);
# then two interleaved A/B rounds of v65 (HEAD), v66a and v66b over the full grid, ours only. Libraries in
# kernel_ext/build/variants_v66 (python -m kernel_ext.build --arch sm_90a).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
T=kernel_ext/build/toy/named_barrier_racecheck; V=$PWD/kernel_ext/build/variants_v66
$T 4
for tool in racecheck synccheck; do
  timeout 40 compute-sanitizer --tool $tool $T 4 > $OUT/r/toy_${tool}_mode4.txt 2>&1
  echo "$tool mode 4: $(grep -E 'sums wrong' $OUT/r/toy_${tool}_mode4.txt) | $(grep -E 'SUMMARY' $OUT/r/toy_${tool}_mode4.txt)"
done
for v in v66a v66b; do
  CUTOVER_KERNEL_LIB=$V/$v.so timeout 100 python3 -m kernel_ext.gpu_parity --subset quick --no-triton --json $OUT/r/parity_quick_$v.json > $OUT/r/parity_quick_$v.log 2>&1
  r=$?; echo "$v quick parity rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_$v.log; [ $r = 0 ] || rm $V/$v.so
done
pack
VARIANTS=$V OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2; do
  for v in v65 v66a v66b; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  for v in v66a v66b; do
    [ -f $OUT/r/ab_${v}_$run.json ] || continue
    python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v65_$run.json $OUT/r/ab_${v}_$run.json > $OUT/r/cmp_v65_vs_${v}_$run.txt
    echo "== $run: $v / v65"; sed -n 1,3p $OUT/r/cmp_v65_vs_${v}_$run.txt
  done
done
pack
echo "($SECONDS s)"
