#!/usr/bin/env bash
# A shipped version's benchmark call: the full grid of $NEW with SGLang's kernels (results/bench_$NEW_h200.*), then
# $BASE and $NEW in plain stream order, ours only, compared by ab_compare.py. Libraries are
# kernel_ext/build/variants/{$BASE,$NEW}.so (carry kernel_ext/build and .bundle). Everything lands under $OUT.
#   NEW=v47 BASE=v46 bash kernel_ext/device/release_bench_call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
: "${NEW:?set NEW, e.g. NEW=v47}" "${BASE:?set BASE, e.g. BASE=v46}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$NEW.so timeout 450 python3 -m kernel_ext.bench --grid full --label $NEW --out $OUT/bench > $OUT/bench_$NEW.log 2>&1; echo "bench rc=$? ($SECONDS s)"
for v in $BASE $NEW; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/$v.so timeout 60 python3 -m kernel_ext.bench --grid full --no-triton --no-early-start --label $v-plain --out /tmp/ab_${v}plain > $OUT/r/ab_${v}plain.log 2>&1; echo "$v plain rc=$? ($SECONDS s)"; cp /tmp/ab_${v}plain/bench.json $OUT/r/ab_${v}plain_bench.json; done
python3 kernel_ext/device/ab_compare.py $OUT/r/ab_${BASE}plain_bench.json $OUT/r/ab_${NEW}plain_bench.json > $OUT/r/ab_compare_${BASE}plain_vs_${NEW}plain.txt; head -9 $OUT/r/ab_compare_${BASE}plain_vs_${NEW}plain.txt
tail -22 $OUT/bench_$NEW.log; ls $OUT/bench
cd $OUT && tar czf 0_all.tgz r bench bench_$NEW.log && echo tarred
