#!/usr/bin/env bash
# One device call: build, checks, benchmark. Results under $OUT. Every step is optional:
#   BUILD=0            use the carried kernel_ext/build instead of building on the device
#   TILES_DIFF=1       config 1 vs config 3 on a few shapes (a layout bug shows here first); stops on failure
#   PARITY=tiny|quick|full   GPU parity (auto config; PARITY_CONFIG=N forces one); PARITY2=...: small tiles (config 2)
#   SANITIZE=1         compute-sanitizer memcheck on the tiny subset
#   GRID=quick|full|combine  benchmark: with Triton (LABEL=...), or ours only per config with BENCH_CONFIGS="3 1"
#   NCU_SHAPE="H T B P"      ncu durations of the main and combine kernels of one call
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -1 | tee -a "$OUT/gpu.txt"
if [ "${BUILD:-1}" = 1 ]; then python3 -m kernel_ext.build || exit 1; fi
if [ "${TILES_DIFF:-0}" = 1 ]; then
  timeout 60 python3 kernel_ext/device/tiles_diff.py --configs 1 3 2>&1 | tee "$OUT/tiles_diff.log" | tail -20
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "tiles_diff failed: stopping"; exit 1; }
fi
if [ -n "${PARITY:-}" ]; then
  CUTOVER_KERNEL_TILES="${PARITY_CONFIG:-0}" timeout "${PARITY_S:-170}" python3 -m kernel_ext.gpu_parity \
    --subset "$PARITY" --json "$OUT/parity.json" 2>&1 | tail -40
fi
if [ -n "${PARITY2:-}" ]; then
  CUTOVER_KERNEL_TILES=2 python3 -m kernel_ext.gpu_parity --subset "$PARITY2" --json "$OUT/parity_small.json" 2>&1 | tail -15
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton \
    > "$OUT/memcheck.txt" 2>&1; echo "memcheck rc=$?"; tail -5 "$OUT/memcheck.txt"
fi
if [ -n "${GRID:-}" ] && [ -z "${BENCH_CONFIGS:-}" ]; then
  python3 -m kernel_ext.bench --grid "$GRID" --label "${LABEL:-dev}" --out "$OUT" 2>&1 | tail -${BENCH_TAIL:-80}
fi
for cfg in ${BENCH_CONFIGS:-}; do
  CUTOVER_KERNEL_TILES=$cfg timeout "${BENCH_S:-240}" python3 -m kernel_ext.bench --grid "${GRID:-quick}" --no-triton \
    --label "cfg$cfg" --out "$OUT/bench_cfg$cfg" 2>&1 | tail -${BENCH_TAIL:-12}
done
if [ -n "${NCU_SHAPE:-}" ]; then  # the second call's two kernels (the first sets kernel attributes)
  timeout 60 ncu --launch-skip 2 --launch-count 2 --metrics gpu__time_duration.sum \
    python3 kernel_ext/device/profile_one.py $NCU_SHAPE 2>&1 | grep -E "verify_|gpu__time" | tee "$OUT/ncu_durations.txt"
fi
