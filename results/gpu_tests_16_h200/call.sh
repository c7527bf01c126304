#!/bin/bash
# Every GPU test on the tree after the sixteenth session's control-plane fixes (acceptance record with the
# library's sha256, audit logging, gates), same library. Carry .bundle/sglang and kernel_ext/build/libcutover_verify.so.
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 500 python -m pytest -q -ra -o cache_dir=/tmp/pytest-cache -m gpu tests/gpu 2>&1 | tail -25 | tee "$OUT/gpu_tests.log"
