#!/usr/bin/env bash
# A release's checks in one device call (~370-420 s on the H200): every gpu-marked test, the full parity grid on the
# default path and in configuration 2 (sm_120's kernel), then compute-sanitizer memcheck and synccheck of the gpu
# tests that SANITIZE_K selects (pytest -k; default: the parity tests of long requests among short ones and of spread
# lengths: the combine's long-request pass and the longest-first order), in both configurations. Files under $OUT,
# named with TAG; a short table last.
#   BUILD=0 TAG=v71 bash kernel_ext/device/final_call.sh    # BUILD=0: carry kernel_ext/build/libcutover_verify.so
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
TAG="${TAG:-release}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu_$TAG.txt"
if [ "${BUILD:-1}" = 1 ]; then python3 -m kernel_ext.build || exit 1; fi
timeout "${TESTS_S:-300}" python3 -m pytest -q -ra -m gpu tests/gpu -p no:cacheprovider > "$OUT/gpu_tests_$TAG.log" 2>&1
echo "gpu tests rc=$? ($SECONDS s)"
for tiles in 0 2; do
  CUTOVER_KERNEL_TILES=$tiles timeout "${PARITY_S:-150}" python3 -m kernel_ext.gpu_parity --subset full \
    --json "$OUT/parity_full_${TAG}_cfg$tiles.json" > "$OUT/parity_full_${TAG}_cfg$tiles.log" 2>&1
  echo "full parity configuration $tiles rc=$? ($SECONDS s)"
done
sanitize() {  # tool
  timeout "${SANITIZE_S:-240}" compute-sanitizer --tool "$1" --error-exitcode 9 python3 -m pytest -q -m gpu \
    tests/gpu/test_kernel_parity.py -p no:cacheprovider -k "${SANITIZE_K:-long_request or spread_lengths}" \
    > "$OUT/${1}_$TAG.txt" 2>&1
  echo "rc=$?" >> "$OUT/${1}_$TAG.txt"
}
sanitize memcheck &
sanitize synccheck &
wait
echo "== $TAG ($SECONDS s)"
printf '%-22s %s\n' "gpu tests" "$(tail -n 1 "$OUT/gpu_tests_$TAG.log")"
for tiles in 0 2; do
  printf '%-22s %s\n' "parity configuration $tiles" "$(tail -n 1 "$OUT/parity_full_${TAG}_cfg$tiles.log")"
done
for tool in memcheck synccheck; do
  f="$OUT/${tool}_$TAG.txt"
  printf '%-22s %s | %s | %s\n' "$tool" "$(tail -n 1 "$f")" "$(grep -E 'ERROR SUMMARY' "$f")" \
    "$(grep -E 'passed|failed' "$f" | tail -n 1)"
done
