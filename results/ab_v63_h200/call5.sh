#!/usr/bin/env bash
# Call 5: v65 with the roles' block barriers as barrier.sync (not bar.sync, which is .aligned: call 4's synccheck
# found the roles reaching it from different instructions). Release library (dual-arch): synccheck, racecheck and
# memcheck in configuration 2, the full parity grid in configuration 2, every gpu-marked test, then one A/B round
# of v65_1sm against call 3's v65q28_1sm (bar.sync) over the combine grid if time is left.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
for tool in synccheck racecheck memcheck; do
  CUTOVER_KERNEL_TILES=2 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/${tool}_v65_cfg2.txt 2>&1
  echo "$tool config 2 rc=$? ($SECONDS s)"; grep -E "SUMMARY" $OUT/r/${tool}_v65_cfg2.txt; tail -1 $OUT/r/${tool}_v65_cfg2.txt
  pack
done
CUTOVER_KERNEL_TILES=2 timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v65_cfg2.json > $OUT/r/parity_full_v65_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v65_cfg2.log
pack
timeout 110 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v65.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v65.log
pack
left=$((560 - SECONDS)); [ $left -gt 100 ] || { echo "no time left for the A/B"; exit 0; }
CUTOVER_KERNEL_TILES=2 VARIANTS=$PWD/kernel_ext/build/variants_v65fix OUT=$OUT/r/logs GRIDS=combine ROUNDS=1 bash kernel_ext/device/ab_call.sh
for v in v65q28_1sm v65_1sm; do cp /tmp/ab_${v}_combine_1/bench.json $OUT/r/ab_${v}_cfg2_1.json; done
python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v65q28_1sm_cfg2_1.json $OUT/r/ab_v65_1sm_cfg2_1.json > $OUT/r/cmp_v65q28_1sm_vs_v65_1sm_cfg2_1.txt
echo "config 2: v65q28_1sm -> v65_1sm ($SECONDS s)"; head -3 $OUT/r/cmp_v65q28_1sm_vs_v65_1sm_cfg2_1.txt
pack
