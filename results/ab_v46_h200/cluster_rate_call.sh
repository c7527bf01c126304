#!/usr/bin/env bash
# Groundwork for a cluster merge of partials: cluster residency and the epilogue's cost (cluster_rate.cu); ncu of
# v46's main kernel at 8/8/4/16384 (a median memory-bound shape).
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/cluster_rate.cu -o /tmp/cluster_rate && for i in 1 2; do /tmp/cluster_rate $OUT/r/cluster_rate_h200_$i.json | tee $OUT/r/cluster_rate_h200_$i.txt; done; echo "cluster rate ($SECONDS s)"
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v46.so OUT=/tmp/ncu SHAPES="8 8 4 16384" NCU_S=200 bash kernel_ext/device/ncu_full.sh; echo "ncu ($SECONDS s)"
cp /tmp/ncu/ncu_8_8_4_16384.txt /tmp/ncu/ncu_8_8_4_16384.log $OUT/r/ 2>/dev/null
cd $OUT && tar czf 0_all.tgz r && echo tarred
