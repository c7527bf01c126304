#!/usr/bin/env bash
# A/B of prebuilt library variants (kernel_ext/build/variants/*.so), interleaved, no Triton: per-shape lines in logs.
# Even rounds run the variants in reverse order, so that no variant always runs first.
#   GRIDS="quick combine" ROUNDS=2 bash kernel_ext/device/ab_call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
for round in $(seq "${ROUNDS:-1}"); do
  for grid in ${GRIDS:-quick}; do
    libs=(kernel_ext/build/variants/*.so)
    (( round % 2 == 0 )) && libs=($(printf '%s\n' "${libs[@]}" | sort -r))
    for lib in "${libs[@]}"; do
      name=$(basename "$lib" .so)
      CUTOVER_KERNEL_LIB="$PWD/$lib" timeout 60 python3 -m kernel_ext.bench --grid "$grid" --no-triton \
        --label "$name" --out "/tmp/ab_${name}_${grid}_$round" > "$OUT/${name}_${grid}_$round.log" 2>&1
      echo "$name $grid round $round rc=$?"
    done
  done
done
