#!/usr/bin/env bash
# Call 5: the plugin's own CUDA kernels (the gate and the fused shadow epilogue, shadow_epilogue.cuh) under
# compute-sanitizer: their GPU tests (tests/gpu/test_shadow_epilogue.py, test_plugin_graph.py) under synccheck,
# memcheck and racecheck side by side, on the release library (v66a).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
mkdir -p $OUT/r
check() {  # tool
  timeout 200 compute-sanitizer --tool $1 --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_shadow_epilogue.py tests/gpu/test_plugin_graph.py > $OUT/r/plugin_kernels_$1.txt 2>&1
  echo "rc=$?" >> $OUT/r/plugin_kernels_$1.txt
}
for tool in synccheck memcheck racecheck; do check $tool & done
wait
for tool in synccheck memcheck racecheck; do
  printf '%-10s %s | %s | %s\n' $tool "$(tail -1 $OUT/r/plugin_kernels_$tool.txt)" "$(grep -E 'SUMMARY' $OUT/r/plugin_kernels_$tool.txt | tail -1)" "$(grep -E 'passed|failed' $OUT/r/plugin_kernels_$tool.txt | tail -1)"
done
echo "($SECONDS s)"
