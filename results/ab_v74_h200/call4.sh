#!/usr/bin/env bash
# Call 4: memcheck of call 3's tests again, with time for them (the 1100-request case is slow under memcheck; call 3's
# 90 s ran out after 10 of 14). final_call.sh now gives the sanitizers 240 s.
set -uo pipefail
export PYTHONPATH="$PWD:$PWD/.bundle/sglang"; mkdir -p $OUT/r
timeout 280 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -m gpu tests/gpu/test_kernel_parity.py \
  -p no:cacheprovider -k "long_request or spread_lengths" > $OUT/r/memcheck_v75_long.txt 2>&1
echo "rc=$?" >> $OUT/r/memcheck_v75_long.txt; tail -n 4 $OUT/r/memcheck_v75_long.txt
