#!/usr/bin/env bash
# Call 2: why v72 lost at 8/8 mix:1x65536+63x1024. ncu's duration of the main kernel and of the combine, each on
# its own (ncu serialises kernels, flushes caches, runs at its base clock), v71 and v72 on the mix, v71 on its even
# twin; the script that runs a mix is results/ab_v67_h200/call5.sh's.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
tar xJf kernel_ext/build/variants_v72.txz -C kernel_ext/build
V=$PWD/kernel_ext/build/variants_v72
sed -n '/^cat > \/tmp\/run_mix.py/,/^PY$/p' results/ab_v67_h200/call5.sh | sed '1d;$d' > /tmp/run_mix.py
for spec in "v71 mix" "v72 mix" "v71 even" "v72 even"; do
  set -- $spec
  CUTOVER_KERNEL_LIB=$V/$1.so timeout 120 ncu --csv --metrics gpu__time_duration.sum \
    --kernel-name regex:"verify_(wgmma|combine)" python3 /tmp/run_mix.py 8 8 $2 1x65536+63x1024 > $OUT/r/ncu_$1_$2.csv 2>&1
  echo "$1 $2 rc=$? ($SECONDS s)"
done
python3 - $OUT/r <<'PY'
import csv, glob, os, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/ncu_*.csv")):
    per = {}
    for r in csv.reader(open(f)):
        if len(r) > 10 and r[0].isdigit():  # the last call of each kernel
            per["combine" if "combine" in r[4] else "main"] = float(r[-1].replace(",", "")) * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[r[-2]]
    print(f"{os.path.basename(f)[4:-4]:10} main {per.get('main', 0):8.1f} us  combine {per.get('combine', 0):6.1f} us")
PY
