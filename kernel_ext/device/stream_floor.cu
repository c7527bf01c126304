// The data movement of a split verify call without its arithmetic: how close to the memory roofline any kernel
// of this structure (one CTA per SM, each gathering its split's page-size-1 KV rows through two 72-KB stages, then
// writing a partial that a second kernel merges) can come on the H200, timed as the benchmark times the kernel
// (each launch queued behind a spin kernel, CUDA events around it, fresh rows every repetition).
//
// Steps, each adding to the one before: "launch" (the grid with the kernel's shared memory, nothing done), "kv"
// (the split's 64-key tiles gathered with the kernel's gather_row, two in flight), "q" (+ the request's 72-KB Q
// tile in the first copy group, as the kernel loads it), "partial" (+ a 64-KB fp16 partial and its 512 B of row
// statistics stored per CTA, the epilogue's bytes), "combine" (+ a programmatic dependent kernel reading every
// partial once with all SMs, the least a separate merge pass can cost).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/stream_floor.cu
//   ./a.out [json path]
// docs/perf.md ("Limits") reads its table. -DSTREAM_FLOOR_EVICT_FIRST=1 gathers with the kernel's evict-first L2
// hint; with nvcc 13.0 some of that build's copies disassemble as `LDGSTS [R+UR0], desc[UR1]` (the kernel's never
// do) and fail with "illegal instruction" on the H200, so the default build gathers without the hint.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "dependent_launch.cuh"
#include "verify_wgmma.cuh"

using namespace cutover;

#ifndef STREAM_FLOOR_EVICT_FIRST
#define STREAM_FLOOR_EVICT_FIRST 0
#endif

constexpr int kRows = 64, kDim = 576, kBlocks = kDim / 64, kTileBytes = kBlocks * 64 * 128;
constexpr int kThreads = 256;
constexpr int kPartialBytes = kRows * 512 * 2, kStatBytes = kRows * 8;
constexpr long long kPoolRows = 4LL << 20;  // 4.8 GB of KV rows, far more than L2
constexpr int kSmem = 3 * kTileBytes + 1024;
constexpr long long kSpinCycles = 200000;  // ~100 us at the H200's clock, as kernel_ext.cudagraph.BUSY_CYCLES
enum Step { kLaunch, kKv, kQ, kPartial, kCombine };
const char* const kStepNames[] = {"launch", "kv", "q", "partial", "combine"};

struct Split {  // CTA c serves request c / splits, its tiles from (c % splits) * tiles_per_split on
  int splits, tiles_per_split, tiles_per_request, q_rows;
};

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void __launch_bounds__(kThreads, 1) stream_kernel(const __nv_bfloat16* pool, const int* ids,
                                                              const __nv_bfloat16* q, Split s, int step,
                                                              unsigned char* partials, unsigned* sink) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, request = blockIdx.x / s.splits, split = blockIdx.x % s.splits;
  const int t_begin = split * s.tiles_per_split;
  const int n_tiles = max(0, min(s.tiles_per_split, s.tiles_per_request - t_begin));
  if (step == kLaunch || n_tiles == 0) return;
  const uint32_t q_tile = smem_u32(smem), stages = q_tile + kTileBytes;
  const int* my_ids = ids + ((long long)request * s.tiles_per_request + t_begin) * kRows;
  const int row0 = tid >> 3, row1 = row0 + 32;  // this thread's rows of every tile (8 threads per row)
  // Row ids travel one tile ahead in registers, as the kernel stages them one tile ahead in shared memory.
  auto ids_of = [&](int t, int* out) {
    out[0] = t < n_tiles ? my_ids[t * kRows + row0] : 0;
    out[1] = t < n_tiles ? my_ids[t * kRows + row1] : 0;
  };
  const uint64_t policy = STREAM_FLOOR_EVICT_FIRST ? l2_evict_first_policy() : 0;
  auto gather = [&](int t, const int* id) {
    // Row validity is a run-time test, as in the kernel (a zero-filling copy; ids are never negative).
    const uint32_t stage = stages + (t & 1) * kTileBytes;
    gather_row<kBlocks, STREAM_FLOOR_EVICT_FIRST>(stage, row0, tid & 7, pool + (long long)id[0] * kDim, id[0] >= 0,
                                                  pool, policy);
    gather_row<kBlocks, STREAM_FLOOR_EVICT_FIRST>(stage, row1, tid & 7, pool + (long long)id[1] * kDim, id[1] >= 0,
                                                  pool, policy);
  };
  if (step >= kQ) {
    gather_row<kBlocks>(q_tile, row0, tid & 7, q + ((long long)request * kRows + row0) * kDim, row0 < s.q_rows, q);
    gather_row<kBlocks>(q_tile, row1, tid & 7, q + ((long long)request * kRows + row1) * kDim, row1 < s.q_rows, q);
  }
  int id0[2], id1[2], next[2];
  ids_of(0, id0);
  ids_of(1, id1);
  gather(0, id0);
  cp_async_commit();
  if (n_tiles > 1) gather(1, id1);
  cp_async_commit();
  ids_of(2, next);
  unsigned acc = 0;
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<1>();
    __syncthreads();
    acc ^= *reinterpret_cast<const unsigned*>(smem + kTileBytes + (t & 1) * kTileBytes + tid * 16);
    __syncthreads();  // the stage is free again
    if (t + 2 < n_tiles) {
      gather(t + 2, next);
      ids_of(t + 3, next);
    }
    cp_async_commit();
  }
  grid_dependency_release();
  if (step >= kPartial) {  // the epilogue's bytes: 64 rows x 512 fp16 and 64 row statistics, 16-byte stores
    uint4* dst = reinterpret_cast<uint4*>(partials + (long long)blockIdx.x * (kPartialBytes + kStatBytes));
    const uint4* src = reinterpret_cast<const uint4*>(smem + kTileBytes);
    for (int i = tid; i < (kPartialBytes + kStatBytes) / 16; i += kThreads) dst[i] = src[i];
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}

// Every partial read once (16-byte loads over all SMs), after the stream kernel's grid completed.
__global__ void combine_kernel(const uint4* partials, long long n16, unsigned* sink) {
  grid_dependency_wait();
  unsigned acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += stride) {
    const uint4 v = partials[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[1] = acc;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of the work `launch()` enqueues on the default stream, queued behind the spin kernel (~100 us, as
// kernel_ext.cudagraph.time_queued) and timed by CUDA events around it. A CUDA error ends the program.
template <class Launch>
float queued_ms(Launch launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  spin_kernel<<<1, 32>>>(kSpinCycles);
  cudaEventRecord(e0);
  launch();
  cudaEventRecord(e1);
  const cudaError_t err = cudaEventSynchronize(e1);
  if (err != cudaSuccess) {
    fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
    exit(1);
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

// Device copy, bytes read + written per second, as kernel_ext.bench measures its ceiling.
double copy_rate() {
  const size_t n = 1 << 30;
  void *a, *b;
  cudaMalloc(&a, n);
  cudaMalloc(&b, n);
  auto copy = [&] { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice); };
  for (int i = 0; i < 200; ++i) copy();
  std::vector<float> ms;
  for (int i = 0; i < 50; ++i) ms.push_back(queued_ms(copy));
  cudaFree(a);
  cudaFree(b);
  return 2.0 * n / (median(ms) * 1e-3);
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount;
  const double copy = copy_rate();
  __nv_bfloat16 *pool, *q;
  cudaMalloc(&pool, kPoolRows * kDim * 2);
  cudaMemset(pool, 0, kPoolRows * kDim * 2);
  cudaMalloc(&q, 64LL * kRows * kDim * 2);
  cudaMemset(q, 0, 64LL * kRows * kDim * 2);
  unsigned char* partials;
  cudaMalloc(&partials, (long long)sms * (kPartialBytes + kStatBytes));
  unsigned* sink;
  cudaMalloc(&sink, 64);
  cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);

  const long long ids_per_set = 1LL << 20;  // the largest shape's keys
  const int sets = 4;
  std::vector<int> h_ids(ids_per_set * sets);
  std::mt19937_64 gen(1);
  for (auto& v : h_ids) v = (int)(gen() % kPoolRows);
  int* ids;
  cudaMalloc(&ids, h_ids.size() * sizeof(int));
  cudaMemcpy(ids, h_ids.data(), h_ids.size() * sizeof(int), cudaMemcpyHostToDevice);

  FILE* json = argc > 1 ? fopen(argv[1], "w") : nullptr;
  if (json)
    fprintf(json, "{\"gpu\": \"%s\", \"sms\": %d, \"copy_gbs\": %.1f, \"evict_first\": %d, \"rows\": [\n", prop.name,
            sms, copy / 1e9, STREAM_FLOOR_EVICT_FIRST);
  printf("%s, %d SMs, device copy %.0f GB/s; H 8, T 8 (64 rows); us and %% of the memory floor\n", prop.name, sms,
         copy / 1e9);
  printf("%6s %6s %9s |", "batch", "prefix", "floor us");
  for (const char* n : kStepNames) printf(" %15s", n);
  printf("\n");
  const int shapes[][2] = {{1, 65536}, {4, 16384}, {16, 4096}, {64, 1024}, {4, 65536}, {16, 16384}, {16, 65536}};
  bool first = true;
  for (const auto& sh : shapes) {
    const int batch = sh[0], prefix = sh[1], H = 8, T = 8;
    Split s;
    s.tiles_per_request = prefix / kRows;
    s.q_rows = H * T;
    const int want = std::max(1, sms / batch);
    s.tiles_per_split = (s.tiles_per_request + want - 1) / want;
    s.splits = (s.tiles_per_request + s.tiles_per_split - 1) / s.tiles_per_split;
    const int grid = batch * s.splits;
    // kernel_ext.bench's min_bytes (int64 row ids)
    const double bytes = (double)batch * prefix * (kDim * 2 + 8) + (double)batch * T * H * (576 + 512) * 2 +
                         (double)batch * T * (576 + 512) * 2 + (double)batch * T * T;
    const double floor_us = bytes / copy * 1e6;
    const int reps = 24;
    printf("%6d %6d %9.1f |", batch, prefix, floor_us);
    if (json) fprintf(json, "%s  {\"batch\": %d, \"prefix\": %d, \"grid\": %d, \"tiles_per_split\": %d, "
                      "\"floor_us\": %.3f", first ? "" : ",\n", batch, prefix, grid, s.tiles_per_split, floor_us);
    first = false;
    for (int step = kLaunch; step <= kCombine; ++step) {
      std::vector<float> ms;
      for (int r = 0; r < reps + 2; ++r) {  // the first two warm up
        const int* set = ids + (long long)(r % sets) * ids_per_set;
        const float t = queued_ms([&] {
          stream_kernel<<<grid, kThreads, kSmem>>>(pool, set, q, s, step, partials, sink);
          if (step == kCombine)
            launch_dependent(combine_kernel, dim3(8 * sms), 256, 0, cudaStream_t(0), (const uint4*)partials,
                             (long long)grid * (kPartialBytes + kStatBytes) / 16, sink);
        });
        if (r >= 2) ms.push_back(t);
      }
      const float us = median(ms) * 1e3f;
      printf(" %8.1f %5.1f%%", us, 100 * floor_us / us);
      if (json) fprintf(json, ", \"%s_us\": %.3f", kStepNames[step], us);
    }
    printf("\n");
    if (json) fprintf(json, "}");
  }
  if (json) { fprintf(json, "\n]}\n"); fclose(json); }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err)); return 1; }
  return 0;
}
