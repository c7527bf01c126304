#!/usr/bin/env bash
# Where the plan's ~1.8 us go (a warm second plan took as long as the first): a diagnostic build of v56 with
# marks inside plan_work_item (1: first pass summed, 2: first chunk, 3: chunk loop done, 4: share, 5: scan done);
# the later phase marks removed, so the table's columns are the plan's segments. v56's phase build for reference.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
S="8,8,1,1024 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,8,1,1024 16,32,64,1024"
for v in seg 56; do CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase$v/libcutover_verify.so timeout 40 python3 kernel_ext/device/phase_times.py --shapes "$S" --json $OUT/r/phase_times_v$v.json > $OUT/r/phase_times_v$v.txt 2>&1; echo "phase v$v rc=$? ($SECONDS s)"; done
cat $OUT/r/phase_times_vseg.txt; sed -n 1,8p $OUT/r/phase_times_v56.txt
(cd $OUT && tar czf 0_all.tgz r)
