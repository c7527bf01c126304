#!/usr/bin/env bash
# Call 4: is call 2's v70x / v67 (~1.003x with v67's main loop) the module's layout? v67dup is v67's sources with
# every main kernel instantiated twice (an unused template flag; the second copy never launched): each kernel's
# SASS is v67's instruction for instruction, only the module holds twice the kernels. Two interleaved rounds over
# the full grid. Then memcheck and synccheck of the parity tests that take the longest-first order (a long request
# among short ones at 16/16, 80 requests of spread lengths at 8/16) on the release library, both configurations.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v67dup.txz -C kernel_ext/build
VARIANTS=$PWD/kernel_ext/build/variants_v67dup OUT=/tmp/res GRIDS="full" ROUNDS=2 bash kernel_ext/device/ab_call.sh
for run in full_1 full_2; do
  for v in v67 v67dup; do [ -f /tmp/ab_${v}_$run/bench.json ] && gzip -c /tmp/ab_${v}_$run/bench.json > $OUT/r/ab_${v}_$run.json.gz; done
  python3 kernel_ext/device/ab_compare.py /tmp/ab_v67_$run/bench.json /tmp/ab_v67dup_$run/bench.json > $OUT/r/cmp_v67_vs_v67dup_$run.txt
  echo "== $run: v67dup / v67"; sed -n 1,3p $OUT/r/cmp_v67_vs_v67dup_$run.txt
done
pack
echo "A/B done ($SECONDS s)"
left=$((480 - SECONDS))
check() {  # tool
  timeout $left compute-sanitizer --tool $1 --error-exitcode 9 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
    -k "long_request_among or spread_lengths" > $OUT/r/${1}_longest_first.txt 2>&1
  echo "rc=$?" >> $OUT/r/${1}_longest_first.txt
}
check memcheck &
check synccheck &
wait
pack
for t in memcheck synccheck; do
  f=$OUT/r/${t}_longest_first.txt
  printf '%-10s %s | %s | %s\n' $t "$(tail -n 1 $f)" "$(grep -E 'SUMMARY' $f)" "$(grep -E 'passed|failed' $f | tail -n 1)"
done
echo "($SECONDS s)"
