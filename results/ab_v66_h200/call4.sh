#!/usr/bin/env bash
# Call 4: tests/gpu/test_kernel_sanitizer.py (synccheck and memcheck of the tiny parity subset, both
# configurations) on the release library (v66a), then on v65 (variants_v66/v65.so, HEAD 013b787), where synccheck
# on the default path must fail (only that test runs there).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
timeout 240 python3 -m pytest -q tests/gpu/test_kernel_sanitizer.py -p no:cacheprovider > $OUT/r/sanitizer_tests_v66.log 2>&1
echo "v66 rc=$? ($SECONDS s)"; tail -1 $OUT/r/sanitizer_tests_v66.log
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants_v66/v65.so timeout 120 python3 -m pytest -q tests/gpu/test_kernel_sanitizer.py -k "synccheck and auto" -p no:cacheprovider > $OUT/r/sanitizer_tests_v65.log 2>&1
echo "v65 rc=$? ($SECONDS s)"; grep -E "^(FAILED|PASSED)|passed|failed" $OUT/r/sanitizer_tests_v65.log | tail -5
