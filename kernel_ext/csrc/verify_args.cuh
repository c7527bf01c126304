// What every kernel of a verify call shares: the head dimensions, the argument block (KernelArgs), where the call
// writes (output_choice), and the format of the partial outputs that the main kernels write and the combine merges.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <stdint.h>

namespace cutover {

constexpr int kDimQK = 576;
constexpr int kDimV = 512;

// The tensors of a verify call (SGLang's buffers, strides in elements), as the verify kernels and the snapshot
// kernel both read them: the first members of KernelArgs and SnapshotArgs.
struct VerifyTensors {
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
};

struct KernelArgs : VerifyTensors {
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

}  // namespace cutover
