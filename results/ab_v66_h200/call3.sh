#!/usr/bin/env bash
# Call 3: the release library (v66a, both archs): full parity on the default path (wgmma) and in configuration 2,
# every gpu-marked test; then side by side: memcheck of the release's default path, and racecheck and synccheck of
# v66b (variants_v66/v66b.so: the same hand-offs as v66a in one loop over the parts, whose barriers every thread
# reaches from one instruction, the form the tools run right: toy modes 2 and 4).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v66; R=$PWD/kernel_ext/build/libcutover_verify.so
timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v66_default.json > $OUT/r/parity_full_v66_default.log 2>&1
echo "full parity default rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v66_default.log
CUTOVER_KERNEL_TILES=2 timeout 120 python3 -m kernel_ext.gpu_parity --subset full --json $OUT/r/parity_full_v66_cfg2.json > $OUT/r/parity_full_v66_cfg2.log 2>&1
echo "full parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_full_v66_cfg2.log
pack
timeout 120 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/r/gpu_tests_v66.log 2>&1; echo "gpu tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_tests_v66.log
pack
left=$((580 - SECONDS))
check() {  # name tool library
  CUTOVER_KERNEL_LIB=$3 timeout $left compute-sanitizer --tool $2 --error-exitcode 9 \
    python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/$1.txt 2>&1
  echo "rc=$?" >> $OUT/r/$1.txt
}
check memcheck_default_v66a memcheck $R &
check racecheck_default_v66b racecheck $V/v66b.so &
check synccheck_default_v66b synccheck $V/v66b.so &
wait
pack
for f in memcheck_default_v66a racecheck_default_v66b synccheck_default_v66b; do
  printf '%-26s %s | %s | %s\n' $f "$(tail -1 $OUT/r/$f.txt)" "$(grep -E 'SUMMARY' $OUT/r/$f.txt)" "$(grep -E '^parity tiny' $OUT/r/$f.txt | cut -c1-60)"
done
echo "($SECONDS s)"
