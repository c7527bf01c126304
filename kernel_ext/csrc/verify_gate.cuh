// The live-switch gate, one CTA per call, ahead of the call's attention kernels (SGLang's and ours): it counts the
// call and, from the layer's gate state {mode, sample_every, call_counter}, writes the enable flags {serve, sample}
// that every kernel of the call reads on the device (output_choice), and the qo_indptr the stock kernel reads: all
// zero in custom mode (mode 2), so that the stock kernel has no rows to compute (cutover_verify.h,
// cutover_verify_gate).
#pragma once

#include <stdint.h>

#include "dependent_launch.cuh"

namespace cutover {

__global__ void verify_gate_kernel(int32_t* state, const void* qo, void* qo_gated, int64_t n, int is64,
                                   int32_t* enable) {
  __shared__ int s_zero;
  grid_dependency_wait();     // launched as a programmatic dependent: the kernel before it has finished from here on
  grid_dependency_release();  // the main kernel may start its plan; it waits for this grid before reading enable
  if (threadIdx.x == 0) {
    const int mode = state[0];
    const uint32_t every = state[1] < 1 ? 1u : (uint32_t)state[1];
    const uint32_t count = (uint32_t)state[2];
    state[2] = (int32_t)(count + 1u);
    enable[0] = mode == 2;
    enable[1] = mode == 1 && (count % every) == 0;
    s_zero = mode == 2;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (is64) static_cast<long long*>(qo_gated)[i] = s_zero ? 0 : static_cast<const long long*>(qo)[i];
    else static_cast<int*>(qo_gated)[i] = s_zero ? 0 : static_cast<const int*>(qo)[i];
  }
}

}  // namespace cutover
