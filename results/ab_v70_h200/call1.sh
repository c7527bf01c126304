#!/usr/bin/env bash
# Call 1: v70 (LONGEST_FIRST instances launched where 2 B > G_target; the order out of line) against v67, two
# interleaved rounds over the full and mixed grids; then parity of the calls that take the longest-first instance
# and order (logu64 at 8/16 and 16/16, logu64x2 at 16/16, the parity grid's B > G_target extras) and of near64
# (same instance, request order), on the default path and in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v70.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v70
VARIANTS=$V OUT=/tmp/res GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2 mixed_1 mixed_2; do
  for v in v67 v70; do [ -f /tmp/ab_${v}_$run/bench.json ] && gzip -c /tmp/ab_${v}_$run/bench.json > $OUT/r/ab_${v}_$run.json.gz; done
  [ -f /tmp/ab_v70_$run/bench.json ] || continue
  python3 kernel_ext/device/ab_compare.py /tmp/ab_v67_$run/bench.json /tmp/ab_v70_$run/bench.json > $OUT/r/cmp_v67_vs_v70_$run.txt
  echo "== $run: v70 / v67"; sed -n 1,3p $OUT/r/cmp_v67_vs_v70_$run.txt
done
pack
echo "A/B done ($SECONDS s)"
for tiles in 0 2; do
  CUTOVER_KERNEL_LIB=$V/v70.so CUTOVER_KERNEL_TILES=$tiles timeout 60 python3 - > $OUT/r/parity_lf_v70_cfg$tiles.txt 2>&1 <<'PY'
import torch
from kernel_ext import bench, gpu_parity
triton_fwd = gpu_parity.load_sglang_triton()
cap = lambda name: [min(p, 20000) for p in bench.MIXES[name]()]
cases = [(16, 16, [6000] + [200] * 39, 1012), (8, 16, [(i * 7919) % 9000 for i in range(80)], 1013),
         (16, 16, cap("logu64"), 1014), (8, 16, cap("logu64"), 1015), (16, 16, cap("logu64x2"), 1016),
         (16, 16, cap("near64"), 1017), (16, 8, cap("4x65536+60x256"), 1018)]
for H, T, prefixes, seed in cases:
    row = gpu_parity.run_case(gpu_parity.make_case(H, T, len(prefixes), prefixes, "tree", torch.int32, seed=seed), triton_fwd, {})
    print(H, T, len(prefixes), "passed" if row["passed"] else "FAILED", row["err_ours"], row["err_triton"], flush=True)
PY
  echo "parity LF, TILES=$tiles rc=$? ($SECONDS s)"; tail -7 $OUT/r/parity_lf_v70_cfg$tiles.txt
done
pack
echo "($SECONDS s)"
