#!/usr/bin/env bash
# The two device scripts that took kernel_ext.bench.parse_shapes in the twelfth session (81525bd) and had not run
# on the GPU since: phase_times.py (library built with --define CUTOVER_PHASE_TIMES) and timeline.py, two shapes.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
mkdir -p $OUT/r
CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase/libcutover_verify.so timeout 150 python3 kernel_ext/device/phase_times.py --shapes "8,8,4,16384 16,8,1,1024" --json $OUT/r/phase_times.json > $OUT/r/phase_times.txt 2>&1
echo "phase_times rc=$?"; tail -12 $OUT/r/phase_times.txt
timeout 150 python3 kernel_ext/device/timeline.py --shapes "8,8,4,16384 16,8,1,1024" --json $OUT/r/timeline.json > $OUT/r/timeline.txt 2>&1
echo "timeline rc=$?"; tail -8 $OUT/r/timeline.txt
(cd $OUT && tar czf 0_all.tgz r)
