#!/usr/bin/env bash
# Call 2: where v62's configuration-2 tile spends its time against v61's (ncu --set full, one block per SM,
# 8/8/4/16384), then v62's checks with the release library (dual-arch): every gpu-marked test, the full parity grid
# in configuration 2, memcheck and racecheck in configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v62_ncu
for v in v61_1sm v62_1sm; do
  CUTOVER_KERNEL_TILES=2 CUTOVER_KERNEL_LIB=$V/$v.so KERNEL=regex:verify_main_kernel SHAPES="8 8 4 16384" NCU_S=90 \
    OUT=$OUT/r/ncu_$v bash kernel_ext/device/ncu_full.sh > $OUT/r/ncu_$v.summary 2>&1
  echo "ncu $v ($SECONDS s)"; grep -E "Duration|Issue Slots Busy|Issued Warp|Warp Cycles Per Issued" $OUT/r/ncu_$v.summary | head -6
  rm -f $OUT/r/ncu_$v/*.ncu-rep
done
pack
timeout 150 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v62.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v62.log
CUTOVER_KERNEL_TILES=2 timeout 100 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v62_cfg2.json > $OUT/r/parity_full_v62_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v62_cfg2.log
CUTOVER_KERNEL_TILES=2 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/memcheck_v62_cfg2.txt 2>&1
echo "memcheck config 2 rc=$? ($SECONDS s)"; grep -E "ERROR SUMMARY" $OUT/r/memcheck_v62_cfg2.txt
pack
left=$((585 - SECONDS)); [ $left -gt 60 ] || { echo "no time left for racecheck"; exit 0; }
CUTOVER_KERNEL_TILES=2 timeout $left compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/racecheck_v62_cfg2.txt 2>&1
echo "racecheck config 2 rc=$? ($SECONDS s)"; grep -E "RACECHECK SUMMARY" $OUT/r/racecheck_v62_cfg2.txt; tail -1 $OUT/r/racecheck_v62_cfg2.txt
pack
