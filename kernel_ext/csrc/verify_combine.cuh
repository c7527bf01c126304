// The combine: for every row of every request served by more than one split, merge the partials by their
// log-sum-exp. One warp per item (request, row, slice of the 512 dims), no block barriers, so many items are in
// flight at once. The lanes are GROUPS split groups (split i goes to group i % GROUPS) x 32 / GROUPS lanes, each
// lane VEC x 8 values (VEC x 16 bytes of fp16 partial) of the slice; groups are merged by shuffles. After the
// request's entry a lane issues the loads of BATCH of its splits at once and merges them with a running maximum,
// so an item costs two round trips to memory while each lane has at most BATCH splits. The combine is bound by
// the bytes it has in flight, so the launch picks the layout by the splits a request is expected to have
// (verify_api.cu): a lane's loads should neither wait for one another nor be left empty. A group of 8 or more
// lanes reads whole 128-byte lines of a partial row, 4 lanes half lines: the same 8.4 MB in one round trip takes
// 5.1 us in half lines and 3.4 us in whole ones.
// The combine is a programmatic dependent of the main kernel: it launches while the main kernel runs and waits
// for it (grid_dependency_wait) before it reads a partial.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <stdint.h>

#include <climits>
#include <type_traits>

#include "dependent_launch.cuh"
#include "mma_primitives.cuh"
#include "phase_clock.cuh"
#include "verify_args.cuh"
#include "warp_reduce.cuh"

namespace cutover {

constexpr int kCombineThreads = 256;

template <int GROUPS_, int VEC_, int BATCH_, int LONG_BATCH_ = BATCH_>
struct CombineLayout {
  // LONG_BATCH: splits per batch for requests with more than GROUPS x BATCH splits.
  static constexpr int GROUPS = GROUPS_, VEC = VEC_, BATCH = BATCH_, LONG_BATCH = LONG_BATCH_;
  static constexpr int SPLITS_PER_PASS = GROUPS * BATCH;       // splits a warp merges in one batch of its lanes
  // A request with more splits than two batches takes the long-request pass, where the launch has one.
  static constexpr int LONG_REQUEST = 2 * SPLITS_PER_PASS;
  static constexpr int LONG_SPLITS_PER_PASS = GROUPS * LONG_BATCH;  // the same, for requests with more splits
  static constexpr int LANES = 32 / GROUPS;                    // lanes of a split group
  static constexpr int SLICE = LANES * VEC * 8;                // values of a row per item
  static constexpr int SLICES = kDimV / SLICE;                 // items per row
  static_assert(SLICES * SLICE == kDimV, "the slices tile a row");
};
// Up to 2 splits per request: a whole row per warp, 32 bytes per lane and split, both splits in one batch.
using CombineTwoSplits = CombineLayout<1, 2, 2>;
// Up to 8: 2 groups over 128-dim slices, 4 splits per lane in one batch.
using CombineFewSplits = CombineLayout<2, 1, 4>;
// More (small batches with long prefixes): 4 groups over 64-dim slices, each group's 8 lanes one 128-byte line of
// a split's row. A request with more than 16 splits is merged 9 per lane and batch (84 registers, two blocks per
// SM), so the 33 splits of a batch-4 request on 132 SMs take one round trip.
using CombineManySplits = CombineLayout<4, 1, 4, 9>;
// More than CombineManySplits takes in one pass, with few rows: 8 groups over 32-dim slices (half lines, but
// twice the warps of 4 groups), 4 splits per lane and batch, and 17 for a request with more than 32 splits, so
// that one round trip covers 136 splits (a request's share of a 132-SM wave plus its draft tail's split), at the
// cost of registers: for calls whose warp items fit in one wave at one block per SM.
using CombineLongSplits = CombineLayout<8, 1, 4, 17>;
// The same for calls with up to twice those rows: 4 groups over 64-dim slices (whole lines), 17 splits per lane
// and batch (154 registers), so that 68 splits take one round trip where CombineManySplits takes 36. One block
// per SM: where the next call's main kernel overlaps the combine (the benchmark's back-to-back calls, not the
// plugin's sequence) that costs small calls more than it saves.
using CombineLongSplitsMoreRows = CombineLayout<4, 1, 4, 17>;

// A lane's running merge of its splits' partials: weights relative to its own maximum log-sum-exp m.
template <class L>
struct CombineLane {
  // INFINITY, not CUDART_INF_F: default member initializers are compiled for the host too.
  float m = -INFINITY, wsum = 0.f, acc[8 * L::VEC] = {};

  // Merge B splits (log-sum-exp and exponent, 8 * VEC fp16 values each; absent ones have lse -inf).
  template <int B>
  __device__ __forceinline__ void merge(const float2 (&lse)[B], const uint4 (&raw)[B][L::VEC]) {
    float m_new = m;
#pragma unroll
    for (int c = 0; c < B; ++c) m_new = fmaxf(m_new, lse[c].x);
    if (m_new == -CUDART_INF_F) return;  // nothing visible yet
    rescale(exp2f(m - m_new));
    m = m_new;
#pragma unroll
    for (int c = 0; c < B; ++c) {
      const float w = exp2f(lse[c].x - m_new), w_stored = w * pow2i((int)lse[c].y);
      wsum += w;
#pragma unroll
      for (int v = 0; v < L::VEC; ++v) {
        const uint32_t words[4] = {raw[c][v].x, raw[c][v].y, raw[c][v].z, raw[c][v].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&words[k]));
          acc[v * 8 + 2 * k] += w_stored * x.x;
          acc[v * 8 + 2 * k + 1] += w_stored * x.y;
        }
      }
    }
  }

  __device__ __forceinline__ void rescale(float f) {
    wsum *= f;
#pragma unroll
    for (int k = 0; k < 8 * L::VEC; ++k) acc[k] *= f;
  }

  // Sum over the warp's split groups (lanes L::LANES apart), relative to the warp's maximum.
  __device__ __forceinline__ void reduce_groups() {
    float mw = m;
#pragma unroll
    for (int d = L::LANES; d < 32; d <<= 1) mw = fmaxf(mw, __shfl_xor_sync(kFullWarp, mw, d));
    rescale(m == -CUDART_INF_F ? 0.f : exp2f(m - mw));
#pragma unroll
    for (int d = L::LANES; d < 32; d <<= 1) {
      wsum += __shfl_xor_sync(kFullWarp, wsum, d);
#pragma unroll
      for (int k = 0; k < 8 * L::VEC; ++k) acc[k] += __shfl_xor_sync(kFullWarp, acc[k], d);
    }
  }
};

// Where the combine writes: the call's output or the shadow scratch.
struct CombineOutput {
  __nv_bfloat16* out;
  int64_t s0, s1;
};

// Merges the partials of row r, slice `slice` of request b in layout L and stores that slice of the row, where the
// request has 2 to `most_splits` splits (the pass's share) and the row is one of its rows.
template <class L>
__device__ __forceinline__ void combine_item(const KernelArgs& a, const CombineOutput& o, int b, int r, int slice,
                                             int most_splits) {
  const int lane = threadIdx.x & 31, sg = lane / L::LANES;
  const int2 rq = a.req[b];
  const int64_t qo_start = load_index(a.qo_indptr, b, a.qo64);
  int ext = (int)(load_index(a.qo_indptr, b + 1, a.qo64) - qo_start);
  const int n = rq.x;
  if (n <= 1 || n > most_splits) return;
  ext = ext < 0 ? 0 : (ext > a.T ? a.T : ext);
  if (r >= ext * a.H) return;
  const int v0 = slice * L::SLICE / 8 + (lane % L::LANES) * L::VEC;  // this lane's first 8-value column
  CombineLane<L> merged;
  // Each lane merges its splits B at a time: each batch's loads are issued together.
  auto merge_splits = [&](auto batch) {
    constexpr int B = decltype(batch)::value;
    for (int i0 = sg; i0 < n; i0 += L::GROUPS * B) {
      float2 lse[B];
      uint4 raw[B][L::VEC];
#pragma unroll
      for (int c = 0; c < B; ++c) {
        const int i = i0 + c * L::GROUPS;
        const int64_t row = (int64_t)(rq.y + i) * a.rcap + r;
        const uint4* src = reinterpret_cast<const uint4*>(a.part_o + row * kDimV) + v0;
        lse[c] = i < n ? a.part_lse[row] : make_float2(-CUDART_INF_F, 0.f);
#pragma unroll
        for (int v = 0; v < L::VEC; ++v) raw[c][v] = i < n ? src[v] : make_uint4(0, 0, 0, 0);
      }
      merged.template merge<B>(lse, raw);
    }
  };
  if (L::LONG_BATCH != L::BATCH && n > L::SPLITS_PER_PASS) merge_splits(std::integral_constant<int, L::LONG_BATCH>{});
  else merge_splits(std::integral_constant<int, L::BATCH>{});
  merged.reduce_groups();
  if (sg == 0) {
    const float inv = merged.wsum > 0.f ? 1.f / merged.wsum : 0.f;
    const float* acc = merged.acc;
    const int t = r / a.H, h = r - t * a.H;
    uint4* dst = reinterpret_cast<uint4*>(o.out + (qo_start + t) * o.s0 + (int64_t)h * o.s1) + v0;
#pragma unroll
    for (int v = 0; v < L::VEC; ++v)
      dst[v] = make_uint4(pack_bf16x2(acc[v * 8 + 0] * inv, acc[v * 8 + 1] * inv),
                          pack_bf16x2(acc[v * 8 + 2] * inv, acc[v * 8 + 3] * inv),
                          pack_bf16x2(acc[v * 8 + 4] * inv, acc[v * 8 + 5] * inv),
                          pack_bf16x2(acc[v * 8 + 6] * inv, acc[v * 8 + 7] * inv));
  }
}

// The layout of the long-request pass: 4 groups over 64-dim slices (whole 128-byte lines), 4 splits per lane and
// batch, so a row's 8 warps merge 16 splits per round trip; few registers, so the pass costs the kernel's
// occupancy nothing.
using CombineLongRequests = CombineLayout<4, 1, 4>;

// The k-th set bit of `bits` (k below its popcount).
__device__ __forceinline__ int nth_set_bit(unsigned bits, int k) {
  for (; k > 0; --k) bits &= bits - 1u;
  return __ffs(bits) - 1;
}

// The long-request pass: every request with more than `from` splits, merged in CombineLongRequests by warps of
// their own, so that a long request among many short ones is not left to one warp per row. The warp takes every
// `warps`-th item from `item` on, items numbered request by request (rcap rows x SLICES each) in the order below.
// It finds the long requests 1024 at a time: lane l holds a mask of b = base + 32 k + l (k < 32), in lane order.
__device__ void combine_long_requests(const KernelArgs& a, const CombineOutput& o, int from, long long item,
                                      long long warps) {
  using W = CombineLongRequests;
  const int lane = threadIdx.x & 31;
  const long long per_request = (long long)a.rcap * W::SLICES;
  long long before = 0;  // items of the long requests of earlier rounds
  for (int base = 0; base < a.B; base += 32 * 32) {
    const int ks = min(32, (a.B - base + 31) / 32);
    unsigned mine = 0;
#pragma unroll 4
    for (int k = 0; k < ks; ++k) {
      const int b = base + 32 * k + lane;
      if (b < a.B && a.req[b].x > from) mine |= 1u << k;
    }
    int2 total;
    const int first = warp_exclusive_scan2(make_int2(__popc(mine), 0), &total).x;  // long requests of earlier lanes
    const long long items = before + total.x * per_request;
    for (; item < items; item += warps) {
      const long long j = item - before;
      const int q = (int)(j / per_request), rest = (int)(j - q * per_request);
      const int owner = __ffs(__ballot_sync(kFullWarp, q >= first && q < first + __popc(mine))) - 1;
      const int k = __shfl_sync(kFullWarp, nth_set_bit(mine, q - first), owner);
      combine_item<W>(a, o, base + 32 * k + owner, rest / W::SLICES, rest % W::SLICES, INT_MAX);
    }
    before = items;
  }
}

// LONG_REQUESTS: the first `long_blocks` blocks run the long-request pass for requests with more than
// L::LONG_REQUEST splits, and the others leave those requests to them (the host launches it for the layouts of
// calls of many requests, where one long request would otherwise be merged by one warp per row). The pass's blocks
// come first: placed last they cost calls without long requests more.
template <class L, bool LONG_REQUESTS>
__global__ void __launch_bounds__(kCombineThreads) verify_combine_kernel(const KernelArgs a, int long_blocks) {
  phase_mark(kPhaseCombine, 0);
  grid_dependency_release();  // the next call's main kernel may start its plan; it waits for this grid
  grid_dependency_wait();  // every split of the main kernel has written its partial
  phase_mark(kPhaseCombine, 1);
  const int choice = output_choice(a);
  if (choice == kOutNone) return;
  CombineOutput o;  // assigned member by member: as one expression, ptxas gives other combines more registers
  o.out = choice == kOutAlt ? a.o_alt : a.o;
  o.s0 = choice == kOutAlt ? a.sa0 : a.so0;
  o.s1 = choice == kOutAlt ? a.sa1 : a.so1;
  const int warp = threadIdx.x >> 5, warps_per_block = blockDim.x >> 5;
  const unsigned pass_blocks = LONG_REQUESTS ? long_blocks : 0, item_blocks = gridDim.x - pass_blocks;
  if (LONG_REQUESTS && blockIdx.x < pass_blocks) {
    combine_long_requests(a, o, L::LONG_REQUEST, (long long)blockIdx.x * warps_per_block + warp,
                          (long long)long_blocks * warps_per_block);
  } else {
    const long long warps = (long long)item_blocks * warps_per_block;
    const long long items = (long long)a.B * a.rcap * L::SLICES;
    for (long long item = (long long)(blockIdx.x - pass_blocks) * warps_per_block + warp; item < items; item += warps) {
      const int slice = (int)(item % L::SLICES);
      const long long br = item / L::SLICES;
      const int b = (int)(br / a.rcap), r = (int)(br - (long long)b * a.rcap);
      combine_item<L>(a, o, b, r, slice, LONG_REQUESTS ? L::LONG_REQUEST : INT_MAX);
    }
  }
  phase_mark_last_warp(kPhaseCombine, 2);
}

}  // namespace cutover
