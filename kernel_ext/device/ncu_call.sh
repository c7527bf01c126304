#!/usr/bin/env bash
# One device call: ncu on the main kernel for a compute-heavy and a memory-bound shape (carry kernel_ext/build).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
KERNEL="${KERNEL:-regex:verify_wgmma}"
METRICS="sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum"
for shape in ${SHAPES:-"16 64 4 16384" "8 8 16 65536"}; do
  tag=$(echo "$shape" | tr ' ' '_')
  timeout "${NCU_S:-120}" ncu --kernel-name "$KERNEL" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --metrics "$METRICS" \
    python3 kernel_ext/device/profile_one.py $shape > "$OUT/ncu_$tag.txt" 2>&1
  echo "== $shape rc=$?"
  grep -E "Duration|gmma|Throughput|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|stall|bank|Registers|Shared Memory Configuration|lts__t|sm__pipe" "$OUT/ncu_$tag.txt" | head -40
done
cuobjdump -sass kernel_ext/build/libcutover_verify.so 2>/dev/null | awk '/Function : .*verify_wgmma_kernelIi/{f=1} f&&/Function : .*verify_wgmma_kernelIx/{f=0} f' > "$OUT/wgmma_int.sass"
echo "HGMMA: $(grep -c HGMMA "$OUT/wgmma_int.sass"), SASS lines $(wc -l < "$OUT/wgmma_int.sass")"
