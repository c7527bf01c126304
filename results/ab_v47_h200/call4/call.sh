#!/usr/bin/env bash
# Full benchmark of v47 with SGLang's kernels; then v46 and v47 in plain stream order (ours only).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v47.so timeout 450 python3 -m kernel_ext.bench --grid full --label v47 --out $OUT/bench > $OUT/bench_v47.log 2>&1; echo "bench rc=$? ($SECONDS s)"
for v in v46 v47; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 60 python3 -m kernel_ext.bench --grid full --no-triton --no-early-start --label $v-plain --out /tmp/ab_${v}plain > $OUT/r/ab_${v}plain.log 2>&1; echo "$v plain rc=$? ($SECONDS s)"; cp /tmp/ab_${v}plain/bench.json $OUT/r/ab_${v}plain_bench.json; done
python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v46plain_bench.json $OUT/r/ab_v47plain_bench.json > $OUT/r/ab_compare_v46plain_vs_v47plain.txt; head -9 $OUT/r/ab_compare_v46plain_vs_v47plain.txt
tail -22 $OUT/bench_v47.log; ls $OUT/bench
cd $OUT && tar czf 0_all.tgz r bench bench_v47.log && echo tarred
