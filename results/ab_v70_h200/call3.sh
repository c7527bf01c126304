#!/usr/bin/env bash
# Call 3: the release library (v70 sources, both archs, built here and carried in kernel_ext/build; its sm_90a SASS
# is call 1's and call 2's v70 function by function): every gpu-marked test, then the full parity grid on the default path and
# in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
timeout 300 python3 -m pytest -q -m gpu tests/gpu > $OUT/r/gpu_tests_v70.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/gpu_tests_v70.log
pack
timeout 150 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v70_default.json > $OUT/r/parity_full_v70_default.log 2>&1
echo "full parity default rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v70_default.log
CUTOVER_KERNEL_TILES=2 timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v70_cfg2.json > $OUT/r/parity_full_v70_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_full_v70_cfg2.log
gzip -f $OUT/r/*.json 2>/dev/null
pack
echo "($SECONDS s)"
