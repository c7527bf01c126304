#!/usr/bin/env bash
# Call 1: v74 (the combine's long-request pass) and v74w (the same with two blocks per SM for that pass) against v71.
# First the new GPU test with v74; then two interleaved rounds over the full and mixed grids; then ncu's duration of
# the main kernel and the combine, each on its own, on two mixes and a twin (the mix runner is
# results/ab_v67_h200/call5.sh's).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
pack() { (cd $OUT && tar czf 0_all.tgz r); }
tar xJf kernel_ext/build/variants_v74.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v74
CUTOVER_KERNEL_LIB=$V/v74.so timeout 120 python3 -m pytest -q -ra -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "long_request" > $OUT/r/gpu_long_v74.log 2>&1
echo "long-request tests rc=$? ($SECONDS s): $(tail -n 1 $OUT/r/gpu_long_v74.log)"
VARIANTS=$V OUT=$OUT/r GRIDS="full mixed" ROUNDS=2 bash kernel_ext/device/ab_call.sh
pack
echo "A/B done ($SECONDS s)"
sed -n '/^cat > \/tmp\/run_mix.py/,/^PY$/p' results/ab_v67_h200/call5.sh | sed '1d;$d' > /tmp/run_mix.py
for spec in "v71 mix 1x65536+63x1024" "v74 mix 1x65536+63x1024" "v74w mix 1x65536+63x1024" \
            "v71 even 1x65536+63x1024" "v71 mix 4x65536+60x256" "v74 mix 4x65536+60x256" "v74w mix 4x65536+60x256"; do
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
