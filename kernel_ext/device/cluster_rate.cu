// What merging split partials inside a thread-block cluster would cost on the H200 (docs/perf.md, "What would
// close the gap", item 4; results/ab_v47_h200/call1/: it would cost more than it saves, so the kernel does not):
//  1. how many CTAs of the wgmma main kernel's shape (256 threads, WgmmaTiles::SMEM_BYTES of shared memory) can be
//     resident at once in clusters of 1, 2, 4, 8 or 16 (cudaOccupancyMaxActiveClusters; 16 is queried, not timed):
//     below 132 the plan's one wave of splits would not fit;
//  2. the epilogue with and without a merge. Every CTA holds a 64 x 512 fp32 O in the wgmma accumulator layout
//     (128 values per thread, 256 threads), as the main kernel after its last tile. Size 1: each CTA stores its
//     fp16 partial (64 KB), as the kernel does today. Size S: CTA r of a cluster owns rows [64 r / S, 64 (r + 1) / S);
//     every CTA writes the other ranks' rows of its O into their shared memory (st.shared::cluster), the cluster
//     synchronises, and each CTA adds what it received to its own rows and stores 64 / S rows of fp16 partial, so
//     the cluster writes one partial where S CTAs wrote S (and the combine reads S times less).
// Timed with CUDA events over back-to-back launches of up to 132 CTAs (a multiple of S), against the same kernel
// with no epilogue; and per CTA with %globaltimer from the epilogue's start to its end. Each row is printed as soon
// as it is measured. Sizes up to 8 only: a warp's 8 rows of one accumulator half then share an owner, as
// store_row_sectors's full-warp shuffles need (at 16 half a warp would store, and its shuffles would wait forever).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernel_ext/csrc kernel_ext/device/cluster_rate.cu
//   ./a.out [json path]
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "verify_wgmma.cuh"

using namespace cutover;
namespace cg = cooperative_groups;

constexpr int kThreads = 256, kRows = 64, kLaunches = 50;

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_));             \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// S: cluster size. work == 0: the same kernel without the epilogue (launch and residency cost alone).
template <int S>
__global__ void __launch_bounds__(kThreads, 1) epilogue_kernel(__half* part, int work, long long* ns) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  float* const recv = reinterpret_cast<float*>(smem_raw);  // [S - 1 sources][64 / S rows][512]
  constexpr int kOwn = kRows / S;
  static_assert(kOwn >= 8, "each warp's 8 rows of an accumulator half must have one owner");
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid & 127) >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
  const int r_lo = warp * 16 + g;  // rows r_lo and r_lo + 8, dims wg * 256 + 8 j + 2 cq (+1): m64n256 layout
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = (float)((tid * 131 + i * 7 + blockIdx.x) & 1023) * 1e-3f;
  int rank = 0;
  if constexpr (S > 1) {
    rank = (int)cg::this_cluster().block_rank();
    cg::this_cluster().sync();  // every CTA of the cluster has started: its shared memory may be written
  } else {
    __syncthreads();
  }
  const unsigned long long t0 = global_ns();
  if (work) {
    if constexpr (S > 1) {
      auto cluster = cg::this_cluster();
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = r_lo + hf * 8, owner = row / kOwn;
        if (owner == rank) continue;
        const int source = (rank - owner - 1 + S) % S;  // this CTA's slot in the owner's buffer
        float* const dst = cluster.map_shared_rank(recv, owner) +
                           ((size_t)source * kOwn + (row - owner * kOwn)) * kDimV + wg * 256 + 2 * cq;
#pragma unroll
        for (int j = 0; j < 32; ++j)
          *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[j * 4 + hf * 2], acc[j * 4 + hf * 2 + 1]);
      }
      cluster.sync();  // every row's contributions have landed
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = r_lo + hf * 8;
        if (row / kOwn != rank) continue;
        for (int source = 0; source < S - 1; ++source) {
          const float* src = recv + ((size_t)source * kOwn + (row - rank * kOwn)) * kDimV + wg * 256 + 2 * cq;
#pragma unroll
          for (int j = 0; j < 32; ++j) {
            const float2 v = *reinterpret_cast<const float2*>(src + j * 8);
            acc[j * 4 + hf * 2] += v.x;
            acc[j * 4 + hf * 2 + 1] += v.y;
          }
        }
      }
    }
    // The owned rows of the cluster's partial (all 64 rows at size 1), fp16 in whole sectors as the kernel stores.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = r_lo + hf * 8;
      if (S > 1 && row / kOwn != rank) continue;  // uniform per warp: a warp's 8 rows of one hf share an owner
      __half* const dst = part + ((size_t)(blockIdx.x / S) * kRows + row) * kDimV + wg * 256;
      store_row_sectors<32>(kFullWarp, dst, cq,
                            [&](int j) { return make_float2(acc[j * 4 + hf * 2], acc[j * 4 + hf * 2 + 1]); });
    }
  }
  __syncthreads();
  if (tid == 0) ns[blockIdx.x] = (long long)(global_ns() - t0);
}

struct Result {
  int size, clusters, resident, grid;
  float empty_us, epilogue_us;
  double cta_ns_median, cta_ns_max;
};

using EpilogueKernel = void (*)(__half*, int, long long*);

// Launch configuration of `grid` CTAs of the main kernel's shape in clusters of `size` (attr: its one attribute).
cudaLaunchConfig_t cluster_config(int size, int grid, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = size;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = WgmmaTiles::SMEM_BYTES;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Clusters of `size` that can be resident at once (0 where none can, or the size is refused).
int max_active_clusters(EpilogueKernel kernel, int size) {
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WgmmaTiles::SMEM_BYTES));
  if (size > 8) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(size, 132 / size * size, &attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

void print_row(const Result& r) {
  std::printf("%7d  %12d  %13d  %4d  %8.2f  %11.2f  %19.2f  %14.2f / %.2f  %18.0f  %21.0f\n", r.size, r.clusters,
              r.resident, r.grid, r.empty_us, r.epilogue_us, r.epilogue_us - r.empty_us, r.cta_ns_median / 1000.0,
              r.cta_ns_max / 1000.0, 64.0 / r.size, 128.0 * (r.size - 1) / r.size);
  std::fflush(stdout);
}

template <int S>
Result measure(__half* part, long long* ns_dev) {
  const EpilogueKernel kernel = epilogue_kernel<S>;
  const int clusters = max_active_clusters(kernel, S);
  Result r{S, clusters, clusters * S, std::min(132 / S * S, clusters * S), 0.f, 0.f, 0.0, 0.0};
  if (r.grid == 0) return r;  // not resident at all: reported, not timed
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(S, r.grid, &attr);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int work = 0; work < 2; ++work) {
    for (int i = 0; i < 5; ++i) CHECK(cudaLaunchKernelEx(&cfg, kernel, part, work, ns_dev));
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < kLaunches; ++i) CHECK(cudaLaunchKernelEx(&cfg, kernel, part, work, ns_dev));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    (work ? r.epilogue_us : r.empty_us) = ms * 1000.f / kLaunches;
  }
  std::vector<long long> ns(r.grid);
  CHECK(cudaMemcpy(ns.data(), ns_dev, r.grid * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(ns.begin(), ns.end());
  r.cta_ns_median = (double)ns[r.grid / 2];
  r.cta_ns_max = (double)ns.back();
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return r;
}

int main(int argc, char** argv) {
  __half* part = nullptr;
  long long* ns = nullptr;
  CHECK(cudaMalloc(&part, (size_t)132 * kRows * kDimV * sizeof(__half)));
  CHECK(cudaMalloc(&ns, 132 * sizeof(long long)));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; CTAs of 256 threads and %d bytes of shared memory\n", prop.name,
              prop.multiProcessorCount, WgmmaTiles::SMEM_BYTES);
  std::printf("cluster  max clusters  resident CTAs  grid  empty us  epilogue us  epilogue - empty us  "
              "CTA epilogue us (median / max)  partial KB per CTA  DSMEM KB sent per CTA\n");
  std::fflush(stdout);
  std::vector<Result> results;
  auto add = [&](const Result& r) {
    print_row(r);
    results.push_back(r);
  };
  add(measure<1>(part, ns));
  add(measure<2>(part, ns));
  add(measure<4>(part, ns));
  add(measure<8>(part, ns));
  const int clusters16 = max_active_clusters(epilogue_kernel<8>, 16);  // residency only (not timed: see the top)
  add(Result{16, clusters16, clusters16 * 16, 0, 0.f, 0.f, 0.0, 0.0});
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", argv[1]);
      return 1;
    }
    std::fprintf(f, "{\"gpu\": \"%s\", \"sms\": %d, \"smem_per_cta\": %d, \"rows\": [", prop.name,
                 prop.multiProcessorCount, WgmmaTiles::SMEM_BYTES);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f, "%s{\"cluster\": %d, \"max_clusters\": %d, \"resident_ctas\": %d, \"grid\": %d, "
                   "\"empty_us\": %.3f, \"epilogue_us\": %.3f, \"cta_epilogue_us_median\": %.3f, "
                   "\"cta_epilogue_us_max\": %.3f}", i ? ", " : "", r.size, r.clusters, r.resident, r.grid,
                   r.empty_us, r.epilogue_us, r.cta_ns_median / 1000.0, r.cta_ns_max / 1000.0);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  CHECK(cudaFree(part));
  CHECK(cudaFree(ns));
  return 0;
}
