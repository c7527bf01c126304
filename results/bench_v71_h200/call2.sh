#!/usr/bin/env bash
# The full grid of the shipped kernel (v71) against SGLang's kernels, with room for its ~320 s (call1.sh's limit
# stopped it at 193 of 256 shapes).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
python3 -m kernel_ext.build > $OUT/r/build.log 2>&1 || { echo "build failed"; tail $OUT/r/build.log; exit 1; }
echo "built ($SECONDS s)"
timeout 540 python3 -m kernel_ext.bench --grid full --label v71 --out $OUT/r/full > $OUT/r/full.log 2>&1
echo "full rc=$? ($SECONDS s)"
(cd $OUT && tar czf 0_all.tgz r)
python3 -c "
import json, os
d = json.load(open(os.environ['OUT'] + '/r/full/bench.json'))
print(len(d['rows']), 'shapes', f\"copy {d['copy_gbs']:.0f} GB/s matmul {d['matmul_tflops']:.0f} TFLOP/s {d['seconds']:.0f} s\", d['summary'])"
