// What both main kernels (verify_mma.cuh, verify_wgmma.cuh) share around their main loop: the CTA's split of the
// call (its work item resolved against the request's index tensors), the point from which it may write, which
// draft keys its rows see, and how it stores its rows, to o or as an fp16 partial for the combine.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "dependent_launch.cuh"
#include "mma_primitives.cuh"
#include "verify_args.cuh"
#include "verify_plan.cuh"
#include "warp_reduce.cuh"

namespace cutover {

constexpr int kSglangBlockM = 32;  // BLOCK_M of SGLang's kernel for 576/512 on sm_90 and sm_120

// What a main-kernel CTA works on: its work item (blockIdx.y) and row tile (blockIdx.x) resolved against the
// request's index tensors. decode_work returns false when the CTA has nothing to do (an idle work item, or a row
// tile past the request's rows).
struct SplitWork {
  int request, splits, call_splits, ext, rows_b, row0, P, key_begin, key_end, slot;
  int64_t qo_start, kv_start, mask_start;
  bool does_tail;  // the request's last split also attends to the draft tail
  float k_scale, v_scale;
};

// Whether draft key j (0-based among the request's draft tokens) lies in SGLang's tail sweep for draft token ti
// (a row of the request): keys past the draft tokens are never visible; without a custom mask, causality decides;
// under one, the mask's byte (draft_mask_index) decides within the sweep.
__device__ __forceinline__ bool draft_key_in_sweep(const KernelArgs& a, const SplitWork& w, int ti, int j) {
  if (a.mask != nullptr)
    // SGLang with is_causal stops each BLOCK_M query block's tail sweep at the block's end, even under a custom
    // mask (a tree mask has nothing above the diagonal, so this changes nothing).
    return j < w.ext && (!a.is_causal || j < (ti / kSglangBlockM + 1) * kSglangBlockM);
  return j < w.ext && (!a.is_causal || j <= ti);
}

// The custom mask's byte for draft token ti and draft key j: the tail columns of the token's row.
__device__ __forceinline__ int64_t draft_mask_index(const SplitWork& w, int ti, int j) {
  return w.mask_start + (int64_t)ti * (w.P + w.ext) + w.P + j;
}

// Whether draft key j is visible to row `grow` (draft token grow / H), as SGLang's tail sweep decides; rows past
// the request's last row see nothing.
__device__ __forceinline__ bool draft_key_visible(const KernelArgs& a, const SplitWork& w, int grow, int j) {
  if (grow >= w.rows_b) return false;
  const int ti = grow / a.H;
  return draft_key_in_sweep(a, w, ti, j) && (a.mask == nullptr || a.mask[draft_mask_index(w, ti, j)] != 0);
}

// This CTA's split: work item blockIdx.y of the plan, row tile blockIdx.x of m_tile rows (see SplitWork).
template <bool LONGEST_FIRST>
__device__ __forceinline__ bool decode_work(const KernelArgs& a, int m_tile, PlanSlot* plan, SplitWork& w) {
  // The tensor scales are read before the plan, so their loads overlap it.
  w.k_scale = a.k_scale_ptr != nullptr ? *a.k_scale_ptr : a.k_scale;
  w.v_scale = a.v_scale_ptr != nullptr ? *a.v_scale_ptr : a.v_scale;
  const WorkItem wk = plan_work_item<LONGEST_FIRST>(a, blockIdx.y, plan);
  if (wk.request < 0) return false;
  w.request = wk.request;
  w.splits = wk.splits;
  w.call_splits = wk.call_splits;
  w.qo_start = wk.idx.qo_start;
  const int ext = (int)(wk.idx.qo_end - wk.idx.qo_start);
  w.ext = ext < 0 ? 0 : (ext > a.T ? a.T : ext);
  w.rows_b = w.ext * a.H;
  w.row0 = blockIdx.x * m_tile;
  if (w.row0 >= w.rows_b) return false;
  w.kv_start = wk.idx.kv_start;
  w.P = (int)(wk.idx.kv_end - wk.idx.kv_start);
  w.key_begin = wk.key_begin;
  w.key_end = wk.key_end;
  w.slot = wk.slot;
  w.does_tail = wk.tail;
  w.mask_start = wk.idx.mask_start;
  return true;
}

// The point from which a main-kernel CTA may touch what the kernel before the call writes or reads: before it,
// only index tensors are read (the plan, the first row ids). Waits for that kernel (a no-op without early start),
// then returns false when the live-switch flags say this call writes nothing. Otherwise the CTA holding the
// request's last split in row tile 0 writes the request's entry for the combine, {splits, first partial slot}
// (every request with draft tokens has one such CTA; the combine skips the others).
__device__ __forceinline__ bool begin_output(const KernelArgs& a, const SplitWork& w) {
  grid_dependency_wait();
  if (output_choice(a) == kOutNone) return false;
  if (blockIdx.x == 0 && w.does_tail && threadIdx.x == 0)
    a.req[w.request] = make_int2(w.splits, w.splits > 1 ? w.slot - (w.splits - 1) : -1);
  return true;
}

// A pair of values as the 32 bits stored for them: fp16 (partials) or bf16 (the output), round to nearest.
__device__ __forceinline__ uint32_t pack_pair(float2 v, const __half*) {
  const __half2 h = __floats2half2_rn(v.x, v.y);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_pair(float2 v, const __nv_bfloat16*) { return pack_bf16x2(v.x, v.y); }

// Stores one row slice (an fp16 partial or the bf16 output) from the mma accumulator layout, where lane cq of a
// quad holds values 8 j + 2 cq and 8 j + 2 cq + 1 of the slice for j = 0 .. N - 1 (`pair(j)`, already scaled).
// Neighbouring lanes swap one pair of each two j, so that every lane stores 4 consecutive values (8 bytes) and each
// quad's store covers one whole 32-byte sector: stores of 4 bytes would write sectors by halves. `row` points at
// value 0 of the slice (8-byte aligned; a whole sector per quad where it starts on one); `lanes` are the lanes
// storing a row (whole quads).
template <int N, typename Elem, typename Pair>
__device__ __forceinline__ void store_row_sectors(unsigned lanes, Elem* row, int cq, Pair pair) {
  static_assert(N % 2 == 0, "values come in pairs of j");
  const bool odd = cq & 1;
  Elem* const dst = row + 2 * cq + (odd ? 6 : 0);
#pragma unroll
  for (int j = 0; j < N; j += 2) {
    const uint32_t mine_a = pack_pair(pair(j), row), mine_b = pack_pair(pair(j + 1), row);
    const uint32_t got = __shfl_xor_sync(lanes, odd ? mine_a : mine_b, 1);
    *reinterpret_cast<uint2*>(dst + j * 8) = odd ? make_uint2(got, mine_b) : make_uint2(mine_a, got);
  }
}

// Largest |value| of one row's slice over the 4 lanes of its quad, in the layout of store_row_sectors (`pair(j)`,
// unscaled).
template <int N, typename Pair>
__device__ __forceinline__ float row_abs_max(Pair pair) {
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float2 v = pair(j);
    m = fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y)));
  }
  return quad_max(m);
}

}  // namespace cutover
