#!/usr/bin/env bash
# cutover.plugin.bench_overhead with the KV index rotation (every call's graph cycles through max(512 MB, 4 x L2)
# of KV rows) against the committed form (10 calls on one index set), two rounds in alternating order, same
# library (kernel v58 / v61), six shapes. The old form is carried as .bundle/old/bench_overhead_old.py (git show
# f6845a3:cutover/plugin/bench_overhead.py).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
export CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/libcutover_verify.so
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
S="8,8,1,4096 16,8,1,1024 8,8,4,16384 8,16,8,8192 8,64,32,8192 16,64,32,16384"
run() {  # $1 = old|new, $2 = round
  if [ "$1" = old ]; then cmd="python3 .bundle/old/bench_overhead_old.py"; else cmd="python3 -m cutover.plugin.bench_overhead"; fi
  timeout 200 $cmd --reps 30 --shapes "$S" --out $OUT/r/$1_$2 > $OUT/r/$1_$2.log 2>&1
  echo "$1 round $2 rc=$? ($SECONDS s)"; pack
}
run old 1; run new 1; run new 2; run old 2
python3 - <<'PY'
import json, os, statistics
out = os.environ["OUT"] + "/r"
keys = ("stock_us", "custom_bare_us", "plugin_triton_us", "plugin_shadow_us", "plugin_custom_us")
rows = {}
for v in ("old", "new"):
    for rd in (1, 2):
        f = f"{out}/{v}_{rd}/plugin_overhead.json"
        if not os.path.exists(f):
            continue
        for r in json.load(open(f))["rows"]:
            d = rows.setdefault((r["heads"], r["T"], r["batch"], r["prefix"]), {}).setdefault(v, {})
            d.setdefault("sets", r.get("sets", 1))
            for k in keys:
                d.setdefault(k, []).append(r[k])
print("us per call and layer, median of 2 rounds: stock, bare ours, plugin triton/shadow/custom; old = one index set")
for shape, d in rows.items():
    for v, x in d.items():
        m = {k: statistics.median(x[k]) for k in keys}
        print(f"{str(shape):22s} {v} sets {x['sets']:4d}  stock {m['stock_us']:8.1f} bare {m['custom_bare_us']:7.2f} "
              f"tri {m['plugin_triton_us']:8.1f} sh {m['plugin_shadow_us']:8.1f} cu {m['plugin_custom_us']:7.2f} "
              f"speedup {m['stock_us'] / m['plugin_custom_us']:5.1f}x")
PY
pack; echo "($SECONDS s)"
