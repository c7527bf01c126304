#!/usr/bin/env bash
# Call 6: named_barrier_racecheck.cu (built here: nvcc -arch=sm_90a -lineinfo -o kernel_ext/build/toy/named_barrier_racecheck
# results/ab_v63_h200/named_barrier_racecheck.cu) plain and under racecheck, synccheck and memcheck, in its three modes.
T=kernel_ext/build/toy/named_barrier_racecheck; mkdir -p $OUT/r
for m in 0 1 2; do
  $T $m
  for tool in racecheck synccheck memcheck; do
    timeout 40 compute-sanitizer --tool $tool $T $m > $OUT/r/toy_${tool}_mode$m.txt 2>&1
    echo "$tool mode $m: $(grep -E 'sums wrong' $OUT/r/toy_${tool}_mode$m.txt) | $(grep -E 'SUMMARY' $OUT/r/toy_${tool}_mode$m.txt)"
  done
done
