#!/usr/bin/env bash
# Call 4: v68 (waves of splits where one wave's largest split is over 1.5 first chunks, instead of 2) against v67
# (as shipped after call 3): quick parity and the GPU parity tests of v68, then two interleaved A/B rounds over the
# full grid and the mixed grid, ours only. Variants (sm_90a) in kernel_ext/build/variants_v68.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v68
CUTOVER_KERNEL_LIB=$V/v68.so timeout 100 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v68_default.json > $OUT/r/parity_quick_v68_default.log 2>&1
echo "quick parity default rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_quick_v68_default.log
CUTOVER_KERNEL_LIB=$V/v68.so CUTOVER_KERNEL_TILES=2 timeout 60 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v68_cfg2.json > $OUT/r/parity_quick_v68_cfg2.log 2>&1
echo "quick parity config 2 rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/parity_quick_v68_cfg2.log
CUTOVER_KERNEL_LIB=$V/v68.so timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py > $OUT/r/gpu_parity_tests_v68.log 2>&1
echo "gpu parity tests rc=$? ($SECONDS s)"; tail -n 1 $OUT/r/gpu_parity_tests_v68.log
pack
VARIANTS=$V OUT=/tmp/res GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2 mixed_1 mixed_2; do
  for v in v67 v68; do [ -f /tmp/ab_${v}_$run/bench.json ] && cp /tmp/ab_${v}_$run/bench.json $OUT/r/ab_${v}_$run.json; done
  [ -f $OUT/r/ab_v68_$run.json ] || continue
  python3 kernel_ext/device/ab_compare.py $OUT/r/ab_v67_$run.json $OUT/r/ab_v68_$run.json > $OUT/r/cmp_v67_vs_v68_$run.txt
  echo "== $run: v68 / v67"; sed -n 1,3p $OUT/r/cmp_v67_vs_v68_$run.txt
done
python3 - $OUT/r <<'PY'
import json, sys
d = sys.argv[1]
rows = lambda p: {(r["H"], r["T"], r["prefix"]): r["ours_us"] for r in json.load(open(p))["rows"]}
a = [rows(f"{d}/ab_v67_mixed_{i}.json") for i in (1, 2)]; b = [rows(f"{d}/ab_v68_mixed_{i}.json") for i in (1, 2)]
for k in a[0]:
    ma, mb = sum(x[k] for x in a) / 2, sum(x[k] for x in b) / 2
    print(f"{k[0]}/{k[1]} {k[2]:24} v67 {ma:8.1f} v68 {mb:8.1f} {mb / ma:6.3f}")
PY
pack
echo "($SECONDS s)"
