#!/usr/bin/env bash
# Call 4: v65's checks with the release library (dual-arch, Q_REG_STEPS 28): racecheck, synccheck and memcheck in
# configuration 2 (the named barriers of the roles are new), the full parity grid in configuration 2, quick parity
# in configuration 1, every gpu-marked test.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
for tool in racecheck synccheck memcheck; do
  CUTOVER_KERNEL_TILES=2 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/${tool}_v65_cfg2.txt 2>&1
  echo "$tool config 2 rc=$? ($SECONDS s)"; grep -E "SUMMARY" $OUT/r/${tool}_v65_cfg2.txt; tail -1 $OUT/r/${tool}_v65_cfg2.txt
done
pack
CUTOVER_KERNEL_TILES=2 timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v65_cfg2.json > $OUT/r/parity_full_v65_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v65_cfg2.log
timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v65_cfg1.json > $OUT/r/parity_quick_v65_cfg1.log 2>&1
echo "quick parity default config rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v65_cfg1.log
pack
left=$((585 - SECONDS)); [ $left -gt 30 ] || { echo "no time left for the gpu tests"; exit 0; }
timeout $left python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v65.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v65.log
pack
