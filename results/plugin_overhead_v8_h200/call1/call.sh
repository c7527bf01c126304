#!/usr/bin/env bash
# The gate and the fused epilogue launched as programmatic dependents of the kernel before them, each waiting for
# that kernel at entry (so nothing they touch changes; only their launch may overlap its tail). Four sm_90a builds
# of the tree: base (v58 as shipped), E (epilogue), G (gate: wait, then release our main kernel), EG (both).
# The GPU tests of the gate, the epilogue and the captured dispatch on EG, then cutover.plugin.bench_overhead on
# four shapes, two rounds in alternating order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
L=$PWD/kernel_ext/build/pdl_ab
CUTOVER_KERNEL_LIB=$L/EG.so timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_plugin_graph.py tests/gpu/test_shadow_epilogue.py tests/gpu/test_kernel_parity.py -k "graph or gate or early or switching or epilogue or shadow" > $OUT/r/gpu_tests_EG.log 2>&1
echo "gpu tests (EG) rc=$? ($SECONDS s)"; tail -2 $OUT/r/gpu_tests_EG.log; pack
S="8,8,1,4096 16,8,1,1024 8,16,8,8192 8,8,4,16384"
for round in 1 2; do
  order="base E G EG"; (( round % 2 == 0 )) && order="EG G E base"
  for v in $order; do
    CUTOVER_KERNEL_LIB=$L/$v.so timeout 150 python3 -m cutover.plugin.bench_overhead --reps 30 --shapes "$S" --out $OUT/r/plugin_${v}_$round > $OUT/r/plugin_${v}_$round.log 2>&1
    echo "$v round $round rc=$? ($SECONDS s)"; pack
  done
done
python3 - <<'PY'
import json, os, statistics
out = os.environ["OUT"] + "/r"
rows = {}
for v in ("base", "E", "G", "EG"):
    for rd in (1, 2):
        f = f"{out}/plugin_{v}_{rd}/plugin_overhead.json"
        if os.path.exists(f):
            for r in json.load(open(f))["rows"]:
                d = rows.setdefault((r["heads"], r["T"], r["batch"], r["prefix"]), {}).setdefault(v, {})
                for k in ("stock_us", "custom_bare_us", "plugin_triton_us", "plugin_shadow_us", "plugin_custom_us"):
                    d.setdefault(k, []).append(r[k])
print("per call and layer, us, median of rounds: plugin triton / shadow / custom (stock, bare)")
for shape, d in rows.items():
    print(shape)
    for v, x in d.items():
        m = {k: statistics.median(y) for k, y in x.items()}
        print(f"  {v:5s} tri {m['plugin_triton_us']:8.2f} sh {m['plugin_shadow_us']:8.2f} cu {m['plugin_custom_us']:7.2f}  (stock {m['stock_us']:.1f} bare {m['custom_bare_us']:.2f})  custom rounds {' '.join(f'{y:.2f}' for y in x['plugin_custom_us'])}")
PY
pack; echo "($SECONDS s)"
