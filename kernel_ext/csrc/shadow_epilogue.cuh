// Fused shadow epilogue: one launch per verify call that accounts the call into the layer's device counters.
//
// Every block reads the gate's flags {serve, sample}; block 0 counts the call first; with both flags 0 every
// block exits at once (triton mode, unsampled shadow calls). Otherwise a grid-stride pass over o (and, for a
// shadow sample, the scratch) gathers sum (s - o)^2, sum o^2, max |s - o| in fp32 and the non-finite flags;
// each block leaves its partial in the layer's workspace and takes a ticket; the block drawing the last ticket
// folds the partials in fp64, updates the counters and resets the ticket, so the workspace is ready for the
// next call (CUDA-graph safe: no allocation, no host value, a fixed workspace per layer).
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "cutover_verify.h"
#include "dependent_launch.cuh"
#include "warp_reduce.cuh"

namespace cutover {

constexpr int kShadowThreads = 256;
constexpr int kShadowMaxBlocks = 256;       // partial slots per layer workspace (one per block at most)
constexpr int kShadowChunksPerThread = 4;   // 16-byte chunks per thread before another block is worth it
constexpr int kShadowRowChunks = 512 * 2 / 16;  // 16-byte chunks of one 512-dim bf16 row
static_assert(kShadowMaxBlocks * 16 + 4 <= CUTOVER_SHADOW_WORKSPACE_BYTES, "partials + ticket fit");
static_assert(kShadowMaxBlocks <= kShadowThreads, "the last block folds one partial per thread");

struct ShadowArgs {
  const __nv_bfloat16* o;
  int64_t so0, so1;
  const __nv_bfloat16* s;
  int64_t ss0, ss1;
  long long rows;  // tokens * heads
  int H;
  const int32_t* enable;
  double* counters;
  const double* edges;
  int n_edges;
  float4* partials;      // [kShadowMaxBlocks] {sum d^2, sum o^2, max |d|, flags: 1 bad o, 2 bad scratch}
  unsigned int* ticket;  // blocks done with this call; reset to 0 by the last one
};

// Any of the 8 bf16 values non-finite (exponent bits all ones: inf or nan)?
__device__ __forceinline__ bool has_nonfinite(const uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  bool bad = false;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    bad |= (w[i] & 0x7F80u) == 0x7F80u || (w[i] & 0x7F800000u) == 0x7F800000u;
  return bad;
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// The counters update of one call (one thread of the finishing block).
__device__ void shadow_finalise(const ShadowArgs& a, bool serve, bool sample, double sum_dd, double sum_oo,
                                float max_abs, int flags) {
  double* c = a.counters;
  const bool bad_o = flags & 1, bad_s = flags & 2;
  if (serve) {
    c[CUTOVER_COUNTER_SERVED] += 1.0;
    c[CUTOVER_COUNTER_SERVE_BAD_O] += bad_o;
  }
  if (!sample) return;
  c[CUTOVER_COUNTER_COMPARED] += 1.0;
  c[CUTOVER_COUNTER_SAMPLE_BAD_O] += bad_o;
  c[CUTOVER_COUNTER_SAMPLE_BAD_SCRATCH] += bad_s;
  double rel = sqrt(sum_dd) / fmax(sqrt(sum_oo), 1e-30), mabs = max_abs;
  if (bad_o || bad_s || !isfinite(rel)) rel = CUTOVER_NONFINITE_SENTINEL;
  if (bad_o || bad_s || !isfinite(mabs)) mabs = CUTOVER_NONFINITE_SENTINEL;
  c[CUTOVER_COUNTER_REL_L2_MAX] = fmax(c[CUTOVER_COUNTER_REL_L2_MAX], rel);
  c[CUTOVER_COUNTER_MAX_ABS] = fmax(c[CUTOVER_COUNTER_MAX_ABS], mabs);
  int bucket = 0;  // torch.bucketize(right=True): the number of edges <= rel
  while (bucket < a.n_edges && a.edges[bucket] <= rel) ++bucket;
  c[CUTOVER_COUNTER_HIST + bucket] += 1.0;
}

// Launched as a programmatic dependent of the kernel before it (e.g. SGLang's): it waits for that kernel at entry,
// so only its launch overlaps that kernel's end.
__global__ void __launch_bounds__(kShadowThreads) shadow_accumulate_kernel(const ShadowArgs a) {
  grid_dependency_wait();
  const volatile int32_t* flags_in = a.enable;
  const bool serve = flags_in[0] != 0, sample = flags_in[1] != 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) a.counters[CUTOVER_COUNTER_CALLS] += 1.0;
  if (!serve && !sample) return;

  float sum_dd = 0.f, sum_oo = 0.f, max_abs = 0.f;
  bool bad_o = false, bad_s = false;
  const long long chunks = a.rows * kShadowRowChunks;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += stride) {
    const int r = (int)(i / kShadowRowChunks);  // rows = tokens * heads < 2^31 (T <= 64, H <= 128 per request)
    const int ch = (int)(i - (long long)r * kShadowRowChunks);
    const int t = r / a.H, h = r - t * a.H;
    const uint4 ov = __ldg(reinterpret_cast<const uint4*>(a.o + t * a.so0 + (int64_t)h * a.so1 + ch * 8));
    bad_o |= has_nonfinite(ov);
    if (!sample) continue;
    const uint4 sv = __ldg(reinterpret_cast<const uint4*>(a.s + t * a.ss0 + (int64_t)h * a.ss1 + ch * 8));
    bad_s |= has_nonfinite(sv);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, sw[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float o0 = bf16_lo(ow[k]), o1 = bf16_hi(ow[k]);
      const float d0 = bf16_lo(sw[k]) - o0, d1 = bf16_hi(sw[k]) - o1;
      sum_dd += d0 * d0 + d1 * d1;
      sum_oo += o0 * o0 + o1 * o1;
      max_abs = fmaxf(max_abs, fmaxf(fabsf(d0), fabsf(d1)));
    }
  }
  const int block_flags = (__syncthreads_or(bad_o) ? 1 : 0) | (__syncthreads_or(bad_s) ? 2 : 0);
  __shared__ float s_red[3][kShadowThreads / 32];
  __shared__ bool s_last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  sum_dd = warp_sum(sum_dd);
  sum_oo = warp_sum(sum_oo);
  max_abs = warp_max(max_abs);
  if (lane == 0) {
    s_red[0][warp] = sum_dd;
    s_red[1][warp] = sum_oo;
    s_red[2][warp] = max_abs;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float4 part = make_float4(0.f, 0.f, 0.f, (float)block_flags);
    for (int w = 0; w < kShadowThreads / 32; ++w) {
      part.x += s_red[0][w];
      part.y += s_red[1][w];
      part.z = fmaxf(part.z, s_red[2][w]);
    }
    a.partials[blockIdx.x] = part;
    __threadfence();  // the partial is visible before the ticket says so
    s_last = atomicAdd(a.ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;

  // The last block: fold every block's partial (gridDim.x <= kShadowThreads: one per thread) in fp64.
  __threadfence();
  double dd = 0.0, oo = 0.0;
  float mx = 0.f;
  int fl = 0;
  if (threadIdx.x < gridDim.x) {
    const float4 p = __ldcg(a.partials + threadIdx.x);
    dd = p.x;
    oo = p.y;
    mx = p.z;
    fl = (int)p.w;
  }
  dd = warp_sum(dd);
  oo = warp_sum(oo);
  mx = warp_max(mx);
  fl = (__syncthreads_or(fl & 1) ? 1 : 0) | (__syncthreads_or(fl & 2) ? 2 : 0);
  __shared__ double s_dd[kShadowThreads / 32], s_oo[kShadowThreads / 32];
  if (lane == 0) {
    s_dd[warp] = dd;
    s_oo[warp] = oo;
    s_red[2][warp] = mx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kShadowThreads / 32; ++w) {
      s_dd[0] += s_dd[w];
      s_oo[0] += s_oo[w];
      s_red[2][0] = fmaxf(s_red[2][0], s_red[2][w]);
    }
    shadow_finalise(a, serve, sample, s_dd[0], s_oo[0], s_red[2][0], fl);
    *a.ticket = 0u;  // ready for the next call on this layer (stream order makes it visible)
  }
}

}  // namespace cutover
