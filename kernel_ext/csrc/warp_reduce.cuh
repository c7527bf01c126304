// Warp-wide reductions (every lane gets the result) and prefix sums, shared by the plan, the combine and the shadow
// epilogue, and the quad reductions of the main kernels (a row of an mma accumulator lies in the 4 lanes of a quad).
#pragma once

namespace cutover {

constexpr unsigned kFullWarp = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kFullWarp, v, d);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, d));
  return v;
}

__device__ __forceinline__ unsigned warp_max(unsigned v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(kFullWarp, v, d));
  return v;
}

// Over the 4 lanes of this lane's quad (lanes 4q .. 4q + 3).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullWarp, v, 2));
}

// Exclusive prefix sums of v over the lanes of the warp; `total` gets the sums over all 32 lanes.
__device__ __forceinline__ int2 warp_exclusive_scan2(int2 v, int2* total) {
  const int lane = threadIdx.x & 31;
  int2 inc = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int x = __shfl_up_sync(kFullWarp, inc.x, d), y = __shfl_up_sync(kFullWarp, inc.y, d);
    if (lane >= d) { inc.x += x; inc.y += y; }
  }
  *total = make_int2(__shfl_sync(kFullWarp, inc.x, 31), __shfl_sync(kFullWarp, inc.y, 31));
  return make_int2(inc.x - v.x, inc.y - v.y);
}


}  // namespace cutover
