// Warp-level primitives shared by the verify kernels: cp.async with zero fill, named barriers, ldmatrix, mma.sync
// bf16.
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate) runs on sm_80, sm_90 and sm_120 alike.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace cutover {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; src_bytes == 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Barrier `id` (1-15) of `threads` threads (whole warps): a group of a block's warps waits for one another, and
// shared-memory writes before it are visible to the group after it. Unlike __syncthreads (bar.sync, which is
// barrier.sync.aligned: every thread at the same instruction) these may be reached from different places in the
// code, as warps with different roles do.
__device__ __forceinline__ void sync_threads_of(int id, int threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The whole block's barrier (id 0), reachable from different places in the code.
__device__ __forceinline__ void sync_block() { asm volatile("barrier.sync 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// d += a * b for one 16x8x16 tile. Fragment layouts: PTX ISA, "mma.m16n8k16" (g = lane/4, c = lane%4):
// a: rows g/g+8, cols 2c..2c+1 / 2c+8..; b: k rows 2c..2c+1 / 2c+8.., col g; d: rows g/g+8, cols 2c, 2c+1.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Index tensors come as int32 or int64 (SGLang uses both); read either as int64.
__device__ __forceinline__ int64_t load_index(const void* p, int64_t i, int is_int64) {
  return is_int64 ? __ldg(static_cast<const long long*>(p) + i) : (int64_t)__ldg(static_cast<const int*>(p) + i);
}

}  // namespace cutover
