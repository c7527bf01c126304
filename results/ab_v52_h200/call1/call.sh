#!/usr/bin/env bash
# v51 (whole-sector stores for the directly written output; row ids kept in registers past the mask loads) against
# v47: quick parity of the wgmma kernel and both mma.sync configurations (stop on failure), phase marks of v47,
# v51e (the stores alone) and v51, two interleaved A/B rounds over the full grid.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
rc=0
for cfg in 0 1 2; do
  CUTOVER_KERNEL_TILES=$cfg CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v51.so timeout 150 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v51_cfg$cfg.json > $OUT/r/parity_quick_v51_cfg$cfg.log 2>&1; r=$?; echo "quick parity v51 config $cfg rc=$r ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v51_cfg$cfg.log; [ $r = 0 ] || rc=$r
done
pack
[ $rc = 0 ] || { echo "parity failed: stopping"; exit 0; }
S="16,32,64,1024 8,64,64,1024 16,64,64,1024 16,32,16,1024 16,8,64,1024 16,8,16,4096 8,8,64,1024 8,8,4,16384 8,8,16,4096 8,8,1,1024"
for v in 47 51e 51; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 120 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
pack
OUT=/tmp/res GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for v in v47 v51; do for r in 1 2; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done; done
for r in 1 2; do python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v47_bench_$r.json $OUT/r/ab_v51_bench_$r.json > $OUT/r/ab_compare_v47_vs_v51_$r.txt; head -11 $OUT/r/ab_compare_v47_vs_v51_$r.txt; done
pack; echo "($SECONDS s)"
for v in 47 51e 51; do echo "== v$v"; sed -n 2,14p $OUT/r/phase_times_v$v.txt | cut -c1-200; done
