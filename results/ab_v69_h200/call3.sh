#!/usr/bin/env bash
# Call 3: v69 held back, the release library stays v67's (HEAD sources, both archs). Every gpu-marked test (the new
# one: 80 requests of spread lengths at 8/16, more work items than a wave) and the full parity grid with its new
# 301st case on the default path and in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
timeout 240 python3 -m pytest -q -m gpu tests/gpu > $OUT/r/gpu_tests_v67.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/gpu_tests_v67.log
timeout 150 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v67_default.json > $OUT/r/parity_full_v67_default.log 2>&1
echo "full parity default rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v67_default.log
CUTOVER_KERNEL_TILES=2 timeout 100 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v67_cfg2.json > $OUT/r/parity_full_v67_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v67_cfg2.log
(cd $OUT && tar czf 0_all.tgz r)
echo "($SECONDS s)"
