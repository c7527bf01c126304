#!/usr/bin/env bash
# The shipped kernel (v71) re-measured whole: the library built from the tree (4d2d3f3), then the full grid and the
# mixed grid, each against SGLang's kernels in the same run (every kernel on the benchmark's rotation).
# The full grid ran past this call's 260-s limit at 193 of 256 shapes (it needs ~320 s); call2.sh re-runs it.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
python3 -m kernel_ext.build > $OUT/r/build.log 2>&1 || { echo "build failed"; tail $OUT/r/build.log; exit 1; }
echo "built ($SECONDS s)"
for grid in full mixed; do
  timeout 260 python3 -m kernel_ext.bench --grid $grid --label v71 --out $OUT/r/$grid > $OUT/r/$grid.log 2>&1
  echo "$grid rc=$? ($SECONDS s)"; pack
done
python3 - <<'PY'
import json, os
for grid in ("full", "mixed"):
    f = os.environ["OUT"] + f"/r/{grid}/bench.json"
    if os.path.exists(f):
        d = json.load(open(f))
        print(grid, f"copy {d['copy_gbs']:.0f} GB/s matmul {d['matmul_tflops']:.0f} TFLOP/s {d['seconds']:.0f} s", d["summary"])
PY
