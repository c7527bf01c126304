#!/usr/bin/env bash
# One device call for the wgmma kernel (config 3): no build on the device (carry kernel_ext/build), SASS sanity,
# config 1 vs 3 on a few shapes, GPU parity (tiny, then $PARITY), ours-only quick benchmark of both configs.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
cuobjdump -sass kernel_ext/build/libcutover_verify.so > "$OUT/library.sass" 2>&1 || true
echo "HGMMA instructions in the library (the wgmma kernels): $(grep -c HGMMA "$OUT/library.sass")"
timeout 60 python3 kernel_ext/device/tiles_diff.py --configs 1 3 2>&1 | tee "$OUT/tiles_diff.log" | tail -20
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { echo "tiles_diff rc=$rc: stopping"; exit 1; }
CUTOVER_KERNEL_TILES=3 timeout "${PARITY_S:-120}" python3 -m kernel_ext.gpu_parity --subset "${PARITY:-quick}" \
  --json "$OUT/parity_wgmma.json" 2>&1 | tail -12
for cfg in ${BENCH_CONFIGS:-3 1}; do
  CUTOVER_KERNEL_TILES=$cfg timeout "${BENCH_S:-90}" python3 -m kernel_ext.bench --grid "${GRID:-quick}" --no-triton \
    --label "cfg$cfg" --out "$OUT/bench_cfg$cfg" 2>&1 | tail -${BENCH_TAIL:-12}
done
if [ -n "${NCU_SHAPE:-}" ]; then  # per-kernel durations (plan, main, combine) of one shape
  timeout 60 ncu --launch-skip 3 --launch-count 3 --metrics gpu__time_duration.sum \
    python3 kernel_ext/device/profile_one.py $NCU_SHAPE 2>&1 | grep -E "verify_|gpu__time" | tee "$OUT/ncu_durations.txt"
fi
