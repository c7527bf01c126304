#!/usr/bin/env bash
# Call 5: the release library (v70 as shipped: its request-order instances are v67's SASS on sm_90a, see the README;
# built here and carried in kernel_ext/build): every gpu-marked test, then the full parity grid on the default path and
# in configuration 2; then memcheck and synccheck of the two parity tests that take the longest-first order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
timeout 300 python3 -m pytest -q -m gpu tests/gpu > $OUT/r/gpu_tests_v70final.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/gpu_tests_v70final.log
pack
timeout 150 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v70final_default.json > $OUT/r/parity_full_v70final_default.log 2>&1
echo "full parity default rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v70final_default.log
CUTOVER_KERNEL_TILES=2 timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v70final_cfg2.json > $OUT/r/parity_full_v70final_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v70final_cfg2.log
gzip -f $OUT/r/*.json 2>/dev/null
pack
check() {  # tool
  timeout 45 compute-sanitizer --tool $1 --error-exitcode 9 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
    -k "long_request_among or spread_lengths" > $OUT/r/${1}_longest_first_v70final.txt 2>&1
  echo "rc=$?" >> $OUT/r/${1}_longest_first_v70final.txt
}
check memcheck &
check synccheck &
wait
pack
for t in memcheck synccheck; do
  f=$OUT/r/${t}_longest_first_v70final.txt
  printf '%-10s %s | %s | %s\n' $t "$(tail -n 1 $f)" "$(grep -E 'SUMMARY' $f)" "$(grep -E 'passed|failed' $f | tail -n 1)"
done
echo "($SECONDS s)"
