// Programmatic dependent launch (sm_90+), device and host side, shared by every kernel of the library and its
// launches.
#pragma once

#include <cuda_runtime.h>

namespace cutover {

// Device side: a kernel launched with programmatic stream serialization may start
// while the kernel before it runs; it must call grid_dependency_wait() before touching anything that kernel
// writes (the wait returns once that grid has completed and its memory is visible). grid_dependency_release()
// lets the next such kernel start launching early.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void grid_dependency_release() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }

// Launch `kernel(args)` on `stream`, returning this launch's own error (never an earlier one left pending by
// other code, as cudaGetLastError after <<<>>> could). With `programmatic`, as a programmatic dependent of the
// previous kernel on the stream: it may start while that kernel finishes and waits for it on the device
// (grid_dependency_wait). Capturable into CUDA graphs.
template <typename... Args>
cudaError_t launch_on_stream(bool programmatic, void (*kernel)(Args...), dim3 grid, int threads, int smem,
                             cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// A programmatic dependent launch (launch_on_stream above).
template <typename... Args>
cudaError_t launch_dependent(void (*kernel)(Args...), dim3 grid, int threads, int smem, cudaStream_t stream,
                             Args... args) {
  return launch_on_stream(true, kernel, grid, threads, smem, stream, args...);
}

}  // namespace cutover
