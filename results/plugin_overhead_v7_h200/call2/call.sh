#!/usr/bin/env bash
# Conditional graph nodes in the plugin's captured verify call (kernel ABI 4), second device call: call 1's
# benchmark again, now importing each variant's copy of cutover/ (call 1 ran `python -m` from the repository root,
# whose cutover/ came first on sys.path, so all three of its variants were B). Dispatch forms, alternating order:
#   A  gate -> ours (early start) -> stock on a gated qo_indptr -> epilogue   (the shipped form, ABI 3's)
#   B  gate -> IF(ours) -> IF(stock) -> epilogue                             (ours without early start)
#   C  gate -> ours (early start) -> IF(stock) -> epilogue
# A and C are copies of cutover/ with dispatch.py patched (A: conditional path off; C: _CONDITIONAL_CUSTOM False).
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
for v in A B C; do mkdir -p /tmp/v$v && cp -r cutover /tmp/v$v/; done
sed -i 's/        if kernels.conditional and _is_capturing(o)/        if False and kernels.conditional and _is_capturing(o)/' /tmp/vA/cutover/plugin/dispatch.py
sed -i 's/^_CONDITIONAL_CUSTOM = True/_CONDITIONAL_CUSTOM = False/' /tmp/vC/cutover/plugin/dispatch.py
grep -c "if False and" /tmp/vA/cutover/plugin/dispatch.py; grep -n "^_CONDITIONAL_CUSTOM" /tmp/v*/cutover/plugin/dispatch.py
export PYTHONPATH="$PWD:$PWD/.bundle/sglang"
ROOT=$PWD
S="8,8,1,4096 16,8,1,1024 8,16,8,8192 8,8,4,16384"
for round in 1 2; do
  order="A B C"; (( round % 2 == 0 )) && order="C B A"
  for v in $order; do
    (cd /tmp/v$v && PYTHONPATH="/tmp/v$v:$ROOT:$ROOT/.bundle/sglang" timeout 150 python3 -c "import cutover.plugin.dispatch as d, sys; print('dispatch from', d.__file__, 'custom in IF:', d._CONDITIONAL_CUSTOM)" && PYTHONPATH="/tmp/v$v:$ROOT:$ROOT/.bundle/sglang" timeout 150 python3 -m cutover.plugin.bench_overhead --reps 30 --shapes "$S" --out $OUT/r/plugin_${v}_$round) > $OUT/r/plugin_${v}_$round.log 2>&1
    head -1 $OUT/r/plugin_${v}_$round.log
    echo "$v round $round rc=$? ($SECONDS s)"; pack
  done
done
python3 - <<'PY'
import json, os, statistics
out = os.environ["OUT"] + "/r"
rows = {}
for v in "ABC":
    for rd in (1, 2):
        f = f"{out}/plugin_{v}_{rd}/plugin_overhead.json"
        if os.path.exists(f):
            for r in json.load(open(f))["rows"]:
                d = rows.setdefault((r["heads"], r["T"], r["batch"], r["prefix"]), {}).setdefault(v, {})
                for k in ("stock_us", "custom_bare_us", "plugin_triton_us", "plugin_shadow_us", "plugin_custom_us"):
                    d.setdefault(k, []).append(r[k])
print("per call and layer, us, median of rounds: stock / bare custom | plugin triton, shadow, custom for A B C")
for shape, d in rows.items():
    line = [str(shape)]
    for v in "ABC":
        if v in d:
            m = {k: statistics.median(x) for k, x in d[v].items()}
            line.append(f"{v}: st {m['stock_us']:.1f} bare {m['custom_bare_us']:.1f} | tri {m['plugin_triton_us']:.2f} sh {m['plugin_shadow_us']:.2f} cu {m['plugin_custom_us']:.2f}")
    print("  ".join(line))
PY
pack; echo "($SECONDS s)"
