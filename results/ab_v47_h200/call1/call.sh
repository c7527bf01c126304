#!/usr/bin/env bash
# Groundwork for a cluster merge of partials: cluster residency and the epilogue's cost
# (kernel_ext/device/cluster_rate.cu); ncu of v46's main kernel at 8/8/4/16384 (a median memory-bound shape,
# kernel_ext/build/libcutover_verify.so built from v46). Call 4 of v46 ran an earlier form without the inner
# timeouts and hung (results/ab_v46_h200/README.md).
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/cluster_rate.cu -o /tmp/cluster_rate && for i in 1 2; do timeout 60 /tmp/cluster_rate $OUT/r/cluster_rate_h200_$i.json > $OUT/r/cluster_rate_h200_$i.txt 2>&1; echo "cluster rate $i rc=$? ($SECONDS s)"; cat $OUT/r/cluster_rate_h200_$i.txt; done
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/libcutover_verify.so OUT=/tmp/ncu SHAPES="8 8 4 16384" NCU_S=200 timeout 240 bash kernel_ext/device/ncu_full.sh; echo "ncu ($SECONDS s)"
cp /tmp/ncu/ncu_8_8_4_16384.txt /tmp/ncu/ncu_8_8_4_16384.log $OUT/r/ 2>/dev/null
cd $OUT && tar czf 0_all.tgz r && echo tarred
