// Hopper main kernel (sm_90a image only): the same work items, partials and combine as verify_main_kernel, with
// the two matrix products on warpgroup MMA (wgmma) reading their operands straight from shared memory.
//
// A CTA (two warpgroups, 256 threads) owns 64 rows of one request and one key range, in 64-key tiles:
//   S = Q K^T      warpgroup 0 computes all 64 x 64 scores (wgmma m64n64k16, 36 k-steps: Q is read from shared
//                  memory once, where two warpgroups of 32 keys each would both read it);
//   softmax        in warpgroup 0's registers; P (bf16) goes to a 128B-swizzled 64 x 64 buffer and each row's
//                  rescale factor to shared memory, for warpgroup 1's accumulators;
//   O += P V       warpgroup w owns value dims 256w..256w+255 (wgmma m64n256k16, V read transposed from the
//                  same K tile: V is the first 512 dims of each gathered row), fp32 in registers; with PARTS > 1
//                  the k-steps of a part of the keys start as soon as that part of P is written.
// Q (72 KB) and two KV stages (72 KB each) live in 128B-swizzled shared memory; while one tile is computed the
// next is gathered with cp.async (8 threads per row, both warpgroups). At the start both stages are free: in a
// call of few CTAs tile 1 is gathered together with Q and tile 0; where the CTAs fill half a wave or more, tile 0
// is requested alone and tile 1 follows S(0), as every later tile (tile1_with_q). The plan, the row ids of tiles
// 0 and 1 and the draft tail's mask bits come before the grid wait (with early start they overlap the kernel
// before the call), Q and every write after it. The draft tail is one more tile whose K rows come from k_extend;
// its V rows (v_extend) go to the other stage, free by then, while the tail's scores are computed; its visibility
// bits are read from the mask with the first row ids, before the loop, half by each warpgroup.
#pragma once

#include <cuda_bf16.h>
#include <math_constants.h>
#include <stdint.h>

#include "dependent_launch.cuh"
#include "mma_primitives.cuh"
#include "phase_clock.cuh"
#include "verify_args.cuh"
#include "verify_plan.cuh"
#include "verify_split.cuh"
#include "warp_reduce.cuh"
#include "wgmma_primitives.cuh"

namespace cutover {

struct WgmmaTiles {
  static constexpr int M_TILE = 64, N_TILE = 64, THREADS = 256;
  static constexpr int BLOCK_BYTES = 64 * 128;                        // 64 lines x 64 bf16: one column block
  static constexpr int TILE_BYTES = (kDimQK / 64) * BLOCK_BYTES;      // 64 rows x 576 dims
  static constexpr int OFF_Q = 0;
  static constexpr int OFF_KV = OFF_Q + TILE_BYTES;                   // 2 stages
  static constexpr int OFF_P = OFF_KV + 2 * TILE_BYTES;               // 64 x 64 bf16
  static constexpr int OFF_ALPHA = OFF_P + BLOCK_BYTES;               // [64] this tile's rescale factor per row
  static constexpr int OFF_L = OFF_ALPHA + M_TILE * 4;                // [64] row sums
  static constexpr int OFF_OMAX = OFF_L + M_TILE * 4;                 // [2][64] each warpgroup's largest |O| of a row
  static constexpr int OFF_IDX = OFF_OMAX + 2 * M_TILE * 4;           // [2][64] KV row ids of upcoming tiles
  static constexpr int SMEM_USED = OFF_IDX + 2 * N_TILE * 4;
  static constexpr int SMEM_BYTES = SMEM_USED + 1024;                 // slack: the base is aligned up to 1024
  static_assert(kSplitAlign % N_TILE == 0, "split boundaries must fall on tile boundaries");
};

// 16-byte global->shared copy to a shared address; src_bytes == 0 writes zeros and reads nothing. READ_ONCE:
// with the L2 eviction `policy` of l2_evict_first_policy (the line goes first when L2 needs room).
template <bool READ_ONCE = false>
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void* src, int src_bytes, uint64_t policy = 0) {
  if constexpr (READ_ONCE)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes), "l"(policy));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Gather the first NB 64-dim column blocks of one row into a 128B-swizzled tile, as one of the 8 threads of that
// row (16-byte piece q of every block). A warp's copy thus covers whole 128-byte lines of 4 rows, which an SM
// gathers about 3x faster from L2 than the half lines of 4 threads per row.
// Invalid rows are zero-filled from `dummy` (never read). READ_ONCE, policy: as cp_async16_to.
template <int NB, bool READ_ONCE = false>
__device__ __forceinline__ void gather_row(uint32_t tile, int row, int q, const __nv_bfloat16* src, bool valid,
                                           const __nv_bfloat16* dummy, uint64_t policy = 0) {
  const uint32_t line = tile + row * 128 + ((uint32_t)(q ^ (row & 7)) << 4);
  const char* from = reinterpret_cast<const char*>(valid ? src + q * 8 : dummy);
  const int step = valid ? 128 : 0, bytes = valid ? 16 : 0;
#pragma unroll
  for (int b = 0; b < NB; ++b)
    cp_async16_to<READ_ONCE>(line + b * WgmmaTiles::BLOCK_BYTES, from + b * step, bytes, policy);
}

// 2^x on the MUFU unit alone. exp2f adds a range check and two multiplies per call so that results below 2^-126
// come out as denormals; here they are 0, a difference of < 1e-37 in a softmax weight.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// How far (log2 units) a row's max may rise above its reference max before the reference moves. Weights up to 2^8
// add up in fp32 as exactly as weights up to 1, and bf16 rounds them with the same relative precision; only the
// largest weight is no longer exactly 1.
constexpr float kRebaseLog2 = 8.f;

// Which of this thread's tail scores in key groups j0 .. j0 + 3 are visible: bit j * 4 + hf * 2 + e is row
// grow0 + 8 hf, draft key lk0 + 8 j + e (the accumulator layout of m64n64, 32 scores per thread). Under a custom
// mask all 16 bytes are loaded before any is tested: a branch around each load would make every load wait for the
// one before. A key outside the sweep reads the request's first tail byte (token 0, key 0), which
// exists whenever the CTA has rows, and is not used.
__device__ __forceinline__ uint32_t tail_visibility(const KernelArgs& a, const SplitWork& w, int grow0, int lk0,
                                                    int j0) {
  bool in_sweep[2][4][2];
  uint8_t byte[2][4][2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int grow = grow0 + hf * 8, ti = grow / a.H;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = lk0 + (j0 + j) * 8 + e;
        in_sweep[hf][j][e] = grow < w.rows_b && draft_key_in_sweep(a, w, ti, key);
        if (a.mask != nullptr)
          byte[hf][j][e] = a.mask[in_sweep[hf][j][e] ? draft_mask_index(w, ti, key) : w.mask_start + w.P];
      }
  }
  uint32_t bits = 0;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (in_sweep[hf][j][e] && (a.mask == nullptr || byte[hf][j][e] != 0)) bits |= 1u << ((j0 + j) * 4 + hf * 2 + e);
  return bits;
}

// PARTS: the parts of each tile's 64 keys whose P V is issued as soon as their weights are written (1 or 4; the
// launch picks by the number of row tiles, verify_api.cu: 1 where one row tile reads each key, once).
template <typename IdxT, int PARTS, bool LONGEST_FIRST>
__device__ __forceinline__ void verify_wgmma_body(const KernelArgs& a);

template <typename IdxT, int PARTS, bool LONGEST_FIRST>
__global__ void __launch_bounds__(WgmmaTiles::THREADS, 1) verify_wgmma_kernel(const KernelArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  verify_wgmma_body<IdxT, PARTS, LONGEST_FIRST>(a);
#endif
}

template <typename IdxT, int PARTS, bool LONGEST_FIRST>
__device__ __forceinline__ void verify_wgmma_body(const KernelArgs& a) {
  static_assert(PARTS == 1 || PARTS == 2 || PARTS == 4, "a part is a whole number of 16-key P V k-steps");
  using C = WgmmaTiles;
  phase_mark(kPhaseMain, 0);
  grid_dependency_release();  // the combine may launch now; it waits for this grid before reading partials
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t sQ = smem_u32(smem + C::OFF_Q), sKV = smem_u32(smem + C::OFF_KV);
  const uint32_t sP = smem_u32(smem + C::OFF_P);
  float* sAlpha = reinterpret_cast<float*>(smem + C::OFF_ALPHA);
  float* sL = reinterpret_cast<float*>(smem + C::OFF_L);
  int* sIdx = reinterpret_cast<int*>(smem + C::OFF_IDX);  // row ids < 2^31 (a pool row is 1152 bytes)

  SplitWork w;
  static_assert(sizeof(PlanSlot) <= C::BLOCK_BYTES, "the plan's shared memory lives in the P buffer");
  if (!decode_work<LONGEST_FIRST>(a, C::M_TILE, reinterpret_cast<PlanSlot*>(smem + C::OFF_P), w)) return;
  phase_mark(kPhaseMain, 1);
  const int ext = w.ext, rows_b = w.rows_b, row0 = w.row0, H = a.H;
  const int key_begin = w.key_begin, key_end = w.key_end, slot = w.slot;
  const int64_t qo_start = w.qo_start;

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid & 127) >> 5, lane = tid & 31;
  const int g = lane >> 2, cq = lane & 3;
  const int r_lo = warp * 16 + g;  // this thread's accumulator rows: r_lo and r_lo + 8

  // Gather role of this thread: rows gr and gr + 32 of a 64-row tile, 16-byte piece gq of every column block.
  const int gr = tid >> 3, gq = tid & 7;
  constexpr int kBlocksK = kDimQK / 64, kBlocksV = kDimV / 64;

  const int n_tiles = (key_end - key_begin + C::N_TILE - 1) / C::N_TILE;
  const int n_iter = n_tiles + (w.does_tail ? 1 : 0);  // the draft tail is the last tile
  const IdxT* kv_indices = static_cast<const IdxT*>(a.kv_indices);
  // The one-part kernel runs where a single row tile streams the split's keys from HBM (verify_api.cu), so each
  // key row is read once: its lines are gathered evict-first (a third less copy wait per tile). Where several
  // row tiles share a split, the others re-read the keys from L2.
  constexpr bool kKeysReadOnce = PARTS == 1;
  const uint64_t kv_policy = kKeysReadOnce ? l2_evict_first_policy() : 0;
  auto row_id = [&](int kt, int r) -> int {
    const int key = key_begin + kt * C::N_TILE + r;
    return kt < n_tiles && key < key_end ? (int)kv_indices[w.kv_start + key] : 0;
  };
  // Gather tile `it` into a stage: prefix rows by the ids in sIdx[it & 1], or the draft tokens' K rows.
  auto load_tile = [&](int it, int stage) {
    const uint32_t dst = sKV + stage * C::TILE_BYTES;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = gr + 32 * hr;
      if (it >= n_tiles)
        gather_row<kBlocksK>(dst, r, gq, a.kx + (qo_start + r) * a.skx, r < ext, a.kx);
      else
        gather_row<kBlocksK, kKeysReadOnce>(dst, r, gq, a.kv + (int64_t)sIdx[(it & 1) * C::N_TILE + r] * a.skv,
                                            key_begin + it * C::N_TILE + r < key_end, a.kv, kv_policy);
    }
  };

  // The row ids of tiles 0 and 1 are held in registers until the mask's loads below are issued: stored to shared
  // memory first, they would make those loads wait for them (0.2-0.4 us on a CTA with the tail).
  const int first_id0 = tid < C::N_TILE ? row_id(0, tid) : 0, first_id1 = tid < C::N_TILE ? row_id(1, tid) : 0;
  // The draft tail's visibility bits for warpgroup 0's scores: each warpgroup reads the mask for half of the keys,
  // and warpgroup 1 passes its half through the P buffer (free until the first softmax).
  const bool scores = wg == 0;  // this warpgroup computes S and the softmax
  uint32_t tail_vis = w.does_tail ? tail_visibility(a, w, row0 + r_lo, 2 * cq, wg * 4) : 0u;
  if (tid < C::N_TILE) {
    sIdx[tid] = first_id0;
    sIdx[C::N_TILE + tid] = first_id1;
  }
  uint32_t* const sVis = reinterpret_cast<uint32_t*>(smem + C::OFF_P);
  if (w.does_tail && !scores) sVis[tid & 127] = tail_vis;
  __syncthreads();
  if (w.does_tail && scores) tail_vis |= sVis[tid];
  if (!begin_output(a, w)) return;
  phase_mark(kPhaseMain, 2);
  // Q tile (rows past the request's last row are zero), in the first copy group with tile 0.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int grow = row0 + gr + 32 * hr, t = grow / H, h = grow - t * H;
    gather_row<kBlocksK>(sQ, gr + 32 * hr, gq, a.q + (qo_start + t) * a.sq0 + (int64_t)h * a.sq1, grow < rows_b, a.q);
  }
  // Tile 1 with Q and tile 0 saves a copy round trip where the memory system has bandwidth to spare (a call of
  // few CTAs). Where the CTAs fill half a wave or more, their gathers compete for it: tile 0 requested alone
  // lands ~2 us sooner and tile 1 streams while tile 0 is computed.
  const bool tile1_with_q = w.call_splits < a.G_target / 2;
  if (n_iter > 0) load_tile(0, 0);
  cp_async_commit();
  if (tile1_with_q) {
    if (n_iter > 1) load_tile(1, 1);
    cp_async_commit();
  }
  int next_id = tid < C::N_TILE ? row_id(2, tid) : 0;  // ids of tile it + 2, stored once slot it & 1 is free

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  float m_run[2] = {-CUDART_INF_F, -CUDART_INF_F}, l_run[2] = {0.f, 0.f};
  const float prefix_scale = a.sm_scale * w.k_scale * 1.4426950408889634f;
  const float tail_scale = a.sm_scale * 1.4426950408889634f;
  const bool scale_positive = prefix_scale > 0.f;
  const uint64_t desc_q = desc_k_major(sQ), desc_p = desc_k_major(sP);

  PhaseLoopWaits waits;  // profiling builds only (phase_clock.cuh)
  // Per tile: S(it) runs on the tensor cores while the next tile's gather is issued; P V(it) is left running
  // into the next iteration's wait for its tile. Warpgroup 1 waits at the barrier before P V while warpgroup 0
  // computes S and the softmax.
  for (int it = 0; it < n_iter; ++it) {
    const int stage = it & 1;
    const uint32_t sK = sKV + stage * C::TILE_BYTES;
    const bool tail = it >= n_tiles;
    waits.start();
    if (it == 0 && tile1_with_q) cp_async_wait<1>();  // Q and tile 0 (tile 1 may still be in flight)
    else cp_async_wait<0>();
    waits.copies_done();
    wgmma_wait<0>();  // P V of the previous tile
    fence_operands(acc);
    waits.pv_done();
    fence_proxy_async();
    __syncthreads();  // tile `it` visible to wgmma; the other stage, P and the factors are free
    waits.barrier_done();
    if (it == 0) phase_mark(kPhaseMain, 3);
    if (tail) phase_mark(kPhaseMain, 4);

    // S = Q K^T for the tile's 64 keys (asynchronous, warpgroup 0), then the next tile's gather.
    float s[32];
    if (scores) {
      wgmma_fence();
      const uint64_t desc_k = desc_k_major(sK);
#pragma unroll
      for (int kk = 0; kk < kDimQK / 16; ++kk) {
        const uint64_t off = (uint64_t)(((kk >> 2) * C::BLOCK_BYTES + (kk & 3) * 32) >> 4);
        wgmma_m64n64k16_kk(s, desc_q + off, desc_k + off, kk > 0);
      }
      wgmma_commit();
    }
    if (tail) {  // the draft V rows to the other stage (its P V is done; no tile follows the tail)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = gr + 32 * hr;
        gather_row<kBlocksV>(sKV + (stage ^ 1) * C::TILE_BYTES, r, gq, a.vx + (qo_start + r) * a.svx, r < ext, a.vx);
      }
    } else if (it + 1 < n_iter && (it > 0 || !tile1_with_q)) {
      load_tile(it + 1, stage ^ 1);
    }
    cp_async_commit();
    if (tid < C::N_TILE) {
      sIdx[stage * C::N_TILE + tid] = next_id;
      next_id = row_id(it + 3, tid);
    }
    // Softmax and P V in PARTS parts of the tile's keys: warpgroup 0 first takes the row maxima over all
    // 64 keys (the reference max and the rescale factors), then writes P part by part; after each part both
    // warpgroups issue the P V k-steps that read it, so the tensor cores multiply part q while warpgroup 0
    // computes the weights of part q + 1. The warpgroups pass the same barriers from their own branches (a
    // barrier counts warps): warpgroup 0 reads its scores only where it waited for them, as ptxas requires to
    // keep the wgmma pipeline.
    const uint32_t sV = tail ? sKV + (stage ^ 1) * C::TILE_BYTES : sK;
    const uint64_t desc_v = desc_mn_major(sV + wg * 4 * C::BLOCK_BYTES, C::BLOCK_BYTES);
    constexpr int kGroupsPerPart = 8 / PARTS;  // 8-key groups of P per part
    float alpha[2] = {1.f, 1.f};  // this tile's rescale factors (warpgroup 1 reads them after the first part)
    // This part of P (with the factors and the draft V rows) visible to both warpgroups' wgmma.
    // sync_block, not __syncthreads (aligned: every thread at one instruction): each warpgroup has its own branch.
    auto part_ready = [&](int part) {
      if (part == 0 && tail) cp_async_wait<0>();
      fence_proxy_async();
      sync_block();
    };
    // O += P V over this part's keys and this warpgroup's 256 value dims (the first part rescales the
    // accumulators first); the last part completes during the next iteration's wait. The accumulators are
    // fenced once: between the parts' issues they belong to the tensor cores.
    auto issue_pv = [&](int part) {
      if (part == 0) {
        if (__any_sync(kFullWarp, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
          for (int j = 0; j < 32; ++j) {
            acc[j * 4 + 0] *= alpha[0]; acc[j * 4 + 1] *= alpha[0];
            acc[j * 4 + 2] *= alpha[1]; acc[j * 4 + 3] *= alpha[1];
          }
        }
        fence_operands(acc);
      }
      wgmma_fence();
#pragma unroll
      for (int ks = part * kGroupsPerPart / 2; ks < (part + 1) * kGroupsPerPart / 2; ++ks)
        wgmma_m64n256k16_kmn(acc, desc_p + (uint64_t)((ks * 32) >> 4), desc_v + (uint64_t)((ks * 2048) >> 4));
    };
    if (scores) {
      wgmma_wait<0>();
      fence_operands(s);

      // Scale (log2 domain), mask (only a split's last prefix tile can be partial), row maxima (each row's 64
      // scores lie in one quad). A full prefix tile under a positive scale keeps its raw scores: the scale then
      // goes into the row max (the max of raw scores times a positive scale is the max of the scaled ones) and
      // into each weight's exponent as one FFMA.
      const int keys_left = key_end - key_begin - it * C::N_TILE;
      const bool full_tile = !tail && keys_left >= C::N_TILE;
      const float s_scale = full_tile && scale_positive ? prefix_scale : 1.f;
      if (full_tile && !scale_positive) {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] *= prefix_scale;
      } else if (!full_tile && !tail) {
        const int lim = keys_left - 2 * cq;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[j * 4 + e] = j * 8 + (e & 1) < lim ? s[j * 4 + e] * prefix_scale : -CUDART_INF_F;
      } else if (tail) {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = (tail_vis >> i) & 1u ? s[i] * tail_scale : -CUDART_INF_F;
      }
      // Online softmax: new row max and rescale factor.
      float neg_m[2], lsum[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx = -CUDART_INF_F;
#pragma unroll
        for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[j * 4 + hf * 2], s[j * 4 + hf * 2 + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 2)) * s_scale;
        // On a prefix tile the reference max moves only when this tile's max exceeds it by more than
        // kRebaseLog2 (or it is still -inf): the weights stay below 2^kRebaseLog2 and the accumulators are
        // rescaled far less often. The tail tile moves it to the running max, as SGLang does.
        const bool rebase = mx > m_run[hf] + (tail ? 0.f : kRebaseLog2);
        const float m_ref = rebase ? mx : m_run[hf];
        neg_m[hf] = m_ref == -CUDART_INF_F ? 0.f : -m_ref;
        alpha[hf] = rebase ? exp2_ftz(m_run[hf] + neg_m[hf]) : 1.f;
        m_run[hf] = m_ref;
        lsum[hf] = l_run[hf] * alpha[hf];
        // v_scale multiplies the prefix P V only (SGLang: acc += dot(p, v) * v_scale for pool values).
        if (tail) alpha[hf] *= w.v_scale;
        if (cq == 0) sAlpha[r_lo + hf * 8] = alpha[hf];
      }
#pragma unroll
      for (int part = 0; part < PARTS; ++part) {
        // P (bf16, as SGLang's p.to(v.dtype)) of this part's keys into shared memory.
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
          for (int j = part * kGroupsPerPart; j < (part + 1) * kGroupsPerPart; ++j) {
            const float p0 = exp2_ftz(fmaf(s[j * 4 + hf * 2], s_scale, neg_m[hf]));
            const float p1 = exp2_ftz(fmaf(s[j * 4 + hf * 2 + 1], s_scale, neg_m[hf]));
            lsum[hf] += p0 + p1;
            *reinterpret_cast<uint32_t*>(smem + C::OFF_P + swizzle128(r_lo + hf * 8, j) + cq * 4) = pack_bf16x2(p0, p1);
          }
        }
        part_ready(part);
        issue_pv(part);
      }
      wgmma_commit();
      l_run[0] = lsum[0];
      l_run[1] = lsum[1];
    } else {
#pragma unroll
      for (int part = 0; part < PARTS; ++part) {
        part_ready(part);
        if (part == 0) {
          alpha[0] = sAlpha[r_lo];
          alpha[1] = sAlpha[r_lo + 8];
        }
        issue_pv(part);
      }
      wgmma_commit();
    }
  }
  wgmma_wait<0>();
  fence_operands(acc);
  cp_async_wait<0>();
  phase_mark(kPhaseMain, 5);
  if (!w.does_tail) {
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] *= w.v_scale;
  }

  // Row sums (warpgroup 0's): across the quad. Each warpgroup's largest |O| of a row, for the scale of an fp16
  // partial.
  if (scores) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = l_run[hf];
      l += __shfl_xor_sync(kFullWarp, l, 1);
      l += __shfl_xor_sync(kFullWarp, l, 2);
      if (cq == 0) sL[r_lo + hf * 8] = l;
    }
  }
  float* const sOmax = reinterpret_cast<float*>(smem + C::OFF_OMAX);
  if (slot >= 0) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float m = row_abs_max<32>([&](int j) { return make_float2(acc[j * 4 + hf * 2], acc[j * 4 + hf * 2 + 1]); });
      if (cq == 0) sOmax[wg * C::M_TILE + r_lo + hf * 8] = m;
    }
  }
  __syncthreads();

  // The flags cannot change during the call (the gate wrote them before): read again instead of keeping
  // the choice in registers through the main loop.
  const bool to_alt = slot < 0 && output_choice(a) == kOutAlt;
  __nv_bfloat16* const out = to_alt ? a.o_alt : a.o;
  const int64_t out_s0 = to_alt ? a.sa0 : a.so0, out_s1 = to_alt ? a.sa1 : a.so1;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int lr = r_lo + hf * 8, grow = row0 + lr;
    const unsigned lanes = __ballot_sync(kFullWarp, grow < rows_b);
    if (grow >= rows_b) continue;
    const float l = sL[lr];
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: 0, as SGLang (acc / 1 with acc == 0)
    if (slot < 0) {
      const int t = grow / H, h = grow - t * H;
      store_row_sectors<32>(lanes, out + (qo_start + t) * out_s0 + (int64_t)h * out_s1 + wg * 256, cq,
                            [&](int j) {
                              return make_float2(acc[j * 4 + hf * 2] * inv, acc[j * 4 + hf * 2 + 1] * inv);
                            });
    } else {
      const int e = partial_exponent(fmaxf(sOmax[lr], sOmax[C::M_TILE + lr]) * inv);
      const float f = inv * pow2i(-e);
      store_row_sectors<32>(lanes, a.part_o + ((int64_t)slot * a.rcap + grow) * kDimV + wg * 256, cq,
                            [&](int j) { return make_float2(acc[j * 4 + hf * 2] * f, acc[j * 4 + hf * 2 + 1] * f); });
      if (wg == 0 && cq == 0)
        a.part_lse[(int64_t)slot * a.rcap + grow] =
            make_float2(l > 0.f ? m_run[hf] + log2f(l) : -CUDART_INF_F, (float)e);
    }
  }
  phase_mark(kPhaseMain, 6);
  waits.store(kPhaseMain);
}

}  // namespace cutover
