#!/usr/bin/env bash
# Call 2: the release checks of v71 (call 1's library, the working tree's sources for both archs): every gpu-marked
# test, the full parity grid on the default path and in configuration 2, then memcheck and synccheck of the parity
# tests that take the longest-first order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v71.txz -C kernel_ext/build
cp kernel_ext/build/variants_v71/v71.so kernel_ext/build/libcutover_verify.so
timeout 300 python3 -m pytest -q -m gpu tests/gpu > $OUT/r/gpu_tests_v71.log 2>&1
echo "gpu tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/gpu_tests_v71.log
pack
for tiles in 0 2; do
  CUTOVER_KERNEL_TILES=$tiles timeout 150 python3 -m kernel_ext.gpu_parity --subset full \
    --json $OUT/r/parity_full_v71_cfg$tiles.json > $OUT/r/parity_full_v71_cfg$tiles.log 2>&1
  echo "full parity configuration ${tiles/0/default} rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v71_cfg$tiles.log
done
gzip -f $OUT/r/*.json 2>/dev/null
pack
check() {  # tool
  timeout 60 compute-sanitizer --tool $1 --error-exitcode 9 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
    -k "long_request_among or spread_lengths" > $OUT/r/${1}_longest_first_v71.txt 2>&1
  echo "rc=$?" >> $OUT/r/${1}_longest_first_v71.txt
}
check memcheck &
check synccheck &
wait
pack
for t in memcheck synccheck; do
  f=$OUT/r/${t}_longest_first_v71.txt
  printf '%-10s %s | %s | %s\n' $t "$(tail -n 1 $f)" "$(grep -E 'SUMMARY' $f)" "$(grep -E 'passed|failed' $f | tail -n 1)"
done
echo "($SECONDS s)"
