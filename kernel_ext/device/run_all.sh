#!/usr/bin/env bash
# One device call: build on the GPU machine, parity, sanitizer, benchmark. Results under $OUT.
#   PARITY=tiny|quick|full GRID=quick|full LABEL=v1 SANITIZE=1 bash kernel_ext/device/run_all.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -1 | tee -a "$OUT/gpu.txt"
python3 -m kernel_ext.build || exit 1
if [ -n "${PARITY:-}" ]; then
  python3 -m kernel_ext.gpu_parity --subset "$PARITY" --json "$OUT/parity.json" 2>&1 | tail -40
fi
if [ -n "${PARITY2:-}" ]; then
  CUTOVER_KERNEL_TILES=2 python3 -m kernel_ext.gpu_parity --subset "$PARITY2" --json "$OUT/parity_small.json" 2>&1 | tail -15
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton \
    > "$OUT/memcheck.txt" 2>&1; echo "memcheck rc=$?"; tail -5 "$OUT/memcheck.txt"
fi
if [ -n "${GRID:-}" ]; then
  python3 -m kernel_ext.bench --grid "$GRID" --label "${LABEL:-dev}" --out "$OUT" 2>&1 | tail -${BENCH_TAIL:-80}
fi
