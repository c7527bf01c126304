#!/usr/bin/env bash
# Call 5: where the mixes' remaining time goes (v67, the release's sm_90a image). ncu's duration of the main kernel
# and of the combine, each on its own (ncu serialises kernels and flushes caches), for the one-long-request mix and
# its even twin at 8/8, 8/16 and 16/16, and logu64 and its twin at 16/16: the README's leads say the combine merges a
# long request's many splits two per pass, and that the work items' order costs logu64.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
cat > /tmp/run_mix.py <<'PY'
import sys, torch
from kernel_ext import api
from kernel_ext.bench import MIXES, Shape
H, T, kind, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lengths = MIXES[name]()
prefixes = lengths if kind == "mix" else [round(sum(lengths) / len(lengths))] * len(lengths)
shape = Shape(H, T, len(prefixes), f"{kind}:{name}", "tree", prefixes=prefixes)
for i in range(3):
    api.verify_attention(*shape.args(i % shape.sets), workspace=shape.workspace)
torch.cuda.synchronize()
PY
for spec in "8 8 1x65536+63x1024" "8 16 1x65536+63x1024" "16 16 1x65536+63x1024" "16 16 logu64"; do
  set -- $spec
  for kind in mix even; do
    f=$OUT/r/ncu_${1}_${2}_${kind}_$3.csv
    CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/libcutover_verify.so timeout 120 ncu --csv --metrics gpu__time_duration.sum \
      --kernel-name regex:"verify_(wgmma|combine)" python3 /tmp/run_mix.py $1 $2 $kind $3 > $f 2>&1
    echo "$1/$2 $kind $3 rc=$? ($SECONDS s)"
  done
done
(cd $OUT && tar czf 0_all.tgz r)
python3 - $OUT/r <<'PY'
import csv, glob, os, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/ncu_*.csv")):
    rows = [r for r in csv.reader(open(f)) if len(r) > 10 and r[0].isdigit()]
    per = {}
    for r in rows:  # the last call of each kernel (cold code before it)
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[r[-2]]  # as run, it expected "nsecond" and stopped (README)
        per["combine" if "combine" in r[4] else "main"] = float(r[-1].replace(",", "")) * scale
    print(f"{os.path.basename(f)[4:-4]:32} main {per.get('main', 0):9.1f} us  combine {per.get('combine', 0):7.1f} us")
PY
echo "($SECONDS s)"
