#!/usr/bin/env bash
# ncu --set full on the main kernel for $SHAPES (carry kernel_ext/build); the key lines of each report. The GPU keeps
# its own clocks (--clock-control none): the profile sees the clocks the benchmarks run at.
#   SHAPES="16 64 4 16384,8 8 16 65536" bash kernel_ext/device/ncu_full.sh   (shapes "H T batch prefix", comma-separated)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
IFS=, read -ra shapes <<< "${SHAPES:-16 64 4 16384,8 8 16 65536}"
for shape in "${shapes[@]}"; do
  tag=$(echo "$shape" | tr ' ' '_')
  timeout "${NCU_S:-150}" ncu --kernel-name "${KERNEL:-regex:verify_wgmma}" --launch-skip 1 --launch-count 1 --set full --clock-control none \
    --import-source yes -o "$OUT/ncu_$tag" python3 kernel_ext/device/profile_one.py $shape > "$OUT/ncu_$tag.log" 2>&1
  ncu -i "$OUT/ncu_$tag.ncu-rep" --print-details all > "$OUT/ncu_$tag.txt" 2>&1
  ncu -i "$OUT/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${tag}_sass.csv" 2>&1
  echo "== $shape"
  grep -E "Duration|SM Frequency|Tensor|Shared|Issue Slots Busy|Issued Warp|Warp Cycles Per Issued|L2 Hit|DRAM Throughput|Stall" "$OUT/ncu_$tag.txt" | head -40
done
