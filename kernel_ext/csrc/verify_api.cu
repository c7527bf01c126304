// Host side of libcutover_verify.so: argument checks, workspace layout, launches, error reporting.
// Every CUDA call and launch is checked; failures return a CutoverStatus with a message in
// cutover_last_error(). Nothing here synchronises or allocates: the call is CUDA-graph capturable.
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "cutover_verify.h"
#include "dependent_launch.cuh"
#include "shadow_epilogue.cuh"
#include "snapshot.cuh"
#include "verify_kernels.cuh"
#include "verify_wgmma.cuh"

#ifndef CUTOVER_TARGETS
#define CUTOVER_TARGETS "unknown"
#endif

namespace {

using namespace cutover;

thread_local char g_error[1024] = "";

int fail(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof(g_error), fmt, ap);
  va_end(ap);
  return code;
}

#define CUTOVER_CUDA_CHECK(expr, what)                                                             \
  do {                                                                                             \
    cudaError_t err_ = (expr);                                                                     \
    if (err_ != cudaSuccess)                                                                       \
      return fail(CUTOVER_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorName(err_), cudaGetErrorString(err_)); \
  } while (0)

// Makes a device current for one scope and restores the caller's device on every way out, errors included.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  cudaError_t enter(int device) {
    int current = 0;
    cudaError_t err = cudaGetDevice(&current);
    if (err != cudaSuccess || current == device) return err;
    if ((err = cudaSetDevice(device)) == cudaSuccess) previous_ = current;
    return err;
  }

 private:
  int previous_ = -1;
};

constexpr int kMaxDevices = 64;

struct DeviceInfo {
  bool ready = false;
  int smem_optin = 0;
  int large_blocks_per_sm = 0;
  int small_blocks_per_sm = 0;
  bool large_tiles = false;  // enough shared memory, and the large-tile body is compiled for the arch (below 12.0)
  bool wgmma = false;  // Hopper (sm_90): the wgmma main kernel of the sm_90a image serves
};
DeviceInfo g_devices[kMaxDevices];
std::mutex g_devices_mutex;

// Both plan orders of a main kernel (LONGEST_FIRST false and true) get the shared-memory attribute.
template <class C, typename IdxT>
int prepare_main_kernel(int* blocks_per_sm) {
  for (auto kernel : {verify_main_kernel<C, IdxT, false>, verify_main_kernel<C, IdxT, true>})
    CUTOVER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES),
                       "cudaFuncSetAttribute(max dynamic shared memory)");
  CUTOVER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, verify_main_kernel<C, IdxT, false>,
                                                                   C::THREADS, C::SMEM_BYTES),
                     "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return CUTOVER_OK;
}

template <typename IdxT, int PARTS>
int prepare_wgmma_kernel() {
  for (auto kernel : {verify_wgmma_kernel<IdxT, PARTS, false>, verify_wgmma_kernel<IdxT, PARTS, true>})
    CUTOVER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WgmmaTiles::SMEM_BYTES),
                       "cudaFuncSetAttribute(max dynamic shared memory, wgmma kernel)");
  return CUTOVER_OK;
}

// Per-device, once: shared-memory limit, kernel attributes, occupancy. Host-only queries (capture safe).
int device_info(int device, const DeviceInfo** out) {
  if (device < 0 || device >= kMaxDevices) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "device %d out of range", device);
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  DeviceInfo& d = g_devices[device];
  if (!d.ready) {
    ScopedDevice on_device;
    CUTOVER_CUDA_CHECK(on_device.enter(device), "cudaSetDevice");
    CUTOVER_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                       "cudaDeviceGetAttribute(shared memory per block)");
    int major = 0;
    CUTOVER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                       "cudaDeviceGetAttribute(compute capability)");
    int rc = CUTOVER_OK, dummy = 0;
    // verify_main_kernel compiles the large-tile body out for __CUDA_ARCH__ >= 1200 (verify_mma.cuh): on
    // such a device they would launch and return at once, whatever its shared memory
    d.large_tiles = major < 12 && d.smem_optin >= LargeTiles::SMEM_BYTES;
    if (d.large_tiles) {
      if ((rc = prepare_main_kernel<LargeTiles, int>(&d.large_blocks_per_sm)) != CUTOVER_OK) return rc;
      if ((rc = prepare_main_kernel<LargeTiles, long long>(&dummy)) != CUTOVER_OK) return rc;
    }
    if (d.smem_optin >= SmallTiles::SMEM_BYTES) {
      if ((rc = prepare_main_kernel<SmallTiles, int>(&d.small_blocks_per_sm)) != CUTOVER_OK) return rc;
      if ((rc = prepare_main_kernel<SmallTiles, long long>(&dummy)) != CUTOVER_OK) return rc;
    }
    if (major == 9 && d.smem_optin >= WgmmaTiles::SMEM_BYTES) {
      if ((rc = prepare_wgmma_kernel<int, 1>()) != CUTOVER_OK) return rc;
      if ((rc = prepare_wgmma_kernel<long long, 1>()) != CUTOVER_OK) return rc;
      if ((rc = prepare_wgmma_kernel<int, 4>()) != CUTOVER_OK) return rc;
      if ((rc = prepare_wgmma_kernel<long long, 4>()) != CUTOVER_OK) return rc;
      d.wgmma = true;
    }
    d.ready = true;
  }
  *out = &d;
  return CUTOVER_OK;
}

// The launch geometry: everything derives from host-known shapes, never from tensor contents.
struct Plan {
  int config;      // 1 large, 2 small, 3 wgmma (sm_90)
  int m_tile;
  int threads;
  int smem;
  int row_tiles;   // ceil(T*H / m_tile)
  int g_target;    // CTAs worth of prefix splits
  int g;           // g_target + batch: upper bound of splits
  int rcap;        // rows per request = T*H
  int slots;       // partial slots = 2 * g_target
  int64_t off_lse, off_o, bytes;
};

int64_t align256(int64_t x) { return (x + 255) / 256 * 256; }

int make_plan(int32_t batch, int32_t heads, int32_t max_extend, int32_t num_sms, int32_t config, int device,
              Plan* p) {
  if (batch < 1) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "batch must be >= 1, got %d", batch);
  if (heads < 1 || heads > 128) return fail(CUTOVER_ERR_UNSUPPORTED, "num_heads %d outside 1..128", heads);
  if (max_extend < 1 || max_extend > 64)
    return fail(CUTOVER_ERR_UNSUPPORTED, "max_extend (draft tokens per request) %d outside 1..64", max_extend);
  if (num_sms < 1) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "num_sms must be >= 1, got %d", num_sms);
  const DeviceInfo* d = nullptr;
  int rc = device_info(device, &d);
  if (rc != CUTOVER_OK) return rc;
  if (config == 0) config = d->wgmma ? 3 : (d->large_tiles ? 1 : 2);
  if (config == 3 && !d->wgmma)
    return fail(CUTOVER_ERR_UNSUPPORTED, "the wgmma kernel (config 3) runs on sm_90 devices only");
  if (config == 1 && !d->large_tiles)
    return fail(CUTOVER_ERR_UNSUPPORTED, "large tiles need %d bytes of shared memory per block (device has %d) "
                "and a compute capability below 12.0 (their body is not compiled for 12.x)",
                LargeTiles::SMEM_BYTES, d->smem_optin);
  if (config == 2 && d->smem_optin < SmallTiles::SMEM_BYTES)
    return fail(CUTOVER_ERR_UNSUPPORTED, "small tiles need %d bytes of shared memory per block, device has %d",
                SmallTiles::SMEM_BYTES, d->smem_optin);
  if (config < 1 || config > 3)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "config must be 0, 1, 2 or 3, got %d", config);
  p->config = config;
  p->m_tile = config == 1 ? LargeTiles::M_TILE : config == 2 ? SmallTiles::M_TILE : WgmmaTiles::M_TILE;
  p->threads = config == 1 ? LargeTiles::THREADS : config == 2 ? SmallTiles::THREADS : WgmmaTiles::THREADS;
  p->smem = config == 1 ? LargeTiles::SMEM_BYTES : config == 2 ? SmallTiles::SMEM_BYTES : WgmmaTiles::SMEM_BYTES;
  const int per_sm = config == 1 ? d->large_blocks_per_sm : config == 2 ? d->small_blocks_per_sm : 1;
  if (per_sm < 1) return fail(CUTOVER_ERR_UNSUPPORTED, "the verify kernel cannot be resident on this device");
  p->rcap = heads * max_extend;
  p->row_tiles = (p->rcap + p->m_tile - 1) / p->m_tile;
  p->g_target = num_sms * per_sm / p->row_tiles;
  if (p->g_target < 1) p->g_target = 1;
  p->g = p->g_target + batch;
  p->slots = 2 * p->g_target;
  p->off_lse = align256((int64_t)batch * sizeof(int2));  // req[B] first
  p->off_o = p->off_lse + align256((int64_t)p->slots * p->rcap * sizeof(float2));
  p->bytes = p->off_o + (int64_t)p->slots * p->rcap * kDimV * sizeof(__half);
  return CUTOVER_OK;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int check_index_dtype(int dtype, const char* name) {
  if (dtype != CUTOVER_DTYPE_INT32 && dtype != CUTOVER_DTYPE_INT64)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "%s must be INT32 or INT64, got dtype code %d", name, dtype);
  return CUTOVER_OK;
}

int check_params(const CutoverVerifyParams* a) {
  if (a == nullptr) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "params is NULL");
  if (a->struct_size != sizeof(CutoverVerifyParams))
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "params.struct_size %u != %zu: caller built against another ABI",
                a->struct_size, sizeof(CutoverVerifyParams));
  if (a->head_dim_qk != kDimQK || a->head_dim_v != kDimV)
    return fail(CUTOVER_ERR_UNSUPPORTED, "head dims %d/%d: only 576/512 (MLA absorbed) are served", a->head_dim_qk,
                a->head_dim_v);
  struct { const void* p; const char* name; } required[] = {
      {a->q, "q"}, {a->k_extend, "k_extend"}, {a->v_extend, "v_extend"}, {a->o, "o"},
      {a->kv_buffer, "kv_buffer"}, {a->qo_indptr, "qo_indptr"}, {a->kv_indptr, "kv_indptr"},
      {a->workspace, "workspace"}};  // kv_indices may be NULL (an empty tensor) when every prefix is empty
  for (auto& r : required)
    if (r.p == nullptr) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "%s is NULL", r.name);
  int rc;
  if ((rc = check_index_dtype(a->qo_indptr_dtype, "qo_indptr")) != CUTOVER_OK) return rc;
  if ((rc = check_index_dtype(a->kv_indptr_dtype, "kv_indptr")) != CUTOVER_OK) return rc;
  if ((rc = check_index_dtype(a->kv_indices_dtype, "kv_indices")) != CUTOVER_OK) return rc;
  if (a->custom_mask != nullptr) {
    if (a->custom_mask_dtype != CUTOVER_DTYPE_UINT8)
      return fail(CUTOVER_ERR_INVALID_ARGUMENT, "custom_mask must be a 1-byte type (UINT8), got dtype code %d",
                  a->custom_mask_dtype);
    if (a->mask_indptr == nullptr) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "mask_indptr is NULL with a custom_mask");
    if ((rc = check_index_dtype(a->mask_indptr_dtype, "mask_indptr")) != CUTOVER_OK) return rc;
  }
  // 16-byte vector loads/stores: base pointers 16-byte aligned, row strides multiples of 8 elements.
  struct { const void* p; int64_t s0, s1; const char* name; } vec[] = {
      {a->q, a->q_stride_token, a->q_stride_head, "q"},
      {a->k_extend, a->k_extend_stride_token, 8, "k_extend"},
      {a->v_extend, a->v_extend_stride_token, 8, "v_extend"},
      {a->o, a->o_stride_token, a->o_stride_head, "o"},
      {a->kv_buffer, a->kv_buffer_stride_row, 8, "kv_buffer"},
      {a->o_alt, a->o_alt_stride_token, a->o_alt_stride_head, "o_alt"}};
  if (a->early_start != 0 && a->early_start != 1)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "early_start must be 0 or 1, got %d", a->early_start);
  if (a->o_alt != nullptr && a->enable == nullptr)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "o_alt needs the enable flags {serve, sample} (enable is NULL)");
  const int checked = a->o_alt != nullptr ? 6 : 5;  // o_alt is optional
  for (int i = 0; i < checked; ++i) {
    const auto& v = vec[i];
    if (!aligned16(v.p) || v.s0 % 8 != 0 || v.s1 % 8 != 0 || v.s0 <= 0 || v.s1 <= 0)
      return fail(CUTOVER_ERR_UNSUPPORTED, "%s: pointer not 16-byte aligned or strides (%lld, %lld) not positive "
                  "multiples of 8 elements", v.name, (long long)v.s0, (long long)v.s1);
  }
  if (!aligned16(a->workspace)) return fail(CUTOVER_ERR_WORKSPACE, "workspace is not 16-byte aligned");
  return CUTOVER_OK;
}

// What KernelArgs and SnapshotArgs both take from the call's parameters: its tensors (VerifyTensors), the dtypes
// of qo_indptr, kv_indptr and mask_indptr, its shape, causality, scales and enable flags.
template <class Args>
void set_call(Args& k, const CutoverVerifyParams* a) {
  k.q = static_cast<const __nv_bfloat16*>(a->q);
  k.sq0 = a->q_stride_token; k.sq1 = a->q_stride_head;
  k.kx = static_cast<const __nv_bfloat16*>(a->k_extend); k.skx = a->k_extend_stride_token;
  k.vx = static_cast<const __nv_bfloat16*>(a->v_extend); k.svx = a->v_extend_stride_token;
  k.o = static_cast<__nv_bfloat16*>(a->o);
  k.so0 = a->o_stride_token; k.so1 = a->o_stride_head;
  k.o_alt = static_cast<__nv_bfloat16*>(a->o_alt);
  k.sa0 = a->o_alt_stride_token; k.sa1 = a->o_alt_stride_head;
  k.kv = static_cast<const __nv_bfloat16*>(a->kv_buffer); k.skv = a->kv_buffer_stride_row;
  k.qo_indptr = a->qo_indptr; k.kv_indptr = a->kv_indptr; k.kv_indices = a->kv_indices;
  k.mask = static_cast<const uint8_t*>(a->custom_mask); k.mask_indptr = a->mask_indptr;
  k.qo64 = a->qo_indptr_dtype == CUTOVER_DTYPE_INT64;
  k.kv64 = a->kv_indptr_dtype == CUTOVER_DTYPE_INT64;
  k.mi64 = a->mask_indptr_dtype == CUTOVER_DTYPE_INT64;
  k.is_causal = a->is_causal != 0;
  k.B = a->batch; k.H = a->num_heads; k.T = a->max_extend;
  k.sm_scale = a->sm_scale; k.k_scale = a->k_scale; k.v_scale = a->v_scale;
  k.k_scale_ptr = a->k_scale_ptr; k.v_scale_ptr = a->v_scale_ptr;
  k.enable = a->enable;
}

// The plan's main kernel (`kernel32` / `kernel64` by the kv_indices dtype) on its grid. With early_start it is a
// programmatic dependent of the kernel before it (e.g. the gate): its CTAs plan and read their first row ids
// while that kernel runs, then wait for it (CutoverVerifyParams.early_start says what the caller guarantees).
int launch_main(void (*kernel32)(KernelArgs), void (*kernel64)(KernelArgs), const Plan& p, const KernelArgs& k,
                int idx64, bool early_start, cudaStream_t stream) {
  void (*kernel)(KernelArgs) = idx64 ? kernel64 : kernel32;
  const char* what = p.config == 3 ? "launch of verify_wgmma_kernel" : "launch of verify_main_kernel";
  CUTOVER_CUDA_CHECK(launch_on_stream(early_start, kernel, dim3(p.row_tiles, p.g), p.threads, p.smem, stream, k), what);
  return CUTOVER_OK;
}

// The plan's configuration's main kernel, in the plan order LONGEST_FIRST.
template <bool LONGEST_FIRST>
int launch_configured_main(const Plan& p, const KernelArgs& k, int idx64, bool early_start, cudaStream_t stream) {
  // The wgmma kernel issues each tile's P V in four parts where a split's keys serve several row tiles (they come
  // from L2: compute-bound), and in one where a single row tile streams them from HBM (there four parts are 3-6 %
  // slower), which also gathers its keys evict-first (read once).
  if (p.config == 3)
    return p.row_tiles > 1 ? launch_main(verify_wgmma_kernel<int, 4, LONGEST_FIRST>,
                                         verify_wgmma_kernel<long long, 4, LONGEST_FIRST>, p, k, idx64, early_start, stream)
                           : launch_main(verify_wgmma_kernel<int, 1, LONGEST_FIRST>,
                                         verify_wgmma_kernel<long long, 1, LONGEST_FIRST>, p, k, idx64, early_start, stream);
  if (p.config == 1)
    return launch_main(verify_main_kernel<LargeTiles, int, LONGEST_FIRST>,
                       verify_main_kernel<LargeTiles, long long, LONGEST_FIRST>, p, k, idx64, early_start, stream);
  return launch_main(verify_main_kernel<SmallTiles, int, LONGEST_FIRST>,
                     verify_main_kernel<SmallTiles, long long, LONGEST_FIRST>, p, k, idx64, early_start, stream);
}

// The combine kernel in layout L (CombineLayout): one warp per (row, slice), at most 8 blocks per SM, as a
// programmatic dependent of the main kernel. With LONG_PASS, where a request can have more splits than
// L::LONG_REQUEST (`max_splits`: the plan's partial slots), two more blocks per SM run the long-request pass.
template <class L, bool LONG_PASS = false>
int launch_combine(long long rows, int max_splits, int num_sms, const KernelArgs& k, cudaStream_t stream) {
  const long long warps = rows * L::SLICES;
  const long long wanted = (warps + kCombineThreads / 32 - 1) / (kCombineThreads / 32);
  const int blocks = (int)(wanted < 8LL * num_sms ? wanted : 8LL * num_sms);
  const cudaError_t err =
      LONG_PASS && max_splits > L::LONG_REQUEST
          ? launch_dependent(verify_combine_kernel<L, LONG_PASS>, dim3(blocks + 2 * num_sms), kCombineThreads, 0,
                             stream, k, 2 * num_sms)
          : launch_dependent(verify_combine_kernel<L, false>, dim3(blocks), kCombineThreads, 0, stream, k, 0);
  CUTOVER_CUDA_CHECK(err, "launch of verify_combine_kernel");
  return CUTOVER_OK;
}

}  // namespace

extern "C" {

int cutover_abi_version(void) { return CUTOVER_ABI_VERSION; }

const char* cutover_last_error(void) { return g_error; }

const char* cutover_build_targets(void) { return CUTOVER_TARGETS; }

int cutover_check_device(int device) {
  int count = 0;
  CUTOVER_CUDA_CHECK(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "no CUDA device %d (%d present)", device, count);
  int major = 0, minor = 0;
  CUTOVER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  CUTOVER_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  ScopedDevice on_device;
  CUTOVER_CUDA_CHECK(on_device.enter(device), "cudaSetDevice");
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, verify_combine_kernel<CombineTwoSplits, false>);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();
    return fail(CUTOVER_ERR_ARCH, "device %d is sm_%d%d; this library holds kernels for %s only: rebuild with "
                "this arch (cutover build --arch sm_%d%d)", device, major, minor, CUTOVER_TARGETS, major, minor);
  }
  CUTOVER_CUDA_CHECK(err, "cudaFuncGetAttributes");
  const DeviceInfo* d = nullptr;
  int rc = device_info(device, &d);
  if (rc != CUTOVER_OK) return rc;
  if (d->smem_optin < SmallTiles::SMEM_BYTES)
    return fail(CUTOVER_ERR_ARCH, "device %d offers %d bytes of shared memory per block; the kernel needs %d", device,
                d->smem_optin, SmallTiles::SMEM_BYTES);
  return CUTOVER_OK;
}

int64_t cutover_workspace_bytes(int32_t batch, int32_t num_heads, int32_t max_extend, int32_t num_sms, int32_t config,
                                int device) {
  Plan p;
  if (make_plan(batch, num_heads, max_extend, num_sms, config, device, &p) != CUTOVER_OK) return -1;
  return p.bytes;
}

int cutover_verify_attention(const CutoverVerifyParams* a, cudaStream_t stream) {
  int rc = check_params(a);
  if (rc != CUTOVER_OK) return rc;
  int device = 0;
  CUTOVER_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  Plan p;
  if ((rc = make_plan(a->batch, a->num_heads, a->max_extend, a->num_sms, a->config, device, &p)) != CUTOVER_OK)
    return rc;
  if (a->workspace_bytes < p.bytes)
    return fail(CUTOVER_ERR_WORKSPACE, "workspace has %lld bytes, this call needs %lld (cutover_workspace_bytes)",
                (long long)a->workspace_bytes, (long long)p.bytes);

  KernelArgs k;
  set_call(k, a);
  char* ws = static_cast<char*>(a->workspace);
  k.req = reinterpret_cast<int2*>(ws);
  k.part_lse = reinterpret_cast<float2*>(ws + p.off_lse);
  k.part_o = reinterpret_cast<__half*>(ws + p.off_o);
  k.G_target = p.g_target; k.rcap = p.rcap;

  const int idx64 = a->kv_indices_dtype == CUTOVER_DTYPE_INT64;
  const bool early = a->early_start != 0;
  // Only a call of more than g_target / 2 requests can have more work items than a wave (the plan's waves, or a
  // request per item beyond g_target): those calls take the instances that may order the items longest first
  // (plan_work_item); the others run request-order instances, which hold none of that code.
  rc = 2LL * a->batch > p.g_target ? launch_configured_main<true>(p, k, idx64, early, stream)
                                   : launch_configured_main<false>(p, k, idx64, early, stream);
  if (rc != CUTOVER_OK) return rc;
  // The plan fits all splits in one wave of g_target CTAs, so equal requests get at most g_target / batch each.
  const long long rows = (long long)a->batch * p.rcap;
  const int splits = p.g_target / a->batch;
  // Where requests get few splits each, a long request among them can get many: those layouts have the
  // long-request pass.
  if (splits <= CombineTwoSplits::SPLITS_PER_PASS)
    return launch_combine<CombineTwoSplits, true>(rows, p.slots, a->num_sms, k, stream);
  if (splits <= CombineFewSplits::SPLITS_PER_PASS)
    return launch_combine<CombineFewSplits, true>(rows, p.slots, a->num_sms, k, stream);
  const long long wave = (long long)a->num_sms * (kCombineThreads / 32);  // warps at one block per SM
  if (splits > CombineManySplits::LONG_SPLITS_PER_PASS) {
    if (rows * CombineLongSplits::SLICES <= wave)
      return launch_combine<CombineLongSplits>(rows, p.slots, a->num_sms, k, stream);
    if (rows * CombineLongSplitsMoreRows::SLICES <= wave)
      return launch_combine<CombineLongSplitsMoreRows>(rows, p.slots, a->num_sms, k, stream);
  }
  return launch_combine<CombineManySplits>(rows, p.slots, a->num_sms, k, stream);
}

int cutover_verify_gate(int32_t* gate_state, const void* qo_indptr, void* qo_indptr_gated, int64_t n,
                        int indptr_is_int64, int32_t* custom_enable, cudaStream_t stream) {
  if (gate_state == nullptr || qo_indptr == nullptr || qo_indptr_gated == nullptr || custom_enable == nullptr)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "verify_gate: a pointer argument is NULL");
  if (n < 1) return fail(CUTOVER_ERR_INVALID_ARGUMENT, "verify_gate: n must be >= 1, got %lld", (long long)n);
  CUTOVER_CUDA_CHECK(launch_dependent(verify_gate_kernel, dim3(1), 256, 0, stream, gate_state, qo_indptr,
                                      qo_indptr_gated, n, indptr_is_int64, custom_enable),
                     "launch of verify_gate_kernel");
  return CUTOVER_OK;
}

int cutover_shadow_accumulate(const void* o, int64_t o_stride_token, int64_t o_stride_head, const void* scratch,
                              int64_t scratch_stride_token, int64_t scratch_stride_head, int64_t tokens,
                              int32_t heads, const int32_t* enable, double* counters, const double* bin_edges,
                              int32_t num_edges, void* workspace, cudaStream_t stream) {
  if (o == nullptr || scratch == nullptr || enable == nullptr || counters == nullptr || workspace == nullptr ||
      (bin_edges == nullptr && num_edges > 0))
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "shadow_accumulate: a pointer argument is NULL");
  if (tokens < 0 || heads < 1 || num_edges < 0 || tokens * heads >= (1LL << 31))
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "shadow_accumulate: tokens %lld, heads %d, num_edges %d out of range",
                (long long)tokens, heads, num_edges);
  struct { const void* p; int64_t s0, s1; const char* name; } vec[] = {
      {o, o_stride_token, o_stride_head, "o"}, {scratch, scratch_stride_token, scratch_stride_head, "scratch"}};
  for (auto& v : vec)
    if (!aligned16(v.p) || v.s0 % 8 != 0 || v.s1 % 8 != 0 || v.s0 <= 0 || v.s1 <= 0)
      return fail(CUTOVER_ERR_INVALID_ARGUMENT, "shadow_accumulate: %s not 16-byte aligned or strides (%lld, %lld) "
                  "not positive multiples of 8 elements", v.name, (long long)v.s0, (long long)v.s1);
  if (!aligned16(workspace)) return fail(CUTOVER_ERR_WORKSPACE, "shadow_accumulate: workspace is not 16-byte aligned");
  ShadowArgs k;
  k.o = static_cast<const __nv_bfloat16*>(o); k.so0 = o_stride_token; k.so1 = o_stride_head;
  k.s = static_cast<const __nv_bfloat16*>(scratch); k.ss0 = scratch_stride_token; k.ss1 = scratch_stride_head;
  k.rows = (long long)tokens * heads; k.H = heads;
  k.enable = enable; k.counters = counters; k.edges = bin_edges; k.n_edges = num_edges;
  k.partials = static_cast<float4*>(workspace);
  k.ticket = reinterpret_cast<unsigned int*>(static_cast<char*>(workspace) + kShadowMaxBlocks * sizeof(float4));
  const long long per_block = (long long)kShadowThreads * kShadowChunksPerThread;
  const long long wanted = (k.rows * kShadowRowChunks + per_block - 1) / per_block;
  const int blocks = (int)(wanted < 1 ? 1 : (wanted > kShadowMaxBlocks ? kShadowMaxBlocks : wanted));
  CUTOVER_CUDA_CHECK(launch_dependent(shadow_accumulate_kernel, dim3(blocks), kShadowThreads, 0, stream, k),
                     "launch of shadow_accumulate_kernel");
  return CUTOVER_OK;
}

int cutover_verify_snapshot(const CutoverVerifyParams* call, const int32_t* gate_state, int32_t layer,
                            int32_t from_graph, cudaStream_t stream) {
  int rc = check_params(call);
  if (rc != CUTOVER_OK) return rc;
  if (call->o_alt == nullptr || call->enable == nullptr || gate_state == nullptr)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "verify_snapshot: o_alt, enable and gate_state are required");
  if (layer < 0 || layer >= (1 << 20) - 1)
    return fail(CUTOVER_ERR_INVALID_ARGUMENT, "verify_snapshot: layer %d out of range", layer);
  const long long header_bytes = CUTOVER_SNAPSHOT_HEADER_WORDS * 8LL;
  if (call->workspace_bytes < header_bytes)
    return fail(CUTOVER_ERR_WORKSPACE, "verify_snapshot: staging area of %lld bytes, the header alone needs %lld",
                (long long)call->workspace_bytes, header_bytes);
  SnapshotArgs k;
  set_call(k, call);
  k.ki64 = call->kv_indices_dtype == CUTOVER_DTYPE_INT64;
  k.layer = layer; k.from_graph = from_graph != 0;
  k.gate_state = gate_state;
  k.header = static_cast<long long*>(call->workspace);
  k.data = static_cast<uint8_t*>(call->workspace) + header_bytes;
  k.capacity = call->workspace_bytes - header_bytes;
  CUTOVER_CUDA_CHECK(launch_dependent(snapshot_kernel, dim3(kSnapBlocks), kSnapThreads, 0, stream, k),
                     "launch of snapshot_kernel");
  return CUTOVER_OK;
}

#ifdef CUTOVER_PROFILE
// Copies the phase marks (phase_clock.cuh: [2][kPhaseCtas][kPhaseSlots][2] uint64) to `host`, then zeroes them.
// Only in a profiling build (python -m kernel_ext.build --profile).
CUTOVER_API int cutover_debug_phase_times(void* host) {
  CUTOVER_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  CUTOVER_CUDA_CHECK(cudaMemcpyFromSymbol(host, g_phase, sizeof(g_phase)), "cudaMemcpyFromSymbol");
  void* marks = nullptr;
  CUTOVER_CUDA_CHECK(cudaGetSymbolAddress(&marks, g_phase), "cudaGetSymbolAddress");
  CUTOVER_CUDA_CHECK(cudaMemset(marks, 0, sizeof(g_phase)), "cudaMemset");
  return CUTOVER_OK;
}
#endif

}  // extern "C"
