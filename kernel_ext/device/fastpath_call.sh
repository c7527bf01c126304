#!/usr/bin/env bash
# One device call for the fast dispatch (ABI 2): no build on the device (carry kernel_ext/build from here), quick
# parity, the plugin's graph test + the fused epilogue test, the plugin overhead benchmark, memcheck of the new
# paths (fastpath_memcheck.py). Results under $OUT. Cold machine: quick parity needs > 55 s (cut at 55 s on 11-29).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${PARITY_S:-90}" python3 -m kernel_ext.gpu_parity --subset quick --json "$OUT/parity_quick.json" \
  > "$OUT/parity_quick.log" 2>&1 || true
tail -4 "$OUT/parity_quick.log"
timeout "${TESTS_S:-90}" python3 -m pytest -q -ra -m gpu -p no:cacheprovider tests/gpu/test_shadow_epilogue.py \
  tests/gpu/test_plugin_graph.py > "$OUT/gpu_tests.log" 2>&1 || true
tail -25 "$OUT/gpu_tests.log"
timeout "${BENCH_S:-75}" python3 -m cutover.plugin.bench_overhead --out "$OUT/plugin_overhead" \
  > "$OUT/bench.log" 2>&1 || true
tail -10 "$OUT/bench.log"
timeout "${MEMCHECK_S:-35}" compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 kernel_ext/device/fastpath_memcheck.py > "$OUT/memcheck.txt" 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|workload done" "$OUT/memcheck.txt"
