#!/usr/bin/env bash
# A release's checks on the GPU machine, in one run (~10 minutes on the H200), from the repository root:
#   1. build the library (BUILD=0: use kernel_ext/build/libcutover_verify.so as it is);
#   2. every gpu-marked test;
#   3. the full parity grid on the default path and in configuration 2 (sm_120's kernel, CUTOVER_KERNEL_TILES=2);
#   4. compute-sanitizer memcheck and synccheck of the gpu parity tests that SANITIZE_K selects (pytest -k; default:
#      long requests among short ones and spread lengths: the combine's long-request pass and the longest-first
#      order);
#   5. the benchmark, full and mixed grids with SGLang's kernels in the same run, and its report regenerated into
#      REPORT_DIR (default benchmarks/h200: commit it with the release) by `python -m kernel_ext.bench_report`.
# Logs and raw outputs go under $OUT (default /tmp/release_checks); a short table is printed last; the exit status is
# non-zero when any step failed.
#   bash kernel_ext/device/release_checks.sh
# Needs: nvcc and compute-sanitizer (CUDA 13), torch with CUDA, matplotlib, and SGLang's Triton kernels importable
# (`sglang` installed, or a directory holding its `sglang` package added to PYTHONPATH).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/release_checks}"; mkdir -p "$OUT"
REPORT_DIR="${REPORT_DIR:-benchmarks/h200}"
failed=0
step() {  # name rc
  echo "$1 rc=$2 ($SECONDS s)"
  [ "$2" = 0 ] || failed=1
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${BUILD:-1}" = 1 ]; then python3 -m kernel_ext.build > "$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }; fi
timeout "${TESTS_S:-300}" python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
step "gpu tests" $?
for tiles in 0 2; do
  CUTOVER_KERNEL_TILES=$tiles timeout "${PARITY_S:-150}" python3 -m kernel_ext.gpu_parity --subset full \
    --json "$OUT/parity_full_cfg$tiles.json" > "$OUT/parity_full_cfg$tiles.log" 2>&1
  step "full parity configuration $tiles" $?
done
sanitize() {  # tool
  timeout "${SANITIZE_S:-240}" compute-sanitizer --tool "$1" --error-exitcode 9 python3 -m pytest -q -m gpu \
    tests/gpu/test_kernel_parity.py -p no:cacheprovider -k "${SANITIZE_K:-long_request or spread_lengths}" \
    > "$OUT/$1.txt" 2>&1
  echo "rc=$?" >> "$OUT/$1.txt"
}
sanitize memcheck &
sanitize synccheck &
wait
for tool in memcheck synccheck; do grep -q '^rc=0$' "$OUT/$tool.txt" || failed=1; done
for grid in full mixed; do
  timeout "${BENCH_S:-450}" python3 -m kernel_ext.bench --grid $grid --label "${LABEL:-release}" --out "$OUT/bench_$grid" \
    > "$OUT/bench_$grid.log" 2>&1
  rc=$?; step "benchmark $grid" $rc; [ $rc = 0 ] || bench_failed=1
done
if [ -z "${bench_failed:-}" ]; then  # a benchmark cut short leaves the committed report as it was
  python3 -m kernel_ext.bench_report "$OUT/bench_full/bench.json" "$OUT/bench_mixed/bench.json" --out "$REPORT_DIR"
  step "report into $REPORT_DIR" $?
fi
echo "== release checks ($SECONDS s)"
printf '%-24s %s\n' "gpu tests" "$(tail -n 1 "$OUT/gpu_tests.log")"
for tiles in 0 2; do
  printf '%-24s %s\n' "parity configuration $tiles" "$(tail -n 1 "$OUT/parity_full_cfg$tiles.log")"
done
for tool in memcheck synccheck; do
  f="$OUT/$tool.txt"
  printf '%-24s %s | %s | %s\n' "$tool" "$(tail -n 1 "$f")" "$(grep -E 'ERROR SUMMARY' "$f")" \
    "$(grep -E 'passed|failed' "$f" | tail -n 1)"
done
printf '%-24s %s\n' "benchmark" "$(tail -n 1 "$OUT/bench_full.log")"
exit $failed
