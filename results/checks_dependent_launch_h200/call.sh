#!/usr/bin/env bash
# The library rebuilt after launch_dependent moved to dependent_launch.cuh (device code identical to v47's): gpu
# tests, quick parity; the committed chain_kernels.py and stream_floor.cu run once as committed.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT
timeout 120 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -3 $OUT/gpu_tests.log
timeout 120 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/parity_quick.json > $OUT/parity_quick.log 2>&1; echo "parity rc=$? ($SECONDS s)"; tail -3 $OUT/parity_quick.log
timeout 60 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/stream_floor.cu -o /tmp/sf && timeout 60 /tmp/sf $OUT/stream_floor_h200_3.json > $OUT/stream_floor_h200_3.txt 2>&1; echo "floor rc=$? ($SECONDS s)"; cat $OUT/stream_floor_h200_3.txt
timeout 100 python3 kernel_ext/device/chain_kernels.py --out $OUT/chain 8/8/1/1024 8/8/4/1024 16/8/1/1024 > $OUT/chain.log 2>&1; echo "chain rc=$? ($SECONDS s)"; grep -v Warn $OUT/chain.log | tail -4
