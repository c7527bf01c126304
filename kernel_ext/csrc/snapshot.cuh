// Gated snapshot of one verify call: the truth anchor's and the captures' view of CUDA-graph-replayed calls.
//
// One launch per verify call, after the shadow epilogue. Every block waits for the kernel before it, reads the
// staging header's arm word and exits at once unless it names this launch's layer and the gate flagged the call
// as a shadow sample (enable[1]). Armed, the blocks copy what a float64 recomputation needs (indptrs rebased, the
// custom mask's draft tails, q, k/v_extend, both outputs, the KV rows the call reads, gathered in kv_indices
// order) into the staging area, for the leading requests that fit its capacity. Header words (CutoverSnapshotWord):
//
//   WRITING   the arm token of the snapshot being written; every taking-part block sets it before its copies
//   COMPLETED the arm token of the last snapshot whose every block finished; the arm word is then cleared
//
// A launch completes only when all its blocks saw the same armed token: the blocks count themselves on a ticket
// keyed by (layer, the gate's call counter), unique per launch, so blocks of a launch that raced the host's arming
// never add up with another launch's. A reader takes a snapshot only if COMPLETED and WRITING equal its token
// before and WRITING still does after it copied the data (cutover/plugin/snapshot.py).
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>
#include <stdint.h>

#include "cutover_verify.h"
#include "dependent_launch.cuh"
#include "verify_args.cuh"

namespace cutover {

constexpr int kSnapThreads = 512;
constexpr int kSnapBlocks = 32;
constexpr int kSnapQkChunks = 576 * 2 / 16;  // 16-byte chunks of a q / k row
constexpr int kSnapVChunks = 512 * 2 / 16;   // of a v / o row
constexpr long long kSnapLow20 = (1LL << 20) - 1;  // the layer + 1 of an arm token; a ticket's count

// The call's tensors as the verify kernels see them (o_alt: the shadow scratch, our output), then the snapshot's own.
struct SnapshotArgs : VerifyTensors {
  int qo64, kv64, ki64, mi64;
  int B, H, T, is_causal, layer, from_graph;
  float sm_scale, k_scale, v_scale;
  const float* k_scale_ptr;
  const float* v_scale_ptr;
  const int32_t* enable;
  const int32_t* gate_state;
  long long* header;  // CUTOVER_SNAPSHOT_HEADER_WORDS int64 words, then the data
  uint8_t* data;
  long long capacity;  // data bytes
};

__device__ __forceinline__ long long snap_index(const void* p, int is64, long long i) {
  return is64 ? static_cast<const long long*>(p)[i] : (long long)static_cast<const int*>(p)[i];
}

__device__ __forceinline__ long long round16(long long bytes) { return (bytes + 15) & ~15LL; }

// Where everything goes, the same in every block (computed from the index tensors alone).
struct SnapPlan {
  int kept;  // leading requests that fit
  long long tokens, rows, mask_bytes;  // of the kept requests
  long long q0, kv0;                   // qo_indptr[0], kv_indptr[0]
  long long off_qo, off_kv_indptr, off_mask, off_q, off_kx, off_vx, off_o, off_s, off_kv, end;
};

__device__ __forceinline__ long long snap_token_bytes(int H) {
  return (long long)H * 576 * 2 + 576 * 2 + 512 * 2 + 2LL * H * 512 * 2;
}

// Block-wide: the longest prefix of requests whose copies fit the capacity (requests in order, so "which were
// kept" is one number: requests 0 .. kept-1).
__device__ void snapshot_plan(const SnapshotArgs& a, SnapPlan* plan) {
  using Scan = cub::BlockScan<long long, kSnapThreads>;
  using Reduce = cub::BlockReduce<long long, kSnapThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ typename Reduce::TempStorage reduce_storage;
  __shared__ long long s_base;
  __shared__ int s_kept;
  const long long indptr_bytes = round16((long long)(a.B + 1) * 8);
  const long long budget = a.capacity - 2 * indptr_bytes - 8 * 16;  // minus the rounding of 8 sections
  if (threadIdx.x == 0) {
    s_base = 0;
    s_kept = a.B;
  }
  __syncthreads();
  for (int base = 0; base < a.B; base += kSnapThreads) {
    const int r = base + threadIdx.x;
    long long bytes = 0;
    if (r < a.B) {
      const long long t = snap_index(a.qo_indptr, a.qo64, r + 1) - snap_index(a.qo_indptr, a.qo64, r);
      const long long p = snap_index(a.kv_indptr, a.kv64, r + 1) - snap_index(a.kv_indptr, a.kv64, r);
      bytes = t * snap_token_bytes(a.H) + p * 576 * 2 + (a.mask != nullptr ? t * t : 0);
    }
    long long inclusive;
    Scan(scan_storage).InclusiveSum(bytes, inclusive);
    const long long base_bytes = s_base;
    if (r < a.B && base_bytes + inclusive > budget) atomicMin(&s_kept, r);
    __syncthreads();
    if (s_kept < a.B) break;
    if (threadIdx.x == kSnapThreads - 1) s_base = base_bytes + inclusive;  // bytes = 0 past the batch
    __syncthreads();
  }
  long long mask = 0;
  if (a.mask != nullptr) {
    for (int r = threadIdx.x; r < s_kept; r += kSnapThreads) {
      const long long t = snap_index(a.qo_indptr, a.qo64, r + 1) - snap_index(a.qo_indptr, a.qo64, r);
      mask += t * t;
    }
  }
  mask = Reduce(reduce_storage).Sum(mask);
  if (threadIdx.x == 0) {
    SnapPlan p;
    p.kept = s_kept;
    p.q0 = snap_index(a.qo_indptr, a.qo64, 0);
    p.kv0 = snap_index(a.kv_indptr, a.kv64, 0);
    p.tokens = snap_index(a.qo_indptr, a.qo64, p.kept) - p.q0;
    p.rows = snap_index(a.kv_indptr, a.kv64, p.kept) - p.kv0;
    p.mask_bytes = mask;
    p.off_qo = 0;
    p.off_kv_indptr = p.off_qo + indptr_bytes;
    p.off_mask = p.off_kv_indptr + indptr_bytes;
    p.off_q = p.off_mask + round16(p.mask_bytes);
    p.off_kx = p.off_q + p.tokens * a.H * 576 * 2;
    p.off_vx = p.off_kx + p.tokens * 576 * 2;
    p.off_o = p.off_vx + p.tokens * 512 * 2;
    p.off_s = p.off_o + p.tokens * a.H * 512 * 2;
    p.off_kv = p.off_s + p.tokens * a.H * 512 * 2;
    p.end = p.off_kv + p.rows * 576 * 2;
    *plan = p;
  }
  __syncthreads();
}

// Copies `rows` rows of `chunks` 16-byte chunks: row r from src(r) to dst + r * chunks * 16 (grid-stride).
template <typename Src>
__device__ __forceinline__ void snap_copy_rows(uint8_t* dst, long long rows, int chunks, Src src) {
  const long long total = rows * chunks;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const long long j = i + u * stride;
      if (j < total) v[u] = __ldcg(reinterpret_cast<const uint4*>(src(j / chunks)) + j % chunks);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const long long j = i + u * stride;
      if (j < total) reinterpret_cast<uint4*>(dst)[j] = v[u];
    }
  }
}

__device__ void snapshot_copy(const SnapshotArgs& a, const SnapPlan& p) {
  const long long gtid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long gstride = (long long)gridDim.x * blockDim.x;
  long long* qo = reinterpret_cast<long long*>(a.data + p.off_qo);
  long long* kvp = reinterpret_cast<long long*>(a.data + p.off_kv_indptr);
  for (long long r = gtid; r <= p.kept; r += gstride) {
    qo[r] = snap_index(a.qo_indptr, a.qo64, r) - p.q0;
    kvp[r] = snap_index(a.kv_indptr, a.kv64, r) - p.kv0;
  }
  if (a.mask != nullptr) {  // request r's T x T tail, packed after requests 0..r-1's; one warp per request
    const long long warp = gtid >> 5, warps = gstride >> 5;
    const int lane = threadIdx.x & 31;
    for (long long r = warp; r < p.kept; r += warps) {
      long long packed = 0;  // sum of t^2 over the requests before r (a warp-strided sum)
      for (long long j = lane; j < r; j += 32) {
        const long long t = snap_index(a.qo_indptr, a.qo64, j + 1) - snap_index(a.qo_indptr, a.qo64, j);
        packed += t * t;
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) packed += __shfl_xor_sync(0xffffffffu, packed, off);
      const long long t = snap_index(a.qo_indptr, a.qo64, r + 1) - snap_index(a.qo_indptr, a.qo64, r);
      const long long prefix = snap_index(a.kv_indptr, a.kv64, r + 1) - snap_index(a.kv_indptr, a.kv64, r);
      const long long start = snap_index(a.mask_indptr, a.mi64, r);
      for (long long e = lane; e < t * t; e += 32) {
        const long long i = e / t, j = e - i * t;
        a.data[p.off_mask + packed + e] = a.mask[start + i * (prefix + t) + prefix + j];
      }
    }
  }
  const int H = a.H;
  const long long q0 = p.q0;
  snap_copy_rows(a.data + p.off_q, p.tokens * H, kSnapQkChunks, [&](long long row) {
    return a.q + (q0 + row / H) * a.sq0 + (row % H) * a.sq1;
  });
  snap_copy_rows(a.data + p.off_kx, p.tokens, kSnapQkChunks, [&](long long row) { return a.kx + (q0 + row) * a.skx; });
  snap_copy_rows(a.data + p.off_vx, p.tokens, kSnapVChunks, [&](long long row) { return a.vx + (q0 + row) * a.svx; });
  snap_copy_rows(a.data + p.off_o, p.tokens * H, kSnapVChunks, [&](long long row) {
    return a.o + (q0 + row / H) * a.so0 + (row % H) * a.so1;
  });
  snap_copy_rows(a.data + p.off_s, p.tokens * H, kSnapVChunks, [&](long long row) {
    return a.o_alt + (q0 + row / H) * a.sa0 + (row % H) * a.sa1;
  });
  const long long kv0 = p.kv0;
  snap_copy_rows(a.data + p.off_kv, p.rows, kSnapQkChunks, [&](long long row) {
    return a.kv + snap_index(a.kv_indices, a.ki64, kv0 + row) * a.skv;
  });
}

// The header's description of a completed snapshot (one thread of the finishing block).
__device__ void snapshot_describe(const SnapshotArgs& a, const SnapPlan& p, long long call_id) {
  long long* h = a.header;
  h[CUTOVER_SNAP_FORMAT] = CUTOVER_SNAPSHOT_FORMAT;
  h[CUTOVER_SNAP_LAYER] = a.layer;
  h[CUTOVER_SNAP_CALL] = call_id;
  h[CUTOVER_SNAP_FROM_GRAPH] = a.from_graph;
  h[CUTOVER_SNAP_BATCH] = a.B;
  h[CUTOVER_SNAP_KEPT] = p.kept;
  h[CUTOVER_SNAP_TOKENS] = p.tokens;
  h[CUTOVER_SNAP_TOKENS_TOTAL] = snap_index(a.qo_indptr, a.qo64, a.B) - p.q0;
  h[CUTOVER_SNAP_ROWS] = p.rows;
  h[CUTOVER_SNAP_ROWS_TOTAL] = snap_index(a.kv_indptr, a.kv64, a.B) - p.kv0;
  h[CUTOVER_SNAP_MASK_BYTES] = a.mask != nullptr ? p.mask_bytes : -1;
  h[CUTOVER_SNAP_HEADS] = a.H;
  h[CUTOVER_SNAP_MAX_EXTEND] = a.T;
  h[CUTOVER_SNAP_IS_CAUSAL] = a.is_causal;
  h[CUTOVER_SNAP_SM_SCALE] = __double_as_longlong((double)a.sm_scale);
  h[CUTOVER_SNAP_K_SCALE] = __double_as_longlong((double)(a.k_scale_ptr ? *a.k_scale_ptr : a.k_scale));
  h[CUTOVER_SNAP_V_SCALE] = __double_as_longlong((double)(a.v_scale_ptr ? *a.v_scale_ptr : a.v_scale));
  h[CUTOVER_SNAP_OFF_QO_INDPTR] = p.off_qo;
  h[CUTOVER_SNAP_OFF_KV_INDPTR] = p.off_kv_indptr;
  h[CUTOVER_SNAP_OFF_MASK] = p.off_mask;
  h[CUTOVER_SNAP_OFF_Q] = p.off_q;
  h[CUTOVER_SNAP_OFF_K_EXTEND] = p.off_kx;
  h[CUTOVER_SNAP_OFF_V_EXTEND] = p.off_vx;
  h[CUTOVER_SNAP_OFF_O] = p.off_o;
  h[CUTOVER_SNAP_OFF_O_ALT] = p.off_s;
  h[CUTOVER_SNAP_OFF_KV] = p.off_kv;
  h[CUTOVER_SNAP_END] = p.end;
}

// Launched as a programmatic dependent of the kernel before it (the shadow epilogue): it waits for it at entry.
__global__ void __launch_bounds__(kSnapThreads, 1) snapshot_kernel(const SnapshotArgs a) {
  grid_dependency_wait();
  volatile long long* header = a.header;
  const long long token = header[CUTOVER_SNAP_ARM];
  if ((token & kSnapLow20) != a.layer + 1) return;
  if (static_cast<const volatile int32_t*>(a.enable)[1] == 0) return;  // not a shadow sample: stays armed
  const long long call_id = static_cast<const volatile int32_t*>(a.gate_state)[2];
  __shared__ SnapPlan plan;
  if (threadIdx.x == 0) {
    header[CUTOVER_SNAP_WRITING] = token;
    __threadfence_system();  // a reader that sees any of this launch's data sees WRITING changed
  }
  snapshot_plan(a, &plan);
  snapshot_copy(a, plan);
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence_system();
  // ticket: [call id: 24 bits][layer + 1: 20 bits][blocks done: 20 bits]
  unsigned long long* ticket = reinterpret_cast<unsigned long long*>(a.header + CUTOVER_SNAP_TICKET);
  const unsigned long long key = ((unsigned long long)(call_id & 0xFFFFFF) << 20) | (unsigned long long)(a.layer + 1);
  unsigned long long seen = *ticket, want;
  while (true) {
    want = (seen >> 20) == key ? seen + 1 : (key << 20) | 1ULL;
    const unsigned long long old = atomicCAS(ticket, seen, want);
    if (old == seen) break;
    seen = old;
  }
  if ((long long)(want & kSnapLow20) != gridDim.x) return;
  snapshot_describe(a, plan, call_id);
  __threadfence_system();
  header[CUTOVER_SNAP_COMPLETED] = token;
  __threadfence_system();
  atomicCAS(reinterpret_cast<unsigned long long*>(a.header + CUTOVER_SNAP_ARM), (unsigned long long)token, 0ULL);
}

}  // namespace cutover
