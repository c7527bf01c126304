#!/usr/bin/env bash
# Call 3: the release library (v67l shipped as v67, both archs): every gpu-marked test (the parity tests with the
# long-among-short case and the plan test, the sanitizer tests, acceptance, plugin graphs); then memcheck and
# synccheck of the new parity and plan tests (the plan's waves of splits) in both configurations, side by side.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
timeout 300 python3 -m pytest -q -m gpu tests/gpu > $OUT/r/gpu_tests_v67.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/gpu_tests_v67.log
pack
left=$((560 - SECONDS))
check() {  # tool
  timeout $left compute-sanitizer --tool $1 --error-exitcode 9 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
    -k "long_request or plan_splits" > $OUT/r/${1}_long_among_short.txt 2>&1
  echo "rc=$?" >> $OUT/r/${1}_long_among_short.txt
}
check memcheck &
check synccheck &
wait
pack
for t in memcheck synccheck; do
  f=$OUT/r/${t}_long_among_short.txt
  printf '%-10s %s | %s | %s\n' $t "$(tail -n 1 $f)" "$(grep -E 'SUMMARY' $f)" "$(grep -E 'passed|failed' $f | tail -n 1)"
done
echo "($SECONDS s)"
