// Hopper (sm_90a) warpgroup MMA primitives: shared-memory matrix descriptors, wgmma.mma_async wrappers and the
// fences around them. Only compiled into the sm_90a image (the callers guard with __CUDA_ARCH_FEAT_SM90_ALL).
//
// Shared-memory operands use the 128-byte swizzle: a matrix is stored as column blocks of 64 bf16 (128-byte
// lines, one line per row), and inside each 1024-byte group of 8 lines the 16-byte piece p of line r sits at
// piece p ^ (r % 8). Blocks must start 1024-byte aligned. PTX ISA "Shared Memory Matrix Layout" and "Matrix
// Descriptor Format" define the fields used here.
#pragma once

#include <stdint.h>

namespace cutover {

// Byte offset of 16-byte piece `piece` (0..7) of 128-byte line `line` in a 128B-swizzled block.
__device__ __forceinline__ uint32_t swizzle128(uint32_t line, uint32_t piece) {
  return line * 128u + ((piece ^ (line & 7u)) << 4);
}

// Matrix descriptor (64-bit): start address, leading and stride byte offsets (all >> 4), 128B swizzle mode.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t smem_addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)(lead_bytes >> 4) << 16) |
         ((uint64_t)(stride_bytes >> 4) << 32) | (1ull << 62);
}
// K-major operand (rows of 128-byte lines along K): 8-row groups 1024 bytes apart; the lead offset is unused.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t smem_addr) { return smem_desc_sw128(smem_addr, 16, 1024); }
// MN-major operand (lines along N, one line per k): N blocks of 64 elements `block_bytes` apart, 8-k groups 1024 apart.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t smem_addr, uint32_t block_bytes) {
  return smem_desc_sw128(smem_addr, block_bytes, 1024);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Writes by ordinary stores or cp.async become visible to wgmma (the async proxy) after this fence + a barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads/writes across an asynchronous wgmma.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The inline-PTX operands of the fp32 accumulators d[i] .. d[i + 7], read and written by the wgmma below.
#define CUTOVER_ACC8(i)                                                                                    \
  "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]),   \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])

// d[64 x 64] (+)= A[64 x 16] * B[16 x 64]; A and B K-major in shared memory (bf16), d fp32. accumulate == 0
// overwrites d (its old value is not read).
__device__ __forceinline__ void wgmma_m64n64k16_kk(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : CUTOVER_ACC8(0), CUTOVER_ACC8(8), CUTOVER_ACC8(16), CUTOVER_ACC8(24)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64 x 256] += A[64 x 16] * B[16 x 256]; A K-major, B MN-major (transposed) in shared memory, d fp32.
__device__ __forceinline__ void wgmma_m64n256k16_kmn(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : CUTOVER_ACC8(0), CUTOVER_ACC8(8), CUTOVER_ACC8(16), CUTOVER_ACC8(24), CUTOVER_ACC8(32), CUTOVER_ACC8(40),
        CUTOVER_ACC8(48), CUTOVER_ACC8(56), CUTOVER_ACC8(64), CUTOVER_ACC8(72), CUTOVER_ACC8(80), CUTOVER_ACC8(88),
        CUTOVER_ACC8(96), CUTOVER_ACC8(104), CUTOVER_ACC8(112), CUTOVER_ACC8(120)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

#undef CUTOVER_ACC8

}  // namespace cutover
