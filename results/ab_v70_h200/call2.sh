#!/usr/bin/env bash
# Call 2: where v70's costs come from. Three libraries, two interleaved rounds over the full and mixed grids:
# v67; v70 (the release sources); v70x, v70's device code byte for byte with a host that never launches the
# LONGEST_FIRST instances. v70x / v67 is what the new module's layout costs (v67's main-loop SASS, every call in
# request order), v70 / v70x what the LONGEST_FIRST instances cost or gain.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v70b.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v70b
VARIANTS=$V OUT=/tmp/res GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
cp /tmp/res/*.log $OUT/r/ 2>/dev/null
for run in full_1 full_2 mixed_1 mixed_2; do
  for v in v67 v70 v70x; do [ -f /tmp/ab_${v}_$run/bench.json ] && gzip -c /tmp/ab_${v}_$run/bench.json > $OUT/r/ab_${v}_$run.json.gz; done
  for pair in "v67 v70x" "v70x v70" "v67 v70"; do
    set -- $pair
    [ -f /tmp/ab_$1_$run/bench.json ] && [ -f /tmp/ab_$2_$run/bench.json ] || continue
    python3 kernel_ext/device/ab_compare.py /tmp/ab_$1_$run/bench.json /tmp/ab_$2_$run/bench.json > $OUT/r/cmp_$1_vs_$2_$run.txt
    echo "== $run: $2 / $1"; sed -n 1,3p $OUT/r/cmp_$1_vs_$2_$run.txt
  done
done
pack
echo "($SECONDS s)"
