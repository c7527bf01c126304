// The work plan of a verify call: which key range of which request each main-kernel CTA takes.
//
// Every request's work (its prefix keys plus kTailKeys for the draft tail, which costs about one tile) is split
// into ~G_target equal key ranges (>= kMinSplitKeys, aligned), at least one split per request; the last split
// takes the draft tail and so that much less of the prefix (possibly none). Main-kernel CTA y takes work item y.
// The splits fit one wave of G_target CTAs where that costs at most twice the first chunk (total / G_target);
// otherwise (a long request among more requests than a wave has CTAs) they run in waves of first-chunk splits.
// Bounds: sum of splits <= G_target + B = G; partial slots <= 2 * G_target (plan_work_item says why).
// Every main-kernel CTA computes the plan for itself at its start (no launch of its own, no host reads). It reads
// index tensors only, so with early start it runs before the grid wait, while the kernel before the call finishes.
// One warp computes it (lane l takes requests l, l + 32, ...): shuffles only, no block-wide barrier per step.
// Its request loops are not unrolled: every CTA runs this code once, and half the code (10.8 KB of SASS instead
// of 21 KB up to the first barrier) starts the CTA's stream 0.1-0.3 us sooner.
#pragma once

#include <stdint.h>

#include "mma_primitives.cuh"
#include "verify_args.cuh"
#include "warp_reduce.cuh"

namespace cutover {

constexpr int kSplitAlign = 64;              // split boundaries fall on multiples of this many keys
constexpr int kMinSplitKeys = 128;           // no split smaller than this (partials would cost more than keys)
constexpr int kTailKeys = 64;                // the plan counts a request's draft tail as this many keys (one tile)

// The plan's per-request arithmetic is 32-bit (a 64-bit division is a long software routine), as is a work item's
// key range: prefixes below 2^31 keys, far beyond any KV pool.
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
// keys, the longest bucket first, request order within a bucket (within 2 % of exact longest first on the
// benchmark's mixed grid; over request order it gains ~5 % on batches whose lengths spread over 1.25x, ~15 % over
// 2x). Only a call of more than G_target / 2 requests can have more items than G_target: at twice the first
// chunk c0 = total / G_target a call has fewer than total / (2 c0) + B <= G_target / 2 + B splits, so with
// B <= G_target / 2 the chunk never grows past 2 c0 (no waves) and one wave holds every item. The host launches
// the kernels' LONGEST_FIRST instances for those calls only, so no other call runs a line of this code (inline in
// every call, it costs them ~1 %).
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
// kKeptRounds rounds (a call of up to 128 requests reads its prefix lengths and divides once).
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
// line, so that it leaves the schedule of the kernels' main loop alone (inline, it moves it). The second pass reads the
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
  // As in request order (plan_work_item), written out in both places: a helper shared by the two moves the
  // registers of the request-order instances, and costs every call 0.2-0.4 %.
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
// it costs).
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
    // The second pass evens the first chunk (one copy of the evening code: the plan's code runs cold).
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

}  // namespace cutover
