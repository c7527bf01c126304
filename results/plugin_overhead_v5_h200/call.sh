#!/usr/bin/env bash
# Plugin overhead benchmark with kernel v45: the dispatch as shipped (early start after the gate), then a copy of
# the tree whose dispatch passes early_start=False (measurement only), then the shipped one again.
set -uo pipefail
export PYTHONUNBUFFERED=1 CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/variants/v45.so
R=$PWD; mkdir -p $OUT/r
rm -rf /tmp/plain && mkdir /tmp/plain && cp -r cutover kernel_ext /tmp/plain/ && sed -i 's/early_start=True/early_start=False/' /tmp/plain/cutover/plugin/kernels.py && grep -c "early_start=False" /tmp/plain/cutover/plugin/kernels.py
PYTHONPATH="$R:$R/.bundle/sglang" timeout 85 python3 -m cutover.plugin.bench_overhead --out $OUT/r/early1 > $OUT/r/early1.log 2>&1; echo "early 1 rc=$? ($SECONDS s)"
(cd /tmp/plain && PYTHONPATH="/tmp/plain:$R/.bundle/sglang" timeout 85 python3 -m cutover.plugin.bench_overhead --out $OUT/r/plain > $OUT/r/plain.log 2>&1); echo "plain rc=$? ($SECONDS s)"
PYTHONPATH="$R:$R/.bundle/sglang" timeout 85 python3 -m cutover.plugin.bench_overhead --out $OUT/r/early2 > $OUT/r/early2.log 2>&1; echo "early 2 rc=$? ($SECONDS s)"
for v in early1 plain early2; do echo "== $v"; tail -6 $OUT/r/$v/plugin_overhead.md 2>/dev/null | cut -d'|' -f2-5,10-14; done
cd $OUT && tar czf 0_all.tgz r && echo tarred
