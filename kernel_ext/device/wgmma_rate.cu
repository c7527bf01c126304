// Throughput of the warpgroup MMA forms the verify kernel uses (and its alternatives), on one SM-full of CTAs:
// cycles per instruction, FLOP per cycle per SM and shared-memory operand bytes per cycle per SM, with one or
// two warpgroups issuing. Operands are zeros in 128B-swizzled shared memory; only the rate is measured.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/wgmma_rate.cu
//   ./a.out [json path]
#include <cstdio>
#include <cuda_runtime.h>

#include "mma_primitives.cuh"
#include "wgmma_primitives.cuh"

using namespace cutover;

enum Form { kS_n32, kS_n64, kPV_ss };
struct FormInfo { const char* name; int n; int a_bytes, b_bytes; };
constexpr FormInfo kForms[] = {
    {"m64n32k16  A smem, B smem K-major  (S up to v18: each warpgroup 32 keys)", 32, 2048, 1024},
    {"m64n64k16  A smem, B smem K-major  (S since v24: one warpgroup, 64 keys)", 64, 2048, 2048},
    {"m64n256k16 A smem, B smem MN-major (P V, today)", 256, 2048, 8192},
};
constexpr int kIters = 2048, kBatch = 8;  // instructions per warpgroup; committed and waited in batches

template <int FORM>
__global__ void __launch_bounds__(256, 1) rate_kernel(int warpgroups, long long* cycles) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  for (int i = threadIdx.x; i < 96 * 1024 / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0;
  fence_proxy_async();
  __syncthreads();
  const int wg = threadIdx.x >> 7;
  const uint32_t base = smem_u32(smem) + wg * 16 * 1024;
  const uint64_t da = desc_k_major(base), db_k = desc_k_major(base + 32 * 1024);
  const uint64_t db_mn = desc_mn_major(base + 32 * 1024, 8192);
  float s32[16] = {}, s64[32] = {}, o[128] = {};
  __syncthreads();
  const long long t0 = clock64();
  if (wg < warpgroups) {
    for (int it = 0; it < kIters / kBatch; ++it) {
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if constexpr (FORM == kS_n32) wgmma_m64n32k16_kk(s32, da, db_k, 1);
        else if constexpr (FORM == kS_n64) wgmma_m64n64k16_kk(s64, da, db_k, 1);
        else wgmma_m64n256k16_kmn(o, da, db_mn);
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
  }
  __syncthreads();
  const long long t1 = clock64();
  float sink = 0.f;
  for (float v : s32) sink += v;
  for (float v : s64) sink += v;
  for (float v : o) sink += v;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0 + (sink == 12345.f);
}

template <int FORM>
double measure(int warpgroups, int sms, long long* d_cycles) {
  const int smem = 97 * 1024;
  cudaFuncSetAttribute(rate_kernel<FORM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  rate_kernel<FORM><<<sms, 256, smem>>>(warpgroups, d_cycles);  // warm-up
  rate_kernel<FORM><<<sms, 256, smem>>>(warpgroups, d_cycles);
  long long h[1024];
  cudaMemcpy(h, d_cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
  double sum = 0;
  for (int i = 0; i < sms; ++i) sum += (double)h[i];
  return sum / sms / (double)(kIters * warpgroups);  // SM cycles per instruction
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount;
  long long* d_cycles;
  cudaMalloc(&d_cycles, 1024 * sizeof(long long));
  FILE* json = argc > 1 ? fopen(argv[1], "w") : nullptr;
  if (json) fprintf(json, "{\"gpu\": \"%s\", \"sms\": %d, \"rows\": [\n", prop.name, sms);
  printf("%s, %d SMs; cycles per instruction with 1 and 2 warpgroups issuing per SM\n", prop.name, sms);
  printf("%-70s %6s %9s %9s %11s\n", "form", "wgs", "cyc/inst", "FLOP/cyc", "smem B/cyc");
  bool first = true;
  for (int f = 0; f < 3; ++f) {
    for (int wgs = 1; wgs <= 2; ++wgs) {
      const double c = f == 0 ? measure<kS_n32>(wgs, sms, d_cycles)
                       : f == 1 ? measure<kS_n64>(wgs, sms, d_cycles) : measure<kPV_ss>(wgs, sms, d_cycles);
      const FormInfo& fi = kForms[f];
      const double flop = 2.0 * 64 * fi.n * 16, bytes = fi.a_bytes + fi.b_bytes;
      printf("%-70s %6d %9.1f %9.0f %11.1f\n", fi.name, wgs, c, flop / c, bytes / c);
      if (json)
        fprintf(json, "%s  {\"form\": \"%s\", \"warpgroups\": %d, \"cycles_per_inst\": %.2f, \"flop_per_cycle\": %.1f, "
                "\"operand_bytes_per_cycle\": %.2f}", first ? "" : ",\n", fi.name, wgs, c, flop / c, bytes / c);
      first = false;
    }
  }
  if (json) { fprintf(json, "\n]}\n"); fclose(json); }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err)); return 1; }
  return 0;
}
