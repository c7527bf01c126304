#!/usr/bin/env bash
# The stream floor (kernel_ext/device/stream_floor.cu); an A/A of v47 with the queued timing (two copies, two
# rounds, order reversed in the second); the plugin overhead benchmark with the queued timing (library v47).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/floor $OUT/r
timeout 120 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/stream_floor.cu -o /tmp/stream_floor && timeout 90 /tmp/stream_floor $OUT/floor/stream_floor_h200.json | tee $OUT/floor/stream_floor_h200.txt; echo "floor rc=$? ($SECONDS s)"
timeout 90 python3 -m cutover.plugin.bench_overhead --out $OUT/plugin_overhead > $OUT/plugin_overhead.log 2>&1; echo "plugin rc=$? ($SECONDS s)"; tail -8 $OUT/plugin_overhead.log
OUT=$OUT/r GRIDS=full ROUNDS=2 bash kernel_ext/device/ab_call.sh
for r in 1 2; do for v in a47 b47; do cp /tmp/ab_${v}_full_$r/bench.json $OUT/r/ab_${v}_bench_$r.json; done
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_a47_bench_$r.json $OUT/r/ab_b47_bench_$r.json > $OUT/r/ab_compare_a47_vs_b47_$r.txt
  echo "== round $r"; sed -n 1,5p $OUT/r/ab_compare_a47_vs_b47_$r.txt; sed -n 8p $OUT/r/ab_compare_a47_vs_b47_$r.txt; done
cd $OUT && tar czf 0_all.tgz floor r plugin_overhead plugin_overhead.log && echo "tarred ($SECONDS s)"
