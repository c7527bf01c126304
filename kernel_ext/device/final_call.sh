#!/usr/bin/env bash
# Last device call of a session: build, every gpu-marked test (kernel + plugin), memcheck, full parity grid.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
if [ "${BUILD:-1}" = 1 ]; then python3 -m kernel_ext.build || exit 1; fi  # BUILD=0: carry kernel_ext/build
timeout "${TESTS_S:-60}" python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -15 || true
timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny \
  --no-triton > "$OUT/memcheck.txt" 2>&1; echo "memcheck rc=$?"; grep "ERROR SUMMARY" "$OUT/memcheck.txt"
timeout "${PARITY_S:-90}" python3 -m kernel_ext.gpu_parity --subset full --json "$OUT/parity.json" 2>&1 | tail -12
