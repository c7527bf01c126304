#!/usr/bin/env bash
# Call 1: v67 (the plan's waves of splits) checked and timed on batches of mixed prefix lengths.
# The release library of the tree (both archs): quick parity on the default path (wgmma) and in configuration 2,
# tests/gpu/test_kernel_parity.py (the new long-among-short parity and plan tests in both configurations), and the
# plan test against v66 (HEAD), which must fail. Then the mixed grid (kernel_ext.bench --grid mixed): v67 with
# SGLang's kernels, and v66 / v67 ours only in two interleaved rounds. Variants (sm_90a) in
# kernel_ext/build/variants_v67.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
V=$PWD/kernel_ext/build/variants_v67
timeout 120 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v67_default.json > $OUT/r/parity_quick_v67_default.log 2>&1
echo "quick parity default rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v67_default.log
CUTOVER_KERNEL_TILES=2 timeout 120 python3 -m kernel_ext.gpu_parity --subset quick --json $OUT/r/parity_quick_v67_cfg2.json > $OUT/r/parity_quick_v67_cfg2.log 2>&1
echo "quick parity config 2 rc=$? ($SECONDS s)"; tail -1 $OUT/r/parity_quick_v67_cfg2.log
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py > $OUT/r/gpu_parity_tests_v67.log 2>&1
echo "gpu parity tests rc=$? ($SECONDS s)"; tail -1 $OUT/r/gpu_parity_tests_v67.log
CUTOVER_KERNEL_LIB=$V/v66.so timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py -k plan_splits > $OUT/r/plan_test_on_v66.log 2>&1
echo "plan test on v66 rc=$? (must fail)"; tail -1 $OUT/r/plan_test_on_v66.log
pack
CUTOVER_KERNEL_LIB=$V/v67.so timeout 200 python3 -m kernel_ext.bench --grid mixed --label v67 --out /tmp/mixed_v67_triton > $OUT/r/mixed_v67_triton.log 2>&1
echo "mixed with SGLang rc=$? ($SECONDS s)"; cp /tmp/mixed_v67_triton/bench.json $OUT/r/mixed_v67_triton.json; cp /tmp/mixed_v67_triton/bench.md $OUT/r/mixed_v67_triton.md
pack
for round in 1 2; do
  order="v66 v67"; [ $round = 2 ] && order="v67 v66"
  for v in $order; do
    CUTOVER_KERNEL_LIB=$V/$v.so timeout 120 python3 -m kernel_ext.bench --grid mixed --no-triton --label $v --out /tmp/mixed_${v}_$round > $OUT/r/mixed_${v}_$round.log 2>&1
    echo "mixed $v round $round rc=$? ($SECONDS s)"; cp /tmp/mixed_${v}_$round/bench.json $OUT/r/mixed_${v}_$round.json
  done
  python3 kernel_ext/device/ab_compare.py $OUT/r/mixed_v66_$round.json $OUT/r/mixed_v67_$round.json > $OUT/r/cmp_mixed_v66_vs_v67_$round.txt
done
pack
python3 - $OUT/r <<'PY'
import json, sys
d = sys.argv[1]
runs = {k: {(r["H"], r["T"], r["prefix"]): r for r in json.load(open(f"{d}/mixed_{k}.json"))["rows"]}
        for k in ("v66_1", "v67_1", "v66_2", "v67_2", "v67_triton")}
print(f"{'H/T':6} {'shape':24} {'v66 us':>9} {'v67 us':>9} {'v67/v66':>8} {'v66 xeven':>9} {'v67 xeven':>9} {'sglang us':>10} {'x sglang':>8} {'roof%':>6}")
for key in runs["v67_1"]:
    a = [runs[f"v66_{i}"][key]["ours_us"] for i in (1, 2)]; b = [runs[f"v67_{i}"][key]["ours_us"] for i in (1, 2)]
    t = runs["v67_triton"].get(key, {})
    ma, mb = sum(a) / 2, sum(b) / 2
    ca = runs["v66_1"][key].get("mix_cost"); cb = runs["v67_1"][key].get("mix_cost")
    f = lambda v: "-" if v is None else f"{v:.2f}"
    print(f"{key[0]}/{key[1]:<4} {key[2]:24} {ma:9.1f} {mb:9.1f} {mb / ma:8.3f} {f(ca):>9} {f(cb):>9} {t.get('triton_us') or 0:10.1f} {f(t.get('speedup_vs_triton')):>8} {100 * runs['v67_1'][key]['roofline_fraction']:6.1f}")
PY
echo "($SECONDS s)"
