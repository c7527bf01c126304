// Profiling marks: phase timestamps of every CTA, compiled only into a profiling build (CUTOVER_PROFILE, set by
// `python -m kernel_ext.build --profile`). In every other build phase_mark and PhaseLoopWaits are empty and the
// library holds neither the marks nor their entry point.
// Thread 0 of a CTA writes %globaltimer (ns) and clock64 (SM cycles) at each mark; the combine's end is the
// latest of its warps. Thread 0 of a main-kernel CTA also counts its tiles and sums the cycles it spends at the
// top of each (PhaseLoopWaits): in its copy wait, in its wait for the previous P V, and at the barrier after them.
// cutover_debug_phase_times (verify_api.cu) copies the marks to the host and zeroes them.
#pragma once

#include <cstdint>

namespace cutover {

enum PhaseKernel { kPhaseMain = 0, kPhaseCombine = 1 };

#ifdef CUTOVER_PROFILE
constexpr int kPhaseSlots = 9;     // marks (0-6) and facts (7, 8) per CTA
constexpr int kPhaseCtas = 4096;   // CTAs recorded per kernel (main, combine)

// The GPU's nanosecond clock (%globaltimer), shared by every SM.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// [kernel][cta][slot][0: globaltimer ns, 1: clock64]; slot 7 holds the CTA's iteration count and its loop-top
// copy-wait cycles, slot 8 its loop-top P V-wait and barrier cycles
__device__ unsigned long long g_phase[2][kPhaseCtas][kPhaseSlots][2];

// This CTA's row of g_phase, or nullptr past kPhaseCtas.
__device__ __forceinline__ unsigned long long (*phase_row(PhaseKernel kernel))[2] {
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  return cta < kPhaseCtas ? g_phase[kernel][cta] : nullptr;
}

__device__ __forceinline__ void phase_mark(PhaseKernel kernel, int slot) {
  if (threadIdx.x != 0) return;
  if (auto row = phase_row(kernel)) {
    row[slot][0] = global_ns();
    row[slot][1] = clock64();
  }
}

// The latest mark of any warp of the CTA (lane 0 of each warp).
__device__ __forceinline__ void phase_mark_last_warp(PhaseKernel kernel, int slot) {
  if ((threadIdx.x & 31) != 0) return;
  if (auto row = phase_row(kernel)) {
    atomicMax(&row[slot][0], global_ns());
    atomicMax(&row[slot][1], (unsigned long long)clock64());
  }
}

struct PhaseLoopWaits {
  long long t = 0, tiles = 0, copies = 0, pv = 0, barrier = 0;
  __device__ __forceinline__ void start() {
    ++tiles;
    t = clock64();
  }
  __device__ __forceinline__ void lap(long long& sum) {
    const long long now = clock64();
    sum += now - t;
    t = now;
  }
  __device__ __forceinline__ void copies_done() { lap(copies); }
  __device__ __forceinline__ void pv_done() { lap(pv); }
  __device__ __forceinline__ void barrier_done() { lap(barrier); }
  __device__ __forceinline__ void store(PhaseKernel kernel) const {
    if (threadIdx.x != 0) return;
    if (auto row = phase_row(kernel)) {
      row[7][0] = (unsigned long long)tiles;
      row[7][1] = (unsigned long long)copies;
      row[8][0] = (unsigned long long)pv;
      row[8][1] = (unsigned long long)barrier;
    }
  }
};
#else
__device__ __forceinline__ void phase_mark(PhaseKernel, int) {}
__device__ __forceinline__ void phase_mark_last_warp(PhaseKernel, int) {}

struct PhaseLoopWaits {
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void copies_done() {}
  __device__ __forceinline__ void pv_done() {}
  __device__ __forceinline__ void barrier_done() {}
  __device__ __forceinline__ void store(PhaseKernel) const {}
};
#endif

}  // namespace cutover
