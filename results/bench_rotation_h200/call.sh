#!/bin/bash
# One device call: the benchmark rotation's effect (compare.py), then the tree's benchmark on the batch1 grid.
# Carry .bundle/sglang and kernel_ext/build/libcutover_verify.so. Outputs under $OUT.
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
timeout 330 python results/bench_rotation_h200/compare.py "$OUT" 2>&1 | tee "$OUT/compare.log"
timeout 240 python -m kernel_ext.bench --grid batch1 --label rotation --out "$OUT/batch1" 2>&1 | tail -40 | tee "$OUT/batch1.log"
