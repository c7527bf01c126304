#!/usr/bin/env bash
# v58 against v56 in the plugin's own sequence (gate -> ours with early start -> stock -> fused epilogue, 10 calls
# of one layer per graph): cutover.plugin.bench_overhead on the batch-1 128-row shapes v58 changes and one 64-row
# control, three rounds in alternating order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
S="16,8,1,1024 16,8,1,4096 16,8,1,16384 16,8,1,65536 8,16,1,4096 8,16,1,65536 8,8,4,16384"
for round in 1 2 3; do
  order="v56 v58"; (( round % 2 == 0 )) && order="v58 v56"
  for v in $order; do
    CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/plugin_ab/$v.so timeout 170 python3 -m cutover.plugin.bench_overhead --reps 30 --shapes "$S" --out $OUT/r/plugin_${v}_$round > $OUT/r/plugin_${v}_$round.log 2>&1
    echo "$v round $round rc=$? ($SECONDS s)"; pack
  done
done
python3 - <<'PY'
import json, os, statistics
out = os.environ["OUT"] + "/r"
runs = {}
for v in ("v56", "v58"):
    for rd in (1, 2, 3):
        f = f"{out}/plugin_{v}_{rd}/plugin_overhead.json"
        if os.path.exists(f):
            for r in json.load(open(f))["rows"]:
                runs.setdefault((r["heads"], r["T"], r["batch"], r["prefix"]), {}).setdefault(v, []).append(r["plugin_custom_us"])
print("plugin custom us per call and layer (median of rounds; rounds)")
for k, d in runs.items():
    a, b = d.get("v56", []), d.get("v58", [])
    if a and b:
        print(k, f"v56 {statistics.median(a):.2f} v58 {statistics.median(b):.2f} ({statistics.median(b) - statistics.median(a):+.2f})",
              " ".join(f"{x:.2f}" for x in a), "|", " ".join(f"{x:.2f}" for x in b))
PY
echo "($SECONDS s)"
