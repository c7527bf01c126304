#!/usr/bin/env bash
# Call 2: v75 (the long-request pass in two blocks per SM after the item blocks, launched only where a request can
# have more splits than the layout merges in two batches) and v75f (the same with its blocks first, as v74w) against
# v71. First the long-request and spread-lengths GPU tests with both; then two interleaved rounds over the full and
# mixed grids; then ncu's duration of the main kernel and the combine, each on its own, on two mixes (the mix
# runner is results/ab_v67_h200/call5.sh's).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v75.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v75
for lib in v75 v75f; do CUTOVER_KERNEL_LIB=$V/$lib.so timeout 120 python3 -m pytest -q -ra -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "long_request or spread_lengths" > $OUT/r/gpu_long_$lib.log 2>&1
echo "$lib long-request tests rc=$? ($SECONDS s): $(tail -n 1 $OUT/r/gpu_long_$lib.log)"; done
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
sed -n '/^cat > \/tmp\/run_mix.py/,/^PY$/p' results/ab_v67_h200/call5.sh | sed '1d;$d' > /tmp/run_mix.py
for spec in "v71 mix 1x65536+63x1024" "v75 mix 1x65536+63x1024" "v75f mix 1x65536+63x1024" \
            "v71 mix 4x65536+60x256" "v75 mix 4x65536+60x256" "v75f mix 4x65536+60x256"; do
  set -- $spec
  CUTOVER_KERNEL_LIB=$V/$1.so timeout 60 ncu --csv --metrics gpu__time_duration.sum \
    --kernel-name regex:"verify_(wgmma|combine)" python3 /tmp/run_mix.py 8 8 $2 $3 > $OUT/r/ncu_$1_$2_$3.csv 2>&1
  echo "ncu $1 $2 $3 rc=$? ($SECONDS s)"
done
pack
python3 - $OUT/r <<'PY'
import csv, glob, os, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/ncu_*.csv")):
    per = {}
    for r in csv.reader(open(f)):
        if len(r) > 10 and r[0].isdigit():  # the last call of each kernel
            per["combine" if "combine" in r[4] else "main"] = float(r[-1].replace(",", "")) * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[r[-2]]
    print(f"{os.path.basename(f)[4:-4]:32} main {per.get('main', 0):8.1f} us  combine {per.get('combine', 0):6.1f} us")
PY
