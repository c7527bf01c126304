#!/usr/bin/env bash
# Call 4: v69c, v69's order out of line (`__noinline__ plan_longest_first`, called only where a call has more work
# items than a wave; kernel argument `__grid_constant__`), whose main loop SASS is v67's (wgmma kernels: same
# instructions and registers from the first HGMMA to the last). Two interleaved A/B rounds against v67 over the
# full and mixed grids; then, in the time left, parity of the cases that take the longest-first path (the parity
# grid's two B > G_target extras and a log-uniform batch of 64 at 16/16) on the default path and in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v69c.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v69c
VARIANTS=$V OUT=/tmp/res GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2 mixed_1 mixed_2; do
  for v in v67 v69c; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  [ -f $OUT/r/ab_v69c_$run.json ] || continue
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v67_$run.json $OUT/r/ab_v69c_$run.json > $OUT/r/cmp_v67_vs_v69c_$run.txt
  echo "== $run: v69c / v67"; sed -n 1,3p $OUT/r/cmp_v67_vs_v69c_$run.txt
done
pack
echo "A/B done ($SECONDS s)"
for tiles in 0 2; do
  CUTOVER_KERNEL_LIB=$V/v69c.so CUTOVER_KERNEL_TILES=$tiles timeout 40 python3 - > $OUT/r/parity_b_gt_g_v69c_cfg$tiles.txt 2>&1 <<'PY'
import torch
from kernel_ext import bench, gpu_parity
triton_fwd = gpu_parity.load_sglang_triton()
cases = [(16, 16, [6000] + [200] * 39, 1012), (8, 16, [(i * 7919) % 9000 for i in range(80)], 1013),
         (16, 16, [min(p, 20000) for p in bench.MIXES["logu64"]()], 1014)]
for H, T, prefixes, seed in cases:
    row = gpu_parity.run_case(gpu_parity.make_case(H, T, len(prefixes), prefixes, "tree", torch.int32, seed=seed), triton_fwd, {})
    print(H, T, len(prefixes), "passed" if row["passed"] else "FAILED", row["err_ours"], row["err_triton"], flush=True)
PY
  echo "parity B > G_target, TILES=$tiles rc=$? ($SECONDS s)"; cat $OUT/r/parity_b_gt_g_v69c_cfg$tiles.txt | tail -3
done
pack
echo "($SECONDS s)"
