// How fast one SM can gather 64 scattered KV rows (576 bf16 each) into a 128B-swizzled shared-memory tile, the
// load the verify kernel does per 64-key tile: with cp.async from all 256 threads, 4 per row (the kernel up to v7)
// or 8 per row (the kernel's gather_row since v13), or with bulk tensor copies (TMA) of one 128-byte line each,
// issued by 1, 2 or 4 warps. One to three tiles in flight; every SM gathering distinct rows (served by HBM) or
// groups of 16 SMs gathering the same rows (mostly L2, as the 16 row tiles of an H x T = 1024 split do). Nothing
// is computed: the gather alone is timed.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/gather_rate.cu
//   ./a.out [json path]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "verify_wgmma.cuh"

using namespace cutover;

constexpr int kRows = 64, kDim = 576, kBlocks = kDim / 64, kBlockBytes = 64 * 128, kTileBytes = kBlocks * kBlockBytes;
constexpr int kThreads = 256, kTiles = 256, kStages = 3;  // tiles per CTA, tile buffers
constexpr long long kPoolRows = 1 << 20;   // 1.2 GB of KV rows

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// One 64-element (128-byte) line of pool row `row`, column block `blk`, to shared address `dst`.
__device__ __forceinline__ void tma_line(uint32_t dst, const CUtensorMap* map, int blk, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(blk * 64), "r"(row), "r"(bar) : "memory");
}

// mode 0 / 2: cp.async by all threads, 4 / 8 per row; mode 1: TMA lines by `warps` warps. in_flight: 1 to 3 tiles.
__global__ void __launch_bounds__(kThreads, 1) gather_kernel(const __grid_constant__ CUtensorMap map,
                                                             const __nv_bfloat16* pool, const int* ids, int mode,
                                                             int warps, int in_flight, int share,
                                                             long long* cycles) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t tiles = smem_u32(smem), bars = smem_u32(smem + kStages * kTileBytes);
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) mbar_init(bars + 8 * st, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int* my_ids = ids + (long long)(blockIdx.x / share) * kTiles * kRows;
  auto issue = [&](int t) {
    const uint32_t dst = tiles + (t % kStages) * kTileBytes;
    const int* tid_rows = my_ids + t * kRows;
    if (mode == 0) {  // 4 threads per row, each 16 B of a half line per copy (the kernel's pattern up to v7)
      const int row = tid >> 2, gq = tid & 3;
      const uint32_t line = dst + row * 128;
      const uint32_t sw0 = (uint32_t)(gq ^ (row & 7)) << 4, sw1 = (uint32_t)((gq + 4) ^ (row & 7)) << 4;
      const char* from = reinterpret_cast<const char*>(pool + (long long)tid_rows[row] * kDim + gq * 8);
#pragma unroll
      for (int k = 0; k < 2 * kBlocks; ++k)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(line + (k >> 1) * kBlockBytes + ((k & 1) ? sw1 : sw0)),
                     "l"(from + k * 64));
      cp_async_commit();
    } else if (mode == 2) {  // the kernel's gather (gather_row): 8 threads per row, whole 128-byte lines per warp
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = (tid >> 3) + 32 * half;
        gather_row<kBlocks>(dst, row, tid & 7, pool + (long long)tid_rows[row] * kDim, true, pool);
      }
      cp_async_commit();
    } else if (tid < warps * 32) {
      const uint32_t bar = bars + 8 * (t % kStages);
      if (tid == 0) mbar_expect(bar, kTileBytes);
      __syncwarp();
      for (int k = tid; k < kRows * kBlocks; k += warps * 32) {
        const int row = k / kBlocks, blk = k - row * kBlocks;
        tma_line(dst + blk * kBlockBytes + row * 128, &map, blk, tid_rows[row], bar);
      }
    }
  };
  auto wait = [&](int t) {
    if (mode != 1) {
      if (in_flight == 3) cp_async_wait<2>(); else if (in_flight == 2) cp_async_wait<1>(); else cp_async_wait<0>();
    } else {
      mbar_wait(bars + 8 * (t % kStages), (t / kStages) & 1);
    }
    __syncthreads();
  };
  const long long t0 = clock64();
  for (int t = 0; t < in_flight - 1; ++t) issue(t);
  for (int t = 0; t < kTiles; ++t) {
    if (t + in_flight - 1 < kTiles) issue(t + in_flight - 1);
    else if (mode != 1) cp_async_commit();  // keeps wait_group N meaning "tile t landed"
    wait(t);
  }
  const long long t1 = clock64();
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount;
  __nv_bfloat16* pool;
  cudaMalloc(&pool, kPoolRows * kDim * 2);
  cudaMemset(pool, 0, kPoolRows * kDim * 2);
  std::vector<int> h_ids((size_t)sms * kTiles * kRows);
  srand(1);
  for (auto& v : h_ids) v = (int)(((long long)rand() * 65536 + rand()) % kPoolRows);
  int* ids;
  cudaMalloc(&ids, h_ids.size() * sizeof(int));
  cudaMemcpy(ids, h_ids.data(), h_ids.size() * sizeof(int), cudaMemcpyHostToDevice);
  long long* d_cycles;
  cudaMalloc(&d_cycles, 1024 * sizeof(long long));

  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !fn) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 1;
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {kDim, (cuuint64_t)kPoolRows}, strides[1] = {kDim * 2};
  const cuuint32_t box[2] = {64, 1}, estr[2] = {1, 1};
  const CUresult rc = reinterpret_cast<EncodeTiled>(fn)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pool, dims, strides,
                                                        box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) { fprintf(stderr, "tensor map: error %d\n", (int)rc); return 1; }

  const int smem = kStages * kTileBytes + 1024 + 64;
  cudaFuncSetAttribute(gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  FILE* json = argc > 1 ? fopen(argv[1], "w") : nullptr;
  if (json) fprintf(json, "{\"gpu\": \"%s\", \"sms\": %d, \"tile_bytes\": %d, \"rows\": [\n", prop.name, sms, kTileBytes);
  printf("%s, %d SMs, %d tiles of 64 x 576 bf16 per SM\n", prop.name, sms, kTiles);
  printf("%-30s %6s %8s %11s %13s %9s\n", "gather", "share", "inflight", "cyc/tile", "B/cyc/SM", "GB/s");
  struct Case { const char* name; int mode, warps; };
  const Case cases[] = {{"cp.async, 4 threads per row", 0, 0}, {"cp.async, 8 threads per row", 2, 0},
                        {"TMA lines, 1 warp", 1, 1}, {"TMA lines, 2 warps", 1, 2}, {"TMA lines, 4 warps", 1, 4}};
  bool first = true;
  for (const Case& c : cases)
    for (int share : {1, 16})
      for (int inflight : {1, 2, 3}) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        gather_kernel<<<sms, kThreads, smem>>>(map, pool, ids, c.mode, c.warps, inflight, share, d_cycles);
        cudaEventRecord(e0);
        gather_kernel<<<sms, kThreads, smem>>>(map, pool, ids, c.mode, c.warps, inflight, share, d_cycles);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        long long h[1024];
        cudaMemcpy(h, d_cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
        double sum = 0;
        for (int i = 0; i < sms; ++i) sum += (double)h[i];
        const double cyc = sum / sms / kTiles, gbs = (double)sms * kTiles * kTileBytes / (ms * 1e6);
        printf("%-30s %6d %8d %11.0f %13.1f %9.0f\n", c.name, share, inflight, cyc, kTileBytes / cyc, gbs);
        if (json)
          fprintf(json, "%s  {\"gather\": \"%s\", \"share\": %d, \"in_flight\": %d, \"cycles_per_tile\": %.1f, "
                  "\"bytes_per_cycle_per_sm\": %.2f, \"gb_per_s\": %.1f}", first ? "" : ",\n", c.name, share, inflight,
                  cyc, kTileBytes / cyc, gbs);
        first = false;
      }
  if (json) { fprintf(json, "\n]}\n"); fclose(json); }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err)); return 1; }
  return 0;
}
