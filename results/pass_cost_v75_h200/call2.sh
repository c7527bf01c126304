#!/usr/bin/env bash
# Call 2: timelines of v75, v75np, v77h and v77q (the pass in num_sms and num_sms / 2 blocks), one round each way
# on call 1's shapes; then one A/B round over the full and mixed grids.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v77.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v77
SHAPES="8,8,16,1024 8,8,16,4096 8,16,16,1024 16,8,16,1024 8,8,64,1024 16,16,4,1024 8,8,1,1024"
for lib in v75 v75np v77h v77q v77q v77h v75np v75; do
  n=$(ls $OUT/r/timeline_${lib}_*.json 2>/dev/null | wc -l); round=$((n + 1))
  CUTOVER_KERNEL_LIB=$V/$lib.so timeout 120 python3 kernel_ext/device/timeline.py --shapes "$SHAPES" \
    --json $OUT/r/timeline_${lib}_$round.json > $OUT/r/timeline_${lib}_$round.txt 2>&1
  echo "timeline $lib round $round rc=$? ($SECONDS s)"
done
pack
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=1 bash kernel_ext/device/ab_call.sh | grep -v "rc=0"
pack
python3 - $OUT/r <<'PY'
import json, sys
rows = {}
for lib in ("v75np", "v75", "v77h", "v77q"):
    for rd in (1, 2):
        for r in json.load(open(f"{sys.argv[1]}/timeline_{lib}_{rd}.json"))["rows"]:
            rows.setdefault((r["shape"], lib), []).append(r)
print(f"{'shape':14} " + " ".join(f"{lib + ' call/tail':>18}" for lib in ("v75np", "v75", "v77h", "v77q")))
for shape in dict.fromkeys(s for s, _ in rows):
    cells = []
    for lib in ("v75np", "v75", "v77h", "v77q"):
        rs = rows[(shape, lib)]
        cells.append(f"{sum(r['untraced_call_us'] for r in rs) / 2:8.2f}/{sum(r['combine_end_after_main_end_us'] for r in rs) / 2:5.2f}")
    print(f"{shape:14} " + " ".join(f"{c:>18}" for c in cells))
PY
echo "done ($SECONDS s)"
