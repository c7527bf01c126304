// The split-KV main kernel on mma.sync (m16n8k16 bf16, fp32 accumulate): sm_120's main kernel (small tiles), and
// large tiles for parts below compute capability 12.0 with ~190 KB of shared memory per block (on sm_90 the wgmma
// kernel serves; config 1 picks the large tiles there for tests and benchmarks).
//
// A CTA owns one tile of M_TILE rows and one key range (split) of the request's prefix; it streams the gathered KV
// rows through shared memory (cp.async, STAGES deep), computes S = Q K^T and O += P V with mma.sync, online softmax
// in fp32 (log2 domain). The CTA holding the last split of a request also attends to the draft tail (T keys from
// k_extend/v_extend under the custom mask). A request served by one split writes o directly; otherwise each split
// writes a normalised fp16 partial plus its log-sum-exp, which the combine merges (verify_combine.cuh).
// grid = (row tiles, G): the row tiles of one split run side by side, so a split's KV rows are fetched from HBM
// once and re-read from L2 by the other row tiles. With early start the main kernel is a programmatic dependent of
// the kernel before it (grid_dependency_wait after its plan, in begin_output); the combine always is the main
// kernel's (grid_dependency_wait at the combine's start).
#pragma once

#include <cuda_bf16.h>
#include <math_constants.h>
#include <stdint.h>

#include "dependent_launch.cuh"
#include "mma_primitives.cuh"
#include "verify_args.cuh"
#include "verify_plan.cuh"
#include "verify_split.cuh"
#include "warp_reduce.cuh"

namespace cutover {

constexpr int kRowChunks = kDimQK * 2 / 16;  // 16-byte chunks per K row
constexpr int kVChunks = kDimV * 2 / 16;     // 16-byte chunks per V row

template <int M_TILE_, int N_TILE_, int STAGES_, int WS_M_, int WS_N_, bool ROLES_, int WO_M_, int WO_D_>
struct TileConfig {
  static constexpr int M_TILE = M_TILE_, N_TILE = N_TILE_, STAGES = STAGES_;
  static constexpr int WS_M = WS_M_, WS_N = WS_N_;  // warp grid of S = Q K^T (rows x keys)
  static constexpr int WO_M = WO_M_, WO_D = WO_D_;  // warp grid of O = P V (rows x value dims)
  // Without ROLES every warp computes both S and O, in sequence. With ROLES the S warps (scorers: S and the
  // softmax of tile k) and the O warps (accumulators: P V of tile k - 1, then the gather of tile k + STAGES - 1
  // into its stage) are different warps working side by side, and P and the rescale factors are double-buffered.
  static constexpr bool ROLES = ROLES_;
  static constexpr int kScorersBarrier = 1, kAccumulatorsBarrier = 2;  // named barriers of the roles (0: the block)
  static constexpr int S_WARPS = WS_M * WS_N, O_WARPS = WO_M * WO_D;
  static constexpr int WARPS = ROLES ? S_WARPS + O_WARPS : S_WARPS;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int GATHER_THREADS = O_WARPS * 32;  // the O warps copy the KV tiles
  static constexpr int P_BUFFERS = ROLES ? 2 : 1;
  // Independent mma chains a warp spreads S's 36 k-steps over. With ROLES the scorers' S is a tile's longest
  // path, and one 16 x 8 fragment per warp would be one chain of 36 dependent mma.sync.
  static constexpr int S_CHAINS = ROLES ? 2 : 1;
  // K-steps of Q a scorer keeps in registers as mma A fragments for the whole split (4 per k-step) instead of
  // reading them from shared memory for every tile; the rest it reads with ldmatrix.
  static constexpr int Q_REG_STEPS = ROLES ? 28 : 0;
  static constexpr int LD = kDimQK + 8;  // padded smem row (elements): 8 rows of ldmatrix hit distinct banks
  static constexpr int P_LD = N_TILE + 8;
  static constexpr int S_ROWS = M_TILE / WS_M, S_COLS = N_TILE / WS_N;
  static constexpr int MT_S = S_ROWS / 16, NT_S = S_COLS / 8;
  static constexpr int O_ROWS = M_TILE / WO_M, O_DIMS = kDimV / WO_D;
  static constexpr int MT_O = O_ROWS / 16, NT_O = O_DIMS / 8;
  static constexpr int OFF_Q = 0;
  static constexpr int OFF_KV = OFF_Q + M_TILE * LD * 2;
  static constexpr int OFF_P = OFF_KV + STAGES * N_TILE * LD * 2;             // [P_BUFFERS][M_TILE][P_LD] P
  static constexpr int OFF_RED = OFF_P + P_BUFFERS * M_TILE * P_LD * 2;       // [WS_N][M_TILE] partial row max
  static constexpr int OFF_ALPHA = OFF_RED + WS_N * M_TILE * 4;               // [P_BUFFERS][M_TILE] rescale factor
  static constexpr int OFF_LRED = OFF_ALPHA + P_BUFFERS * M_TILE * 4;         // [WS_N][M_TILE] partial row sum
  static constexpr int OFF_MFIN = OFF_LRED + WS_N * M_TILE * 4;               // [M_TILE] final row max
  static constexpr int OFF_OMAX = OFF_MFIN + M_TILE * 4;                      // [WO_D][M_TILE] largest |O| of a slice
  static constexpr int OFF_IDX = OFF_OMAX + WO_D * M_TILE * 4;                // [2][N_TILE] KV row ids of next tiles
  static constexpr int SMEM_BYTES = (OFF_IDX + 2 * N_TILE * 8 + 15) / 16 * 16;
  static_assert(ROLES || O_WARPS == S_WARPS, "without ROLES, S and O warp grids must use the same warps");
  static_assert(S_ROWS % 16 == 0 && S_COLS % 8 == 0 && N_TILE % 16 == 0, "tile shape");
  static_assert(O_ROWS % 16 == 0 && NT_O % 2 == 0, "O tile shape");
  static_assert(kSplitAlign % N_TILE == 0, "split alignment");
};

// sm_90 class (227 KB shared memory per block): 64 rows x 32 keys, 3 stages, 8 warps, ~190 KB.
using LargeTiles = TileConfig<64, 32, 3, 4, 2, false, 2, 4>;
// sm_120 class (~99 KB per block): 32 rows x 16 keys, 3 stages, 4 scorer warps and 4 accumulator warps, ~96 KB.
// Three stages, because with two a tile's gather would have only the softmax before it to land.
using SmallTiles = TileConfig<32, 16, 3, 2, 2, true, 2, 2>;
static_assert(SmallTiles::SMEM_BYTES <= 99 * 1024, "sm_120 allows 99 KB of shared memory per block");

template <class C, typename IdxT, bool LONGEST_FIRST>
__device__ __forceinline__ void verify_main_body(const KernelArgs& a);

// sm_120-class parts have ~99 KB of shared memory per block: the host never launches the large tiles there,
// so their body is not compiled for them (it would not fit the register budget either).
constexpr int kSm120SmemPerBlock = 101376;

template <class C, typename IdxT, bool LONGEST_FIRST>
__global__ void __launch_bounds__(C::THREADS, 1) verify_main_kernel(const KernelArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  if constexpr (C::SMEM_BYTES > kSm120SmemPerBlock) return;
  else verify_main_body<C, IdxT, LONGEST_FIRST>(a);
#else
  verify_main_body<C, IdxT, LONGEST_FIRST>(a);
#endif
}

template <class C, typename IdxT, bool LONGEST_FIRST>
__device__ __forceinline__ void verify_main_body(const KernelArgs& a) {
  grid_dependency_release();  // the combine may launch now; it waits for this grid before reading partials
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + C::OFF_Q);
  __nv_bfloat16* sKV = reinterpret_cast<__nv_bfloat16*>(smem + C::OFF_KV);
  __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + C::OFF_P);
  float* sRed = reinterpret_cast<float*>(smem + C::OFF_RED);
  float* sAlpha = reinterpret_cast<float*>(smem + C::OFF_ALPHA);
  float* sLred = reinterpret_cast<float*>(smem + C::OFF_LRED);
  float* sMfin = reinterpret_cast<float*>(smem + C::OFF_MFIN);
  float* sOmax = reinterpret_cast<float*>(smem + C::OFF_OMAX);
  int64_t* sIdx = reinterpret_cast<int64_t*>(smem + C::OFF_IDX);

  SplitWork w;
  static_assert(sizeof(PlanSlot) <= C::M_TILE * C::P_LD * 2, "the plan's shared memory lives in the P buffer");
  if (!decode_work<LONGEST_FIRST>(a, C::M_TILE, reinterpret_cast<PlanSlot*>(smem + C::OFF_P), w)) return;
  if (!begin_output(a, w)) return;
  const int ext = w.ext, rows_b = w.rows_b, row0 = w.row0, H = a.H;
  const int key_begin = w.key_begin, key_end = w.key_end, slot = w.slot;
  const int64_t qo_start = w.qo_start;
  const IdxT* kv_indices = static_cast<const IdxT*>(a.kv_indices);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
  // With ROLES the first S_WARPS warps score and the others accumulate and gather; without, every warp does all
  // (compile-time constants there, so the role tests fold away).
  const bool scorer = !C::ROLES || warp < C::S_WARPS, accumulator = !C::ROLES || warp >= C::S_WARPS;
  const int owarp = C::ROLES ? warp - C::S_WARPS : warp;  // index among the O warps
  const int ws_m = warp % C::WS_M, ws_n = warp / C::WS_M;
  const int wo_m = owarp % C::WO_M, wo_d = owarp / C::WO_M;
  // The tile row of this thread's m16n8 accumulator fragment (row tile mt, half hf) among its S warp's rows.
  auto s_row = [&](int mt, int hf) { return ws_m * C::S_ROWS + mt * 16 + g + hf * 8; };
  const int gtid = C::ROLES ? tid - C::S_WARPS * 32 : tid;  // index among the gatherers
  auto sync_scorers = [] { sync_threads_of(C::kScorersBarrier, C::S_WARPS * 32); };
  auto sync_accumulators = [] { sync_threads_of(C::kAccumulatorsBarrier, C::O_WARPS * 32); };

  // Q tile (zero rows past the request's last row), copied by the scorers.
  if (scorer) {
    for (int i = tid; i < C::M_TILE * kRowChunks; i += C::S_WARPS * 32) {
      const int r = i / kRowChunks, ch = i - r * kRowChunks, grow = row0 + r;
      const __nv_bfloat16* src = a.q;
      int bytes = 0;
      if (grow < rows_b) {
        const int t = grow / H, h = grow - t * H;
        src = a.q + (qo_start + t) * a.sq0 + (int64_t)h * a.sq1 + ch * 8;
        bytes = 16;
      }
      cp_async16(sQ + r * C::LD + ch * 8, src, bytes);
    }
  }

  const int n_tiles = (key_end - key_begin + C::N_TILE - 1) / C::N_TILE;
  // Row id of key r of prefix tile kt (0 past the split's end; such rows are zero-filled, never read).
  auto row_id = [&](int kt, int r) -> int64_t {
    const int key = key_begin + kt * C::N_TILE + r;
    return key < key_end ? (int64_t)kv_indices[w.kv_start + key] : 0;
  };
  // Gather prefix tile kt into a stage; `ids` are its row ids (global memory in the prologue, then the
  // shared ring, filled one tile ahead so no load in this loop waits on an index). GATHER_THREADS / N_TILE
  // consecutive gatherer threads copy a row in whole 128-byte lines: one row id and one address per thread, its
  // pieces at fixed offsets (per-piece address arithmetic would take ~20 % of the small tiles' time).
  static_assert(C::GATHER_THREADS % C::N_TILE == 0 && kRowChunks % (C::GATHER_THREADS / C::N_TILE) == 0,
                "gather layout");
  constexpr int kRowThreads = C::GATHER_THREADS / C::N_TILE;
  auto load_prefix_tile = [&](int kt, int stage, const int64_t* ids) {  // accumulators only
    const int r = gtid / kRowThreads, c0 = gtid % kRowThreads;
    const bool valid = key_begin + kt * C::N_TILE + r < key_end;
    const __nv_bfloat16* src = valid ? a.kv + (ids != nullptr ? ids[r] : row_id(kt, r)) * a.skv + c0 * 8 : a.kv;
    __nv_bfloat16* dst = sKV + (stage * C::N_TILE + r) * C::LD + c0 * 8;
#pragma unroll
    for (int j = 0; j < kRowChunks / kRowThreads; ++j)
      cp_async16(dst + j * kRowThreads * 8, valid ? src + j * kRowThreads * 8 : a.kv, valid ? 16 : 0);
  };

  float acc[C::MT_O][C::NT_O][4];
#pragma unroll
  for (int mt = 0; mt < C::MT_O; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::NT_O; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
  float m_run[C::MT_S][2], l_run[C::MT_S][2];
#pragma unroll
  for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) { m_run[mt][hf] = -CUDART_INF_F; l_run[mt][hf] = 0.f; }

  float s[C::MT_S][C::NT_S][4];  // scores of the tile in flight between `scores` and `softmax`
  uint32_t qf[C::Q_REG_STEPS > 0 ? C::Q_REG_STEPS : 1][C::MT_S][4];  // a scorer's Q_REG_STEPS k-steps of Q
  auto q_fragment_address = [&](int ks, int mt) {
    return sQ + (ws_m * C::S_ROWS + mt * 16 + (lane & 15)) * C::LD + ks * 16 + (lane >> 4) * 8;
  };
  auto load_q_fragments = [&]() {
#pragma unroll
    for (int ks = 0; ks < C::Q_REG_STEPS; ++ks)
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt) ldmatrix_x4(qf[ks][mt], q_fragment_address(ks, mt));
  };

  // S = Q K^T over one stage, scaled (log2 domain), masked; partial row maxima into sRed. `tail` tiles take
  // their keys from the draft tokens under the custom mask. Scorers only.
  auto scores = [&](int stage, int nvalid, bool tail, int tail_key0, float scale_log2) {
    const __nv_bfloat16* sK = sKV + stage * C::N_TILE * C::LD;
    float chain[C::S_CHAINS][C::MT_S][C::NT_S][4];  // k-step ks accumulates into chain ks % S_CHAINS
#pragma unroll
    for (int c = 0; c < C::S_CHAINS; ++c)
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) chain[c][mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kDimQK / 16; ++ks) {
      uint32_t af[C::MT_S][4];
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt) {
        if (ks < C::Q_REG_STEPS) {
#pragma unroll
          for (int e = 0; e < 4; ++e) af[mt][e] = qf[ks][mt][e];
        } else {
          ldmatrix_x4(af[mt], q_fragment_address(ks, mt));
        }
      }
      uint32_t bfr[C::NT_S][2];
      if constexpr (C::NT_S % 2 == 0) {
#pragma unroll
        for (int np = 0; np < C::NT_S / 2; ++np) {
          uint32_t r[4];
          ldmatrix_x4(r, sK + (ws_n * C::S_COLS + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * C::LD + ks * 16 +
                             ((lane >> 3) & 1) * 8);
          bfr[2 * np][0] = r[0]; bfr[2 * np][1] = r[1];
          bfr[2 * np + 1][0] = r[2]; bfr[2 * np + 1][1] = r[3];
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt)
          ldmatrix_x2(bfr[nt], sK + (ws_n * C::S_COLS + nt * 8 + (lane & 7)) * C::LD + ks * 16 + ((lane >> 3) & 1) * 8);
      }
#pragma unroll
      for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt)
          mma_bf16_16816(chain[ks % C::S_CHAINS][mt][nt], af[mt], bfr[nt][0], bfr[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < C::MT_S; ++mt)
#pragma unroll
      for (int nt = 0; nt < C::NT_S; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = chain[0][mt][nt][e];
#pragma unroll
          for (int c = 1; c < C::S_CHAINS; ++c) v += chain[c][mt][nt][e];
          s[mt][nt][e] = v;
        }
    // Scale, mask, partial row max.
#pragma unroll
    for (int mt = 0; mt < C::MT_S; ++mt) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int lr = s_row(mt, hf), grow = row0 + lr;
        float mx = -CUDART_INF_F;
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int lk = ws_n * C::S_COLS + nt * 8 + 2 * cq + e;
            bool vis = lk < nvalid;
            if (tail && vis) vis = draft_key_visible(a, w, grow, tail_key0 + lk);
            const float v = vis ? s[mt][nt][hf * 2 + e] * scale_log2 : -CUDART_INF_F;
            s[mt][nt][hf * 2 + e] = v;
            mx = fmaxf(mx, v);
          }
        }
        mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 2));
        if (cq == 0) sRed[ws_n * C::M_TILE + lr] = mx;
      }
    }
  };

  // Online softmax of `s`: new row max, rescale factor, P (bf16, as SGLang's p.to(v.dtype)) into P buffer `buf`.
  auto softmax = [&](int buf) {
    __nv_bfloat16* const sPb = sP + buf * C::M_TILE * C::P_LD;
#pragma unroll
    for (int mt = 0; mt < C::MT_S; ++mt) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int lr = s_row(mt, hf);
        float mtile = sRed[lr];
#pragma unroll
        for (int w = 1; w < C::WS_N; ++w) mtile = fmaxf(mtile, sRed[w * C::M_TILE + lr]);
        const float m_new = fmaxf(m_run[mt][hf], mtile);
        const float m_use = m_new == -CUDART_INF_F ? 0.f : m_new;
        const float alpha = exp2f(m_run[mt][hf] - m_use);
        m_run[mt][hf] = m_new;
        float lsum = l_run[mt][hf] * alpha;
#pragma unroll
        for (int nt = 0; nt < C::NT_S; ++nt) {
          const float p0 = exp2f(s[mt][nt][hf * 2] - m_use), p1 = exp2f(s[mt][nt][hf * 2 + 1] - m_use);
          lsum += p0 + p1;
          const int lk = ws_n * C::S_COLS + nt * 8 + 2 * cq;
          *reinterpret_cast<uint32_t*>(sPb + lr * C::P_LD + lk) = pack_bf16x2(p0, p1);
        }
        l_run[mt][hf] = lsum;
        if (ws_n == 0 && cq == 0) sAlpha[buf * C::M_TILE + lr] = alpha;
      }
    }
  };

  // O = O * alpha + P V over one stage (P and alpha from P buffer `buf`).
  auto accumulate_pv = [&](int stage, int buf) {
    const __nv_bfloat16* sK = sKV + stage * C::N_TILE * C::LD;
    const __nv_bfloat16* const sPb = sP + buf * C::M_TILE * C::P_LD;
    const float* const sAlphab = sAlpha + buf * C::M_TILE;
    // O = O * alpha + P V.
#pragma unroll
    for (int mt = 0; mt < C::MT_O; ++mt) {
      const float al0 = sAlphab[wo_m * C::O_ROWS + mt * 16 + g], al1 = sAlphab[wo_m * C::O_ROWS + mt * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < C::NT_O; ++nt) {
        acc[mt][nt][0] *= al0; acc[mt][nt][1] *= al0;
        acc[mt][nt][2] *= al1; acc[mt][nt][3] *= al1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < C::N_TILE / 16; ++ks) {
      uint32_t pa[C::MT_O][4];
#pragma unroll
      for (int mt = 0; mt < C::MT_O; ++mt)
        ldmatrix_x4(pa[mt], sPb + (wo_m * C::O_ROWS + mt * 16 + (lane & 15)) * C::P_LD + ks * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < C::NT_O / 2; ++np) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, sK + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::LD + wo_d * C::O_DIMS +
                                 np * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < C::MT_O; ++mt) {
          mma_bf16_16816(acc[mt][2 * np], pa[mt], r[0], r[1]);
          mma_bf16_16816(acc[mt][2 * np + 1], pa[mt], r[2], r[3]);
        }
      }
    }
  };

  // Prefix keys of this split, software-pipelined: iteration kt computes P V of tile kt-1 and S of tile kt, and
  // issues the gather of tile kt + STAGES - 1 into tile kt-1's stage. The cp.async ring runs STAGES deep; the Q
  // tile rides in the first group.
  const float prefix_scale = a.sm_scale * w.k_scale * 1.4426950408889634f;
#pragma unroll
  for (int st = 0; st < C::STAGES - 1; ++st) {
    if (accumulator && st < n_tiles) load_prefix_tile(st, st, nullptr);
    cp_async_commit();
  }
  int64_t next_id = 0;  // row id of key `gtid` of tile kt + STAGES, loaded one iteration before it is stored
  if (accumulator && gtid < C::N_TILE) {
    sIdx[((C::STAGES - 1) & 1) * C::N_TILE + gtid] = C::STAGES - 1 < n_tiles ? row_id(C::STAGES - 1, gtid) : 0;
    next_id = C::STAGES < n_tiles ? row_id(C::STAGES, gtid) : 0;
  }
  // In iteration kt: gather tile kt + STAGES - 1 into its stage (free by now), and keep the row-id ring one tile
  // ahead. Accumulators only; every thread commits a group.
  auto gather_ahead = [&](int kt) {
    const int nxt = kt + C::STAGES - 1;
    if (accumulator && nxt < n_tiles) load_prefix_tile(nxt, nxt % C::STAGES, sIdx + (nxt & 1) * C::N_TILE);
    cp_async_commit();
    if (accumulator && gtid < C::N_TILE) {
      sIdx[((nxt + 1) & 1) * C::N_TILE + gtid] = next_id;
      next_id = nxt + 2 < n_tiles ? row_id(nxt + 2, gtid) : 0;
    }
  };
  auto prefix_scores = [&](int kt) {
    scores(kt % C::STAGES, min(C::N_TILE, key_end - key_begin - kt * C::N_TILE), false, 0, prefix_scale);
  };
  // v_scale multiplies the prefix part only (SGLang: acc += dot(p, v) * v_scale for pool values).
  auto scale_prefix_values = [&]() {
#pragma unroll
    for (int mt = 0; mt < C::MT_O; ++mt)
#pragma unroll
      for (int nt = 0; nt < C::NT_O; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] *= w.v_scale;
  };
  // The draft tail: its tokens as keys, N_TILE at a time from j0. Their K rows (kx, kRowChunks per row) or V rows
  // (vx, kVChunks) into a stage, zero past the request's draft tokens; `count` threads copy, this one is number t.
  auto load_draft_rows = [&](int j0, const __nv_bfloat16* rows, int64_t stride, int chunks, int stage, int t,
                             int count) {
    for (int i = t; i < C::N_TILE * chunks; i += count) {
      const int r = i / chunks, ch = i - r * chunks, j = j0 + r;
      const bool valid = j < ext;
      cp_async16(sKV + (stage * C::N_TILE + r) * C::LD + ch * 8, valid ? rows + (qo_start + j) * stride + ch * 8 : rows,
                 valid ? 16 : 0);
    }
    cp_async_commit();
  };
  const float tail_scale = a.sm_scale * 1.4426950408889634f;
  auto tail_scores = [&](int j0) { scores(0, min(C::N_TILE, ext - j0), true, j0, tail_scale); };
  if constexpr (C::ROLES) {
    // The roles run loops of their own, which meet at the same block barriers: per prefix tile one (n_tiles + 1
    // in all), per draft-tail tile two. In iteration kt the scorers compute S and P of tile kt (P buffer kt & 1)
    // while the accumulators compute P V of tile kt-1 (the other buffer), wait for one another (nobody reads tile
    // kt-1's stage any more) and refill that stage with tile kt + 2. One more iteration takes the last P V. In
    // the draft tail the scorers take the K rows (stage 0) and the accumulators the V rows (stage 1). The block
    // barriers are sync_block, not __syncthreads: the roles reach them from different instructions.
    if (scorer) {
      cp_async_wait<C::STAGES - 2>();  // the Q tile (the scorers' only copies)
      sync_scorers();
      load_q_fragments();
      for (int kt = 0; kt <= n_tiles; ++kt) {
        sync_block();  // tile kt landed; P and alpha of tile kt-1 taken
        if (kt < n_tiles) {
          prefix_scores(kt);
          sync_scorers();  // row maxima visible
          softmax(kt & 1);
        }
      }
      if (w.does_tail) {
        for (int j0 = 0; j0 < ext; j0 += C::N_TILE) {
          sync_block();  // the accumulators are done with P buffer 0
          load_draft_rows(j0, a.kx, a.skx, kRowChunks, 0, tid, C::S_WARPS * 32);
          cp_async_wait<0>();
          sync_scorers();  // the draft K rows landed
          tail_scores(j0);
          sync_scorers();  // row maxima visible
          softmax(0);
          sync_block();  // P and alpha visible
        }
      }
    } else {
      for (int kt = 0; kt <= n_tiles; ++kt) {
        cp_async_wait<C::STAGES - 2>();
        sync_block();  // tile kt landed; P and alpha of tile kt-1 visible
        if (kt > 0) accumulate_pv((kt - 1) % C::STAGES, (kt - 1) & 1);
        sync_accumulators();  // tile kt-1's stage is free
        gather_ahead(kt);
      }
      cp_async_wait<0>();
      scale_prefix_values();
      if (w.does_tail) {
        for (int j0 = 0; j0 < ext; j0 += C::N_TILE) {
          sync_block();  // the scorers are done with the previous P
          load_draft_rows(j0, a.vx, a.svx, kVChunks, 1, gtid, C::O_WARPS * 32);
          cp_async_wait<0>();
          sync_block();  // P, alpha and the draft V rows visible
          accumulate_pv(1, 0);
        }
      }
    }
  } else {
    // Every warp does all, in one branch-free block (tensor and shared-memory work overlap), with two barriers
    // per tile. The first iteration's P V is a no-op: P = 0, alpha = 1 over a zeroed stage (not yet loaded).
    for (int i = tid; i < C::M_TILE * C::P_LD / 2; i += C::THREADS) reinterpret_cast<uint32_t*>(sP)[i] = 0u;
    for (int i = tid; i < C::M_TILE; i += C::THREADS) sAlpha[i] = 1.f;
    for (int i = tid; i < C::N_TILE * C::LD / 8; i += C::THREADS)
      reinterpret_cast<uint4*>(sKV + (C::STAGES - 1) * C::N_TILE * C::LD)[i] = make_uint4(0u, 0u, 0u, 0u);
    for (int kt = 0; kt < n_tiles; ++kt) {
      cp_async_wait<C::STAGES - 2>();
      __syncthreads();  // tile kt landed; P and alpha of tile kt-1 visible
      accumulate_pv((kt + C::STAGES - 1) % C::STAGES, 0);
      prefix_scores(kt);
      __syncthreads();  // row maxima visible; tile kt-1's stage and the P buffer are free
      gather_ahead(kt);
      softmax(0);
    }
    if (n_tiles > 0) {
      __syncthreads();
      accumulate_pv((n_tiles - 1) % C::STAGES, 0);
    }
    cp_async_wait<0>();
    __syncthreads();
    scale_prefix_values();
    if (w.does_tail) {  // draft tokens as keys: K rows, S, then their V rows over the same stage, P V
      for (int j0 = 0; j0 < ext; j0 += C::N_TILE) {
        __syncthreads();  // the previous tile's readers are done with stage 0
        load_draft_rows(j0, a.kx, a.skx, kRowChunks, 0, tid, C::THREADS);
        cp_async_wait<0>();
        __syncthreads();
        tail_scores(j0);
        __syncthreads();  // every warp is done reading the draft K rows; row maxima visible
        load_draft_rows(j0, a.vx, a.svx, kVChunks, 0, tid, C::THREADS);
        softmax(0);
        cp_async_wait<0>();
        __syncthreads();  // P, alpha and the draft V rows visible
        accumulate_pv(0, 0);
      }
    }
  }

  // Row sums across the quad and the S warps; final row max.
  if (scorer) {
#pragma unroll
    for (int mt = 0; mt < C::MT_S; ++mt) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float l = l_run[mt][hf];
        l += __shfl_xor_sync(kFullWarp, l, 1);
        l += __shfl_xor_sync(kFullWarp, l, 2);
        const int lr = s_row(mt, hf);
        if (cq == 0) {
          sLred[ws_n * C::M_TILE + lr] = l;
          if (ws_n == 0) sMfin[lr] = m_run[mt][hf];
        }
      }
    }
  }
  // Each O warp's largest |O| of its slice of a row, for the scale of an fp16 partial.
  if (accumulator && slot >= 0) {
#pragma unroll
    for (int mt = 0; mt < C::MT_O; ++mt) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float m =
            row_abs_max<C::NT_O>([&](int nt) { return make_float2(acc[mt][nt][hf * 2], acc[mt][nt][hf * 2 + 1]); });
        if (cq == 0) sOmax[wo_d * C::M_TILE + wo_m * C::O_ROWS + mt * 16 + g + hf * 8] = m;
      }
    }
  }
  __syncthreads();
  if (!accumulator) return;  // the O warps store the output

  // The flags cannot change during the call (the gate wrote them before): read again instead of keeping
  // the choice in registers through the main loop.
  const bool to_alt = slot < 0 && output_choice(a) == kOutAlt;
  __nv_bfloat16* const out = to_alt ? a.o_alt : a.o;
  const int64_t out_s0 = to_alt ? a.sa0 : a.so0, out_s1 = to_alt ? a.sa1 : a.so1;
#pragma unroll
  for (int mt = 0; mt < C::MT_O; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int lr = wo_m * C::O_ROWS + mt * 16 + g + hf * 8;
      const int grow = row0 + lr;
      const unsigned lanes = __ballot_sync(kFullWarp, grow < rows_b);
      if (grow >= rows_b) continue;
      float l = 0.f;
#pragma unroll
      for (int w = 0; w < C::WS_N; ++w) l += sLred[w * C::M_TILE + lr];
      const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: 0, as SGLang (acc / 1 with acc == 0)
      if (slot < 0) {
        const int t = grow / H, h = grow - t * H;
        store_row_sectors<C::NT_O>(lanes, out + (qo_start + t) * out_s0 + (int64_t)h * out_s1 + wo_d * C::O_DIMS, cq,
                                   [&](int nt) {
                                     return make_float2(acc[mt][nt][hf * 2] * inv, acc[mt][nt][hf * 2 + 1] * inv);
                                   });
      } else {
        float row_max = 0.f;
#pragma unroll
        for (int w = 0; w < C::WO_D; ++w) row_max = fmaxf(row_max, sOmax[w * C::M_TILE + lr]);
        const int e = partial_exponent(row_max * inv);
        const float f = inv * pow2i(-e);
        store_row_sectors<C::NT_O>(lanes, a.part_o + ((int64_t)slot * a.rcap + grow) * kDimV + wo_d * C::O_DIMS, cq,
                                   [&](int nt) {
                                     return make_float2(acc[mt][nt][hf * 2] * f, acc[mt][nt][hf * 2 + 1] * f);
                                   });
        if (wo_d == 0 && cq == 0)
          a.part_lse[(int64_t)slot * a.rcap + grow] =
              make_float2(l > 0.f ? sMfin[lr] + log2f(l) : -CUDART_INF_F, (float)e);
      }
    }
  }
}

}  // namespace cutover
