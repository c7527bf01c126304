#!/usr/bin/env bash
# Call 1: can compute-sanitizer check the roles' barriers when they are out of line (CUTOVER_SANITIZER_BARRIERS)?
# The toy (../ab_v63_h200/named_barrier_racecheck.cu, built here with nvcc -arch=sm_90a -lineinfo into
# kernel_ext/build/toy/) in modes 0 (inline) and 3 (out of line) plain and under racecheck and synccheck; then, side
# by side on the GPU, the tiny parity subset under: synccheck of the default path (wgmma) before and after its
# part barrier became sync_block (v65_head.so = HEAD, sm_90a; the release library = this tree, both archs),
# racecheck of the release library's default path, and racecheck / synccheck of the sanitizer build
# (v66_sanitizer.so: this tree with --define CUTOVER_SANITIZER_BARRIERS, sm_90a) on the default path and in
# configuration 2.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
T=kernel_ext/build/toy/named_barrier_racecheck; V=$PWD/kernel_ext/build/variants_san; R=$PWD/kernel_ext/build/libcutover_verify.so
for m in 0 3; do
  $T $m
  for tool in racecheck synccheck; do
    timeout 40 compute-sanitizer --tool $tool $T $m > $OUT/r/toy_${tool}_mode$m.txt 2>&1
    echo "$tool mode $m: $(grep -E 'sums wrong' $OUT/r/toy_${tool}_mode$m.txt) | $(grep -E 'SUMMARY' $OUT/r/toy_${tool}_mode$m.txt)"
  done
done
check() {  # name tool library tiles
  CUTOVER_KERNEL_LIB=$3 CUTOVER_KERNEL_TILES=$4 timeout 500 compute-sanitizer --tool $2 --error-exitcode 9 \
    python3 -m kernel_ext.gpu_parity --subset tiny --no-triton > $OUT/r/$1.txt 2>&1
  echo "rc=$?" >> $OUT/r/$1.txt
}
check synccheck_default_head synccheck $V/v65_head.so 0 &
check synccheck_default_release synccheck $R 0 &
check racecheck_default_release racecheck $R 0 &
check racecheck_default_sanitizer racecheck $V/v66_sanitizer.so 0 &
check racecheck_cfg2_sanitizer racecheck $V/v66_sanitizer.so 2 &
check synccheck_cfg2_sanitizer synccheck $V/v66_sanitizer.so 2 &
wait
echo "sanitizer runs done ($SECONDS s)"
for f in synccheck_default_head synccheck_default_release racecheck_default_release racecheck_default_sanitizer racecheck_cfg2_sanitizer synccheck_cfg2_sanitizer; do
  printf '%-30s %s | %s | %s\n' $f "$(tail -1 $OUT/r/$f.txt)" "$(grep -E 'SUMMARY' $OUT/r/$f.txt)" "$(grep -E '^parity tiny' $OUT/r/$f.txt | cut -c1-60)"
done
