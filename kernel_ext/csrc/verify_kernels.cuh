// Device side of the verify attention: work plan, split-KV main kernel, split combine, live-switch gate.
// Output selection (o or the shadow scratch o_alt) happens on the device: see output_choice.
//
// Rows of request b are its draft tokens times heads, token-major: row = t * H + h. A CTA owns one tile of
// M_TILE rows and one key range (split) of the request's prefix; it streams the gathered KV rows through
// shared memory (cp.async, STAGES deep), computes S = Q K^T and O += P V with mma.sync, online softmax in
// fp32 (log2 domain). The CTA holding the last split of a request also attends to the draft tail (T keys
// from k_extend/v_extend under the custom mask). A request served by one split writes o directly; otherwise
// each split writes a normalised partial (fp16, scaled by a power of two per row: partial_exponent) plus its
// log-sum-exp and the combine kernel merges them in fp32.
// The plan (which CTA takes which key range) is computed on the device from kv_indptr, by each main-kernel CTA
// at its start: no host reads, and no launch of its own. It reads index tensors only, so with early start it runs
// before the grid wait, while the kernel before the call finishes (cutover_verify.h, early_start).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <climits>
#include <stdint.h>

#include <type_traits>

#include "dependent_launch.cuh"
#include "mma_primitives.cuh"
#include "phase_clock.cuh"
#include "warp_reduce.cuh"

namespace cutover {

constexpr int kDimQK = 576;
constexpr int kDimV = 512;
constexpr int kRowChunks = kDimQK * 2 / 16;  // 16-byte chunks per K row
constexpr int kVChunks = kDimV * 2 / 16;     // 16-byte chunks per V row
constexpr int kSplitAlign = 64;              // split boundaries fall on multiples of this many keys
constexpr int kMinSplitKeys = 128;           // no split smaller than this (partials would cost more than keys)
constexpr int kTailKeys = 64;                // the plan counts a request's draft tail as this many keys (one tile)
constexpr int kCombineThreads = 256;
constexpr int kSglangBlockM = 32;            // BLOCK_M of SGLang's kernel for 576/512 on sm_90 and sm_120

struct KernelArgs {
  const __nv_bfloat16* q;
  int64_t sq0, sq1;
  const __nv_bfloat16* kx;
  int64_t skx;
  const __nv_bfloat16* vx;
  int64_t svx;
  __nv_bfloat16* o;
  int64_t so0, so1;
  __nv_bfloat16* o_alt;  // shadow scratch, or nullptr (see output_choice)
  int64_t sa0, sa1;
  const __nv_bfloat16* kv;
  int64_t skv;
  const void* qo_indptr;
  const void* kv_indptr;
  const void* kv_indices;
  const uint8_t* mask;
  const void* mask_indptr;
  int qo64, kv64, mi64;
  int is_causal;
  int B, H, T;
  float sm_scale, k_scale, v_scale;
  const float* k_scale_ptr;
  const float* v_scale_ptr;
  const int32_t* enable;
  // workspace
  int2* req;       // [B] {number of splits, first partial slot}
  float2* part_lse; // [slots][rcap] {log2-domain log-sum-exp, e} of each partial row
  __half* part_o;   // [slots][rcap][512] normalised partial outputs times 2^-e, fp16 (partial_exponent)
  int G_target, rcap;
};

// Where this call writes, decided on the device from the live-switch flags (so one captured launch serves
// every mode): kOutNone = exit at once, kOutO = o, kOutAlt = o_alt. Without o_alt, enable[0] alone gates o;
// with o_alt, enable = {serve, sample}: serve -> o, else sample -> o_alt, else nothing.
constexpr int kOutNone = 0, kOutO = 1, kOutAlt = 2;
__device__ __forceinline__ int output_choice(const KernelArgs& a) {
  if (a.enable == nullptr) return kOutO;
  const volatile int32_t* flags = a.enable;
  if (flags[0] != 0) return kOutO;
  return a.o_alt != nullptr && flags[1] != 0 ? kOutAlt : kOutNone;
}

// Partials are stored in fp16, a row at a time scaled by a power of two 2^-e chosen from the row's largest |value|
// so that it lands in [2^14, 2^15): no overflow, and 11 significant bits for every value down to 2^-28 of the
// row's largest, against the 8 of the bf16 output they are merged into. A zero row (or one whose largest value is
// not finite) is stored as is.
__device__ __forceinline__ int partial_exponent(float row_max_abs) {
  if (!(row_max_abs > 0.f) || row_max_abs == CUDART_INF_F) return 0;
  const int e = ilogbf(row_max_abs) - 14;
  return e < -100 ? -100 : e;
}

// 2^e for an integer e in [-126, 127], exactly.
__device__ __forceinline__ float pow2i(int e) { return __int_as_float((e + 127) << 23); }

// A pair of values as the 32 bits stored for them: fp16 (partials) or bf16 (the output), round to nearest.
__device__ __forceinline__ uint32_t pack_pair(float2 v, const __half*) {
  const __half2 h = __floats2half2_rn(v.x, v.y);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_pair(float2 v, const __nv_bfloat16*) { return pack_bf16x2(v.x, v.y); }

// Stores one row slice (an fp16 partial or the bf16 output) from the mma accumulator layout, where lane cq of a
// quad holds values 8 j + 2 cq and 8 j + 2 cq + 1 of the slice for j = 0 .. N - 1 (`pair(j)`, already scaled).
// Neighbouring lanes swap one pair of each two j, so that every lane stores 4 consecutive values (8 bytes) and each
// quad's store covers one whole 32-byte sector: stores of 4 bytes would write sectors by halves (docs/perf.md, v36
// and v52). `row` points at value 0 of the slice (8-byte aligned; a whole sector per quad where it starts on one);
// `lanes` are the lanes storing a row (whole quads).
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
  // path, and one 16 x 8 fragment per warp would be one chain of 36 dependent mma.sync (v64, docs/perf.md).
  static constexpr int S_CHAINS = ROLES ? 2 : 1;
  // K-steps of Q a scorer keeps in registers as mma A fragments for the whole split (4 per k-step) instead of
  // reading them from shared memory for every tile; the rest it reads with ldmatrix (v65, docs/perf.md).
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
  static constexpr int OFF_OMAX = OFF_MFIN + M_TILE * 4;                      // [WO_D][M_TILE] largest |O| of a row slice
  static constexpr int OFF_IDX = OFF_OMAX + WO_D * M_TILE * 4;                // [2][N_TILE] KV row ids of upcoming tiles
  static constexpr int SMEM_BYTES = (OFF_IDX + 2 * N_TILE * 8 + 15) / 16 * 16;
  static_assert(ROLES || O_WARPS == S_WARPS, "without ROLES, S and O warp grids must use the same warps");
  static_assert(S_ROWS % 16 == 0 && S_COLS % 8 == 0 && N_TILE % 16 == 0, "tile shape");
  static_assert(O_ROWS % 16 == 0 && NT_O % 2 == 0, "O tile shape");
  static_assert(kSplitAlign % N_TILE == 0, "split alignment");
};

// sm_90 class (227 KB shared memory per block): 64 rows x 32 keys, 3 stages, 8 warps, ~190 KB.
using LargeTiles = TileConfig<64, 32, 3, 4, 2, false, 2, 4>;
// sm_120 class (~99 KB per block): 32 rows x 16 keys, 3 stages, 4 scorer warps and 4 accumulator warps (v63),
// ~96 KB. With two stages a tile's gather had only the softmax before it to land (v60, docs/perf.md).
using SmallTiles = TileConfig<32, 16, 3, 2, 2, true, 2, 2>;
static_assert(SmallTiles::SMEM_BYTES <= 99 * 1024, "sm_120 allows 99 KB of shared memory per block");

// ---------------------------------------------------------------------------------------------------------
// Plan: split every request's work (its prefix keys plus kTailKeys for the draft tail, which costs about one tile)
// into ~G_target equal key ranges (>= kMinSplitKeys, aligned), at least one split per request; the last split
// takes the draft tail and so that much less of the prefix (possibly none). Main-kernel CTA y takes work item y.
// The splits fit one wave of G_target CTAs where that costs at most twice the first chunk (total / G_target);
// otherwise (a long request among more requests than a wave has CTAs) they run in waves of first-chunk splits.
// Bounds (docs/kernel.md): sum of splits <= G_target + B = G; partial slots <= 2 * G_target.
// One warp computes it (lane l takes requests l, l + 32, ...): shuffles only, no block-wide barrier per step.
// Its request loops are not unrolled: every CTA runs this code once, and half the code (10.8 KB of SASS instead
// of 21 KB up to the first barrier) starts the CTA's stream 0.1-0.3 us sooner (v56, docs/perf.md).
// ---------------------------------------------------------------------------------------------------------
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

// Prefix keys of request b. The plan's per-request arithmetic is 32-bit (a 64-bit division is a long software
// routine), as a work item's key range always was: prefixes below 2^31 keys, far beyond any KV pool.
constexpr int kMaxChunk = 1 << 30;  // the largest split
// Prefix keys of request b of a call whose kv_indptr is `kv_indptr` (int64 where kv64).
__device__ __forceinline__ int prefix_keys(const void* kv_indptr, int kv64, int b) {
  const int64_t p = load_index(kv_indptr, b + 1, kv64) - load_index(kv_indptr, b, kv64);
  return p < 0 ? 0 : (int)p;
}

__device__ __forceinline__ int prefix_len(const KernelArgs& a, int b) { return prefix_keys(a.kv_indptr, a.kv64, b); }

// The prefix lengths of a call, by value: an out-of-line function taking them copies none of the kernel arguments.
struct PrefixLengths {
  const void* kv_indptr;
  int kv64, B;
  __device__ __forceinline__ int operator()(int b) const { return prefix_keys(kv_indptr, kv64, b); }
};

__device__ __forceinline__ unsigned round_up(unsigned x, unsigned m) { return (x + m - 1) / m * m; }

// Keys of work of request b: its prefix, and the draft tail counted as kTailKeys.
__device__ __forceinline__ unsigned work_keys(const KernelArgs& a, int b) { return prefix_len(a, b) + kTailKeys; }

// Splits of a request with `work` keys of work (> 0) for a given chunk.
__device__ __forceinline__ unsigned splits_of(unsigned work, unsigned chunk) { return (work + chunk - 1) / chunk; }

// The call's splits at `chunk` (warp-uniform; lane l counts requests l, l + 32, ...).
__device__ __forceinline__ unsigned call_splits_at(const KernelArgs& a, int lane, unsigned chunk) {
  unsigned cnt = 0;
#pragma unroll 1
  for (int b = lane; b < a.B; b += 32) cnt += splits_of(work_keys(a, b), chunk);
  return warp_sum(cnt);
}

// `chunk` shrunk to the largest per-request even share, so that the splits of a request are even (no request
// gets more splits than at `chunk`); warp-uniform.
__device__ __forceinline__ unsigned even_chunk(const KernelArgs& a, int lane, unsigned chunk) {
  unsigned share = kSplitAlign;
#pragma unroll 1
  for (int b = lane; b < a.B; b += 32) {
    const unsigned W = work_keys(a, b), n = splits_of(W, chunk), even = round_up((W + n - 1) / n, kSplitAlign);
    share = even > share ? even : share;
  }
  share = warp_max(share);
  chunk = share < chunk ? share : chunk;
  return chunk < kMinSplitKeys ? kMinSplitKeys : chunk;
}

// The index-tensor entries of request b that a CTA working on it needs.
struct RequestIndices {
  int64_t qo_start, qo_end, kv_start, kv_end, mask_start;
};

__device__ __forceinline__ RequestIndices request_indices(const KernelArgs& a, int b) {
  return RequestIndices{load_index(a.qo_indptr, b, a.qo64), load_index(a.qo_indptr, b + 1, a.qo64),
                        load_index(a.kv_indptr, b, a.kv64), load_index(a.kv_indptr, b + 1, a.kv64),
                        a.mask != nullptr ? load_index(a.mask_indptr, b, a.mi64) : 0};
}

// A main-kernel CTA's share of the call: prefix keys [key_begin, key_end) of a request (-1: idle CTA), its
// partial slot (-1: the request's only split, written to o directly), whether it also takes the draft tail, the
// request's index entries, and how many splits the whole call has (call_splits).
struct WorkItem {
  int request, key_begin, key_end, slot, splits, call_splits;
  bool tail;
  RequestIndices idx;
};

// Where a call has more work items than G_target (the plan's waves, or more requests than a wave holds items),
// the SMs take the items in order as they free up, and longest first ends soonest: full splits (chunk keys) first,
// in request order, then the requests' last splits by length in kOrderBuckets buckets of chunk / kOrderBuckets
// keys, the longest bucket first, request order within a bucket (results/ab_v69_h200/plan_model.py: within 2 % of
// exact longest first on the benchmark's mixed grid; over request order it gains ~5 % on batches whose lengths
// spread over 1.25x, ~15 % over 2x: results/ab_v70_h200/). Only a call of more than G_target / 2 requests can
// have more items than G_target (docs/kernel.md, "Algorithm", item 1); the host launches the kernels' LONGEST_FIRST
// instances for those calls only, so no other call runs a line of this code (inline in every call, it cost them
// ~1 %: v69).
constexpr int kOrderBuckets = 32;  // one per lane

// Shared memory of the plan: the CTA's work item, and (longest first) the next free place of each bucket.
struct PlanSlot {
  WorkItem item;
  unsigned bucket_next[kOrderBuckets];
};

// The order bucket of the last split of a request with `work` keys of work in `splits` splits of `chunk`.
__device__ __forceinline__ unsigned last_split_bucket(unsigned work, unsigned splits, unsigned chunk) {
  const unsigned last = work - (splits - 1) * chunk, width = (chunk + kOrderBuckets - 1) / kOrderBuckets;
  return kOrderBuckets - 1 - (last - 1) / width;  // 0: the longest
}

// Where work item c lies in longest-first order: request b, split k of n over P prefix keys, first partial slot.
struct OrderedPlace {
  int b, k, n, P, slot0;
};

// What the order needs of request b (one lane's): its prefix keys, splits at `chunk`, and its last split's
// bucket (kOrderBuckets where b is past the call's requests, which then has no split).
struct OrderKey {
  int P, n;
  unsigned bucket;
};

__device__ __forceinline__ OrderKey order_key(const PrefixLengths& len, int b, unsigned chunk) {
  if (b >= len.B) return OrderKey{0, 0, kOrderBuckets};
  const int P = len(b);
  const unsigned W = P + kTailKeys, n = splits_of(W, chunk);
  return OrderKey{P, (int)n, last_split_bucket(W, n, chunk)};
}

// The first pass's share of one round of 32 requests: their full splits, and each last split counted in its
// bucket.
__device__ __forceinline__ void count_round(const OrderKey& key, unsigned& full, PlanSlot* plan) {
  if (key.n > 0) {
    full += key.n - 1;
    atomicAdd(&plan->bucket_next[key.bucket], 1u);
  }
}

// The second pass over one round of 32 requests (base, base + 32): each request's full splits take the next
// places in request order, its last split the next place of its bucket; `place` gets item c where it is here.
__device__ __forceinline__ void place_round(const OrderKey& key, int base, int c, int& run_full, int& run_slot,
                                            OrderedPlace& place, PlanSlot* plan) {
  const int lane = threadIdx.x, b = base + lane, n = key.n;
  int2 tot;
  const int2 off = warp_exclusive_scan2(make_int2(n > 0 ? n - 1 : 0, n > 1 ? n : 0), &tot);
  const unsigned same = __match_any_sync(kFullWarp, key.bucket), lower = (1u << lane) - 1u;
  const int first = run_full + off.x, last = n > 0 ? (int)(plan->bucket_next[key.bucket] + __popc(same & lower)) : -1;
  __syncwarp();
  if (n > 0 && (same & lower) == 0) plan->bucket_next[key.bucket] += __popc(same);
  if (n > 0 && ((c >= first && c < first + n - 1) || c == last))
    place = OrderedPlace{b, c == last ? n - 1 : c - first, n, key.P, run_slot + off.y};
  __syncwarp();
  run_full += tot.x;
  run_slot += tot.y;
}

// Requests whose order keys a lane keeps in registers between the two passes: 32 per round, the first
// kKeptRounds rounds (a call of up to 128 requests reads its prefix lengths and divides once; v71).
constexpr int kKeptRounds = 4;

// keep_key sets kept[r] = key (nothing where r >= kKeptRounds), kept_key reads kept[r] (r < kKeptRounds): both
// without indexing the array by a variable, which would put it in local memory.
__device__ __forceinline__ void keep_key(OrderKey (&kept)[kKeptRounds], int r, const OrderKey& key) {
#pragma unroll
  for (int i = 0; i < kKeptRounds; ++i)
    if (r == i) kept[i] = key;
}

__device__ __forceinline__ OrderKey kept_key(const OrderKey (&kept)[kKeptRounds], int r) {
  OrderKey key = kept[0];
#pragma unroll
  for (int i = 1; i < kKeptRounds; ++i)
    if (r == i) key = kept[i];
  return key;
}

// Work item c in longest-first order (warp 0; every lane calls it; b >= 0 on the lane that found it). Out of
// line, so the kernels' main loop keeps its schedule (inline it moved: v69). The second pass reads the
// first kKeptRounds rounds' keys from the first pass's registers; later rounds (calls of over 128 requests) are
// computed in each pass.
__device__ __noinline__ OrderedPlace place_longest_first(const PrefixLengths len, int c, unsigned chunk,
                                                        PlanSlot* plan) {
  const int lane = threadIdx.x;
  // Each bucket's first place: after every full split and every longer bucket's last splits.
  plan->bucket_next[lane] = 0;
  __syncwarp();
  OrderKey kept[kKeptRounds];
  unsigned full = 0;
#pragma unroll 1
  for (int base = 0; base < len.B; base += 32) {
    const OrderKey key = order_key(len, base + lane, chunk);
    count_round(key, full, plan);
    keep_key(kept, base / 32, key);
  }
  full = warp_sum(full);
  __syncwarp();
  int2 total;
  const int2 longer = warp_exclusive_scan2(make_int2((int)plan->bucket_next[lane], 0), &total);
  plan->bucket_next[lane] = full + longer.x;
  __syncwarp();
  int run_full = 0, run_slot = 0;
  OrderedPlace place{-1, 0, 0, 0, 0};
#pragma unroll 1
  for (int base = 0; base < len.B; base += 32) {
    const int r = base / 32;
    place_round(r < kKeptRounds ? kept_key(kept, r) : order_key(len, base + lane, chunk), base, c, run_full,
                run_slot, place, plan);
  }
  return place;
}

// Work item c in longest-first order into plan->item (warp 0; every lane calls it; true on the lane that found
// it). The partial slots stay the request-order ones, so no result changes by a bit.
__device__ __forceinline__ bool plan_longest_first(const KernelArgs& a, int c, unsigned chunk, unsigned cnt,
                                                   PlanSlot* plan) {
  const OrderedPlace o = place_longest_first(PrefixLengths{a.kv_indptr, a.kv64, a.B}, c, chunk, plan);
  if (o.b < 0) return false;
  // As in request order (plan_work_item), whose text stays v67's: there a helper for both moved the registers of
  // the request-order instances, and every call cost 0.2-0.4 % (results/ab_v70_h200/).
  const long long kb = (long long)o.k * chunk, ke = kb + chunk < o.P ? kb + chunk : o.P;
  plan->item = WorkItem{o.b, (int)(kb < o.P ? kb : o.P), (int)ke, o.n > 1 ? o.slot0 + o.k : -1, o.n, (int)cnt,
                        o.k == o.n - 1, request_indices(a, o.b)};
  return true;
}

// The plan, computed by every main-kernel CTA for itself (no separate launch): work item `c` of the call. Warp 0
// computes it; it reads the index tensors only and writes nothing to global memory, so it may run before the
// grid wait. Every thread of the CTA must call it; every thread gets the item (through `plan`, in shared memory).
// LONGEST_FIRST (calls of batch > G_target / 2 only): where the call has more items than G_target, they go in
// longest-first order, unless every request's work is within 1/8 of the others' (there the order gains less than
// it costs: 2-4 us per call in v70, ~0.5-2 us less since v71: results/ab_v70_h200/, results/ab_v71_h200/).
template <bool LONGEST_FIRST>
__device__ WorkItem plan_work_item(const KernelArgs& a, int c, PlanSlot* plan) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    // Lane l's first request's indices, loaded with the first pass's prefix lengths (one round trip).
    RequestIndices first_idx{};
    if (lane < a.B) first_idx = request_indices(a, lane);
    long long total = 0;
    unsigned least = ~0u, most = 0;  // the requests' work (LONGEST_FIRST only)
#pragma unroll 1
    for (int b = lane; b < a.B; b += 32) {
      const unsigned W = work_keys(a, b);
      total += W;
      if constexpr (LONGEST_FIRST) {
        least = W < least ? W : least;
        most = W > most ? W : most;
      }
    }
    total = warp_sum(total);
    // Chunk: total / G_target keys (the first chunk), grown until all splits fit in one wave of G_target CTAs
    // (or every request has a single split), then shrunk to the largest per-request share so the splits of a
    // request are even; the first chunk instead where that one wave would end late (below).
    const long long first_chunk = (total + a.G_target - 1) / a.G_target;
    unsigned chunk = first_chunk > kMaxChunk ? kMaxChunk : round_up((unsigned)first_chunk, kSplitAlign);
    if (chunk < kMinSplitKeys) chunk = kMinSplitKeys;
    const unsigned wave_chunk = chunk;  // >= total / G_target unless clamped to kMaxChunk
    unsigned cnt = 0;  // the call's splits at the current chunk
    for (int it = 0; it < 64; ++it) {
      cnt = call_splits_at(a, lane, chunk);
      if (cnt <= (unsigned)a.G_target || cnt == (unsigned)a.B || chunk >= kMaxChunk) break;
      const long long grown = (long long)chunk * cnt / a.G_target;
      const unsigned next = grown >= kMaxChunk ? kMaxChunk : round_up((unsigned)grown, kSplitAlign);
      chunk = next > chunk ? next : chunk + kSplitAlign;
    }
    // One wave whose largest split is over twice the first chunk (a long request among more requests than a
    // wave has CTAs, or beside many short ones) ends later than waves of first-chunk splits, which the SMs take
    // as they free up: those end within the mean load plus one split, <= 2 x the first chunk. The bounds hold at
    // the first chunk c >= total / G_target (evening adds no split): splits < total / c + B <= G, and a request
    // of n >= 2 splits has more than (n - 1) c keys of work, so partial slots < 2 * total / c <= 2 * G_target.
    // The second pass evens the first chunk (one copy of the evening code: the plan's code is run cold, v56).
#pragma unroll 1
    for (int pass = 0;; ++pass) {
      chunk = even_chunk(a, lane, chunk);
      if (pass == 1) {
        cnt = call_splits_at(a, lane, chunk);
        break;
      }
      if (chunk <= 2 * wave_chunk || first_chunk > kMaxChunk) break;
      chunk = wave_chunk;
    }

    bool found = false;
    if (LONGEST_FIRST && cnt > (unsigned)a.G_target &&
        (unsigned long long)__reduce_max_sync(kFullWarp, most) * 8 >
            (unsigned long long)__reduce_min_sync(kFullWarp, least) * 9) {
      found = plan_longest_first(a, c, chunk, cnt, plan);
    } else {
      // Splits of the requests in order: request b owns work items [first, first + n) and, when n > 1, partial
      // slots [slot0, slot0 + n).
      int run_split = 0, run_slot = 0;
#pragma unroll 1
      for (int base = 0; base < a.B && run_split <= c; base += 32) {
        const int b = base + lane;
        int P = 0, n = 0;
        if (b < a.B) {
          P = prefix_len(a, b);
          n = (int)splits_of(P + kTailKeys, chunk);
        }
        int2 tot;
        const int2 off = warp_exclusive_scan2(make_int2(n, n > 1 ? n : 0), &tot);
        if (b < a.B) {
          const int first = run_split + off.x, slot0 = n > 1 ? run_slot + off.y : -1;
          if (c >= first && c < first + n) {
            // Only the last split can start past the prefix (then it holds the draft tail alone).
            const int k = c - first;
            const long long kb = (long long)k * chunk, ke = kb + chunk < P ? kb + chunk : P;
            plan->item = WorkItem{b, (int)(kb < P ? kb : P), (int)ke, n > 1 ? slot0 + k : -1, n, (int)cnt,
                                  k == n - 1, base == 0 ? first_idx : request_indices(a, b)};
            found = true;
          }
        }
        run_split += tot.x;
        run_slot += tot.y;
      }
    }
    if (__ballot_sync(kFullWarp, found) == 0 && lane == 0) plan->item = WorkItem{-1, 0, 0, -1, 0, 0, false, {}};
  }
  __syncthreads();
  const WorkItem item = plan->item;
  __syncthreads();  // the slot may be reused at once
  return item;
}

// ---------------------------------------------------------------------------------------------------------
// Main kernel. grid = (row tiles, G): the row tiles of one split run side by side, so a split's KV rows are
// fetched from HBM once and re-read from L2 by the other row tiles. With early start the main kernel is a
// programmatic dependent of the kernel before it (grid_dependency_wait after its plan); the combine always is the
// main kernel's (grid_dependency_wait at the combine's start).
// ---------------------------------------------------------------------------------------------------------
template <class C, typename IdxT, bool LONGEST_FIRST>
__device__ __forceinline__ void verify_main_body(const KernelArgs& a);

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
  // (the compile-time forms keep that kernel's code as it was).
  const bool scorer = !C::ROLES || warp < C::S_WARPS, accumulator = !C::ROLES || warp >= C::S_WARPS;
  const int owarp = C::ROLES ? warp - C::S_WARPS : warp;  // index among the O warps
  const int ws_m = warp % C::WS_M, ws_n = warp / C::WS_M;
  const int wo_m = owarp % C::WO_M, wo_d = owarp / C::WO_M;
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
  // pieces at fixed offsets (v61; per-piece address arithmetic took ~20 % of the small tiles' time).
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
        for (int nt = 0; nt < C::NT_S; ++nt) mma_bf16_16816(chain[ks % C::S_CHAINS][mt][nt], af[mt], bfr[nt][0], bfr[nt][1]);
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
        const int lr = ws_m * C::S_ROWS + mt * 16 + g + hf * 8;
        const int grow = row0 + lr;
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
        const int lr = ws_m * C::S_ROWS + mt * 16 + g + hf * 8;
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
  auto load_draft_rows = [&](int j0, const __nv_bfloat16* rows, int64_t stride, int chunks, int stage, int t, int count) {
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
        const int lr = ws_m * C::S_ROWS + mt * 16 + g + hf * 8;
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
        const float m = row_abs_max<C::NT_O>([&](int nt) { return make_float2(acc[mt][nt][hf * 2], acc[mt][nt][hf * 2 + 1]); });
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
                                   [&](int nt) { return make_float2(acc[mt][nt][hf * 2] * inv, acc[mt][nt][hf * 2 + 1] * inv); });
      } else {
        float row_max = 0.f;
#pragma unroll
        for (int w = 0; w < C::WO_D; ++w) row_max = fmaxf(row_max, sOmax[w * C::M_TILE + lr]);
        const int e = partial_exponent(row_max * inv);
        const float f = inv * pow2i(-e);
        store_row_sectors<C::NT_O>(lanes, a.part_o + ((int64_t)slot * a.rcap + grow) * kDimV + wo_d * C::O_DIMS, cq,
                                   [&](int nt) { return make_float2(acc[mt][nt][hf * 2] * f, acc[mt][nt][hf * 2 + 1] * f); });
        if (wo_d == 0 && cq == 0)
          a.part_lse[(int64_t)slot * a.rcap + grow] =
              make_float2(l > 0.f ? sMfin[lr] + log2f(l) : -CUDART_INF_F, (float)e);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Combine: for every row of every request served by more than one split, merge the partials by their
// log-sum-exp. One warp per item (request, row, slice of the 512 dims), no block barriers, so many items are in
// flight at once. The lanes are GROUPS split groups (split i goes to group i % GROUPS) x 32 / GROUPS lanes, each
// lane VEC x 8 values (VEC x 16 bytes of fp16 partial) of the slice; groups are merged by shuffles. After the
// request's entry a lane issues the loads of BATCH of its splits at once and merges them with a running maximum,
// so an item costs two round trips to memory while each lane has at most BATCH splits. The combine is bound by
// the bytes it has in flight, so the launch picks the layout by the splits a request is expected to have
// (kernel_ext/csrc/verify_api.cu): a lane's loads should neither wait for one another nor be left empty. A group
// of 8 or more lanes reads whole 128-byte lines of a partial row, 4 lanes half lines: the same 8.4 MB in one round
// trip took 5.1 us in half lines and 3.4 us in whole ones (docs/perf.md, v54).
// ---------------------------------------------------------------------------------------------------------
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
// plugin's sequence) that costs small calls more than it saves (docs/perf.md, v58).
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
      dst[v] = make_uint4(pack_bf16x2(acc[v * 8 + 0] * inv, acc[v * 8 + 1] * inv), pack_bf16x2(acc[v * 8 + 2] * inv, acc[v * 8 + 3] * inv),
                          pack_bf16x2(acc[v * 8 + 4] * inv, acc[v * 8 + 5] * inv), pack_bf16x2(acc[v * 8 + 6] * inv, acc[v * 8 + 7] * inv));
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
// come first: placed last they cost calls without long requests more (docs/perf.md, v75).
template <class L, bool LONG_REQUESTS>
__global__ void __launch_bounds__(kCombineThreads) verify_combine_kernel(const KernelArgs a, int long_blocks) {
  phase_mark(kPhaseCombine, 0);
  grid_dependency_release();  // the next call's main kernel may start its plan; it waits for this grid
  grid_dependency_wait();  // every split of the main kernel has written its partial
  phase_mark(kPhaseCombine, 1);
  const int choice = output_choice(a);
  if (choice == kOutNone) return;
  CombineOutput o;  // assigned member by member: as one expression, ptxas gave other combines more registers
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

// ---------------------------------------------------------------------------------------------------------
// Live-switch gate (one CTA): counter, enable flags, gated qo_indptr for the stock kernel.
// ---------------------------------------------------------------------------------------------------------
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
