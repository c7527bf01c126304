#!/usr/bin/env bash
# A/B of prebuilt library variants (VARIANTS/*.so, default kernel_ext/build/variants), interleaved, no Triton:
# per-shape lines in logs.
# Even rounds run the variants in reverse order, so that no variant always runs first.
#   GRIDS="quick combine" ROUNDS=2 bash kernel_ext/device/ab_call.sh
# BENCH_ARGS adds options to every benchmark run (e.g. --no-early-start); TAG then names those runs apart.
# Then, per grid and round, every run's bench.json gzipped into OUT and each variant against BASE (default: the first
# variant by name) in OUT/cmp_<base>_vs_<variant>_<grid>_<round>.txt (kernel_ext/device/ab_compare.py).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
for round in $(seq "${ROUNDS:-1}"); do
  for grid in ${GRIDS:-quick}; do
    libs=(${VARIANTS:-kernel_ext/build/variants}/*.so)
    (( round % 2 == 0 )) && libs=($(printf '%s\n' "${libs[@]}" | sort -r))
    for lib in "${libs[@]}"; do
      name=$(basename "$lib" .so)
      run="${name}_${grid}${TAG:+_$TAG}_$round"
      CUTOVER_KERNEL_LIB="$(realpath "$lib")" timeout 60 python3 -m kernel_ext.bench --grid "$grid" --no-triton \
        ${BENCH_ARGS:-} --label "$name" --out "/tmp/ab_$run" > "$OUT/$run.log" 2>&1
      echo "$run rc=$?"
    done
  done
done
names=($(for lib in ${VARIANTS:-kernel_ext/build/variants}/*.so; do basename "$lib" .so; done))
base="${BASE:-${names[0]}}"
for round in $(seq "${ROUNDS:-1}"); do
  for grid in ${GRIDS:-quick}; do
    run="${grid}${TAG:+_$TAG}_$round"
    for name in "${names[@]}"; do
      [ -f "/tmp/ab_${name}_$run/bench.json" ] && gzip -c "/tmp/ab_${name}_$run/bench.json" > "$OUT/ab_${name}_$run.json.gz"
    done
    for name in "${names[@]}"; do
      [ "$name" != "$base" ] && [ -f "/tmp/ab_${base}_$run/bench.json" ] && [ -f "/tmp/ab_${name}_$run/bench.json" ] || continue
      python3 kernel_ext/device/ab_compare.py "/tmp/ab_${base}_$run/bench.json" "/tmp/ab_${name}_$run/bench.json" \
        > "$OUT/cmp_${base}_vs_${name}_$run.txt"
      echo "== $run: $name / $base"; sed -n 1,3p "$OUT/cmp_${base}_vs_${name}_$run.txt"
    done
  done
done
