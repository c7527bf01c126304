/* cutover verify attention: the versioned C ABI of libcutover_verify.so.
 *
 * Tree-masked MLA target-verify attention over a page-size-1 KV pool, exactly the semantics of SGLang's
 * Triton extend_attention_fwd with skip_prefix_custom_mask=True (docs/kernel.md). No torch types: any
 * caller that can hand over device pointers and a cudaStream_t can use it (ctypes in kernel_ext/_lib.py).
 *
 * Version policy: CUTOVER_ABI_VERSION changes whenever a struct layout, an enum value or a function
 * signature changes. Callers must refuse a library whose cutover_abi_version() differs from theirs.
 * CutoverVerifyParams.struct_size must be set to sizeof(CutoverVerifyParams) by the caller.
 */
#ifndef CUTOVER_VERIFY_H_
#define CUTOVER_VERIFY_H_

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUTOVER_ABI_VERSION 3

#if defined(__GNUC__)
#define CUTOVER_API __attribute__((visibility("default")))
#else
#define CUTOVER_API
#endif

/* Return codes. cutover_last_error() gives the message of the last failure on the calling thread. */
enum CutoverStatus {
  CUTOVER_OK = 0,
  CUTOVER_ERR_INVALID_ARGUMENT = 1, /* malformed params (null pointer, bad shape, bad stride) */
  CUTOVER_ERR_UNSUPPORTED = 2,      /* well-formed but outside what the kernel serves: fall back */
  CUTOVER_ERR_WORKSPACE = 3,        /* workspace missing or smaller than cutover_workspace_bytes() */
  CUTOVER_ERR_CUDA = 4,             /* a CUDA runtime call or a launch failed */
  CUTOVER_ERR_ARCH = 5              /* the library holds no kernel image for this device */
};

/* Per-layer shadow counters (float64 row) that cutover_shadow_accumulate updates; the plugin drains them
 * (cutover/plugin/devicestate.py mirrors these indices). The row holds CUTOVER_COUNTER_HIST + num_edges + 1
 * values. Counts are exact up to 2^53. */
enum CutoverShadowCounter {
  CUTOVER_COUNTER_CALLS = 0,              /* every verify call, whatever the mode */
  CUTOVER_COUNTER_RESERVED = 1,           /* unused, always 0 (removing it would renumber the cells after it) */
  CUTOVER_COUNTER_SERVE_BAD_O = 2,        /* custom mode: the served output o held a non-finite value */
  CUTOVER_COUNTER_SERVED = 3,             /* custom mode calls */
  CUTOVER_COUNTER_SAMPLE_BAD_SCRATCH = 4, /* shadow sample: our output (scratch) held a non-finite value */
  CUTOVER_COUNTER_SAMPLE_BAD_O = 5,       /* shadow sample: stock's output (o) held a non-finite value */
  CUTOVER_COUNTER_COMPARED = 6,           /* shadow samples */
  CUTOVER_COUNTER_REL_L2_MAX = 7,         /* max of ||scratch - o|| / ||o|| over samples */
  CUTOVER_COUNTER_MAX_ABS = 8,            /* max of max |scratch - o| over samples */
  CUTOVER_COUNTER_HIST = 9                /* rel-L2 histogram: bucket k = number of edges <= rel L2 */
};
/* Relative L2 and max abs recorded for a comparison involving a non-finite value (finite, JSON-safe). */
#define CUTOVER_NONFINITE_SENTINEL 1.0e30
/* Bytes of one layer's cutover_shadow_accumulate workspace: zero-filled once by the caller, then owned by the
 * library (every call leaves it ready for the next). */
#define CUTOVER_SHADOW_WORKSPACE_BYTES 4352

/* Element types of the tensors handed over. */
enum CutoverDtype {
  CUTOVER_DTYPE_INT32 = 1,
  CUTOVER_DTYPE_INT64 = 2,
  CUTOVER_DTYPE_UINT8 = 3, /* torch.bool, torch.uint8, torch.int8: nonzero = visible */
  CUTOVER_DTYPE_BF16 = 4,
  CUTOVER_DTYPE_FP32 = 5
};

/* One verify-attention call. All pointers are device pointers; all strides are in ELEMENTS.
 * N = number of draft tokens in the batch (q.shape[0]), B = batch, H = heads, T = max draft tokens per request.
 * Request b owns draft tokens qo_indptr[b] .. qo_indptr[b+1]-1 (at most T of them; more are ignored, as in
 * SGLang whose grid also stops at max_len_extend) and prefix rows kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1]. */
typedef struct CutoverVerifyParams {
  uint32_t struct_size;   /* sizeof(CutoverVerifyParams) */
  int32_t batch;          /* B >= 1 */
  int32_t num_heads;      /* H, 1..128 */
  int32_t max_extend;     /* T, 1..64 */
  int32_t head_dim_qk;    /* must be 576 */
  int32_t head_dim_v;     /* must be 512 */

  const void* q;          /* bf16 [N, H, 576], last dim contiguous */
  int64_t q_stride_token; /* stride of dim 0 */
  int64_t q_stride_head;  /* stride of dim 1 */
  const void* k_extend;   /* bf16 [N, 1, 576], last dim contiguous */
  int64_t k_extend_stride_token;
  const void* v_extend;   /* bf16 [N, 1, 512], last dim contiguous */
  int64_t v_extend_stride_token;
  void* o;                /* bf16 [N, H, 512], last dim contiguous; written */
  int64_t o_stride_token;
  int64_t o_stride_head;
  void* o_alt;            /* optional bf16 [N, H, 512] (shadow scratch): written INSTEAD of o when enable[0] == 0
                             and enable[1] != 0 (needs enable); NULL: o only */
  int64_t o_alt_stride_token;
  int64_t o_alt_stride_head;
  const void* kv_buffer;  /* bf16 [pool, 1, 576]: K rows; V is its first 512 dims (SGLang's v_buffer view);
                             pool < 2^31 rows (the wgmma kernel keeps row ids in 32 bits) */
  int64_t kv_buffer_stride_row;

  const void* qo_indptr;  /* [B+1], dtype qo_indptr_dtype (INT32 or INT64) */
  int32_t qo_indptr_dtype;
  const void* kv_indptr;  /* [B+1], INT32 or INT64 */
  int32_t kv_indptr_dtype;
  const void* kv_indices; /* [>= kv_indptr[B]], INT32 or INT64: row ids into kv_buffer */
  int32_t kv_indices_dtype;
  const void* custom_mask;/* NULL (causal or full tail) or UINT8 flat buffer, SGLang layout (docs/kernel.md) */
  int32_t custom_mask_dtype;
  const void* mask_indptr;/* [B+1] INT32 or INT64 when custom_mask != NULL */
  int32_t mask_indptr_dtype;
  int32_t is_causal;      /* used only when custom_mask == NULL: 1 causal tail, 0 every draft token visible */

  float sm_scale;         /* softmax scale (SGLang default 1/sqrt(576)) */
  float k_scale;          /* multiplies prefix scores (KV-pool keys only, as SGLang) when k_scale_ptr is NULL */
  float v_scale;          /* multiplies the prefix P.V (KV-pool values only, as SGLang) when v_scale_ptr is NULL */
  const float* k_scale_ptr; /* optional FP32 device scalar; read on the device (graph-safe) */
  const float* v_scale_ptr; /* optional FP32 device scalar */
  const int32_t* enable;  /* optional device flags (the live-switch gate), read on the device by every kernel.
                             o_alt == NULL: enable[0] == 0 makes every kernel exit at once, nothing written.
                             o_alt != NULL: int32[2] {serve, sample}: serve -> write o; else sample -> write
                             o_alt; else exit at once. NULL: always write o. */

  void* workspace;        /* device scratch of at least cutover_workspace_bytes(...) bytes, 16-byte aligned */
  int64_t workspace_bytes;
  int32_t num_sms;        /* multiprocessor count of the device (fixes the work split; same value as passed
                             to cutover_workspace_bytes) */
  int32_t config;         /* 0 auto (3 on sm_90, else 1 where it fits, else 2); 1 large mma.sync tiles (~190 KB
                             shared memory per block, compute capability below 12.0); 2 small mma.sync tiles
                             (~96 KB: sm_120 class); 3 wgmma (sm_90 only, ~227 KB). For tests and benchmarks. */
  int32_t early_start;    /* 1: the call's kernels may start while the kernel enqueued just before them on `stream`
                             still runs, and plan from qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr,
                             k_scale_ptr and v_scale_ptr meanwhile. These must then be complete before that kernel
                             started: written neither by it nor by any kernel it may overlap (the plugin's gate
                             precedes every call it makes). q, k_extend, v_extend, enable, o, o_alt and the
                             workspace are touched only after that kernel has finished. 0: plain stream order. */
} CutoverVerifyParams;

CUTOVER_API int cutover_abi_version(void);
CUTOVER_API const char* cutover_last_error(void);
/* Comma-separated targets compiled into this library, e.g. "sm_90a,sm_120,compute_120". */
CUTOVER_API const char* cutover_build_targets(void);
/* 0 when the kernels can run on `device`; CUTOVER_ERR_ARCH with a message naming the device's arch otherwise. */
CUTOVER_API int cutover_check_device(int device);
/* Bytes of workspace one call with these shapes needs (host-computable, independent of tensor contents). */
CUTOVER_API int64_t cutover_workspace_bytes(int32_t batch, int32_t num_heads, int32_t max_extend, int32_t num_sms,
                                int32_t config, int device);
/* Enqueue the verify attention on `stream`. No host synchronisation, no allocation: CUDA-graph capturable. It
 * plans and launches for the calling thread's current device: every pointer and `stream` must belong to it. */
CUTOVER_API int cutover_verify_attention(const CutoverVerifyParams* params, cudaStream_t stream);
/* Live-switch gate, one tiny kernel. gate_state: device int32[4] = {mode (0 triton, 1 shadow, 2 custom),
 * sample_every (>= 1), call_counter, reserved}. Increments call_counter; writes
 * custom_enable[0] = (mode == 2) and custom_enable[1] = (mode == 1 && counter % sample_every == 0) with the
 * counter value before the increment; qo_indptr_gated[0..n) = mode == 2 ? 0 : qo_indptr[0..n). Launched as a
 * programmatic dependent of the kernel before it on `stream`, it waits for that kernel before it reads or writes
 * anything: stream order holds, only its launch overlaps that kernel's end. */
CUTOVER_API int cutover_verify_gate(int32_t* gate_state, const void* qo_indptr, void* qo_indptr_gated, int64_t n,
                        int indptr_is_int64, int32_t* custom_enable, cudaStream_t stream);

/* Fused shadow epilogue, one launch (CUDA-graph capturable). o, scratch: bf16 [tokens, heads, 512], strides in
 * elements, 16-byte aligned rows. enable: the gate's device int32[2] {serve, sample}. Increments
 * counters[CALLS]; exits at once when both flags are 0; serve: counts a non-finite o (SERVED, SERVE_BAD_O; the
 * scratch is not read); sample: relative L2 ||scratch - o|| / ||o|| and max |scratch - o| (float accumulation),
 * non-finite counts of both, histogram bucket over bin_edges (float64 [num_edges], ascending), maxima.
 * workspace: this layer's CUTOVER_SHADOW_WORKSPACE_BYTES bytes, 16-byte aligned, zero-filled before first use;
 * calls sharing one workspace must be stream-ordered. Launched like cutover_verify_gate: a programmatic dependent
 * that waits for the kernel before it at entry. */
CUTOVER_API int cutover_shadow_accumulate(const void* o, int64_t o_stride_token, int64_t o_stride_head,
                                          const void* scratch, int64_t scratch_stride_token,
                                          int64_t scratch_stride_head, int64_t tokens, int32_t heads,
                                          const int32_t* enable, double* counters, const double* bin_edges,
                                          int32_t num_edges, void* workspace, cudaStream_t stream);

/* Gated snapshot of one verify call (cutover_verify_snapshot): the staging area starts with
 * CUTOVER_SNAPSHOT_HEADER_WORDS int64 words, indexed by CutoverSnapshotWord; the data follows. The caller arms a
 * snapshot by writing ARM = (sequence << 20) | (layer + 1) with a sequence unique per arming; the launch of that
 * layer whose gate flagged a shadow sample copies the call, sets COMPLETED to the token and clears ARM. Offsets
 * are bytes from the start of the data; sections hold the requests 0 .. KEPT-1 of BATCH (those that fit):
 * OFF_QO_INDPTR, OFF_KV_INDPTR int64 [KEPT+1] rebased to 0; OFF_MASK uint8, request r's T_r x T_r draft tail
 * after the tails of requests 0..r-1 (MASK_BYTES -1: no custom mask); OFF_Q bf16 [TOKENS, HEADS, 576];
 * OFF_K_EXTEND bf16 [TOKENS, 576]; OFF_V_EXTEND bf16 [TOKENS, 512]; OFF_O and OFF_O_ALT bf16 [TOKENS, HEADS,
 * 512] (stock's output and ours); OFF_KV bf16 [ROWS, 576], the KV rows in kv_indices order; END the bytes used.
 * SM_SCALE, K_SCALE, V_SCALE hold the bits of a double. */
#define CUTOVER_SNAPSHOT_HEADER_WORDS 64
#define CUTOVER_SNAPSHOT_FORMAT 1
enum CutoverSnapshotWord {
  CUTOVER_SNAP_ARM = 0,       /* written by the caller; cleared by the launch that completes the snapshot */
  CUTOVER_SNAP_WRITING = 1,   /* token of the snapshot being written */
  CUTOVER_SNAP_COMPLETED = 2, /* token of the last completed snapshot */
  CUTOVER_SNAP_TICKET = 3,    /* the library's: blocks done, keyed by layer and call */
  CUTOVER_SNAP_FORMAT = 4,
  CUTOVER_SNAP_LAYER = 5,
  CUTOVER_SNAP_CALL = 6,      /* the gate's call counter of the snapshotted call */
  CUTOVER_SNAP_FROM_GRAPH = 7,/* 1: the launch was captured into a CUDA graph */
  CUTOVER_SNAP_BATCH = 8,
  CUTOVER_SNAP_KEPT = 9,
  CUTOVER_SNAP_TOKENS = 10,
  CUTOVER_SNAP_TOKENS_TOTAL = 11,
  CUTOVER_SNAP_ROWS = 12,
  CUTOVER_SNAP_ROWS_TOTAL = 13,
  CUTOVER_SNAP_MASK_BYTES = 14,
  CUTOVER_SNAP_HEADS = 15,
  CUTOVER_SNAP_MAX_EXTEND = 16,
  CUTOVER_SNAP_IS_CAUSAL = 17,
  CUTOVER_SNAP_SM_SCALE = 18,
  CUTOVER_SNAP_K_SCALE = 19,
  CUTOVER_SNAP_V_SCALE = 20,
  CUTOVER_SNAP_OFF_QO_INDPTR = 21,
  CUTOVER_SNAP_OFF_KV_INDPTR = 22,
  CUTOVER_SNAP_OFF_MASK = 23,
  CUTOVER_SNAP_OFF_Q = 24,
  CUTOVER_SNAP_OFF_K_EXTEND = 25,
  CUTOVER_SNAP_OFF_V_EXTEND = 26,
  CUTOVER_SNAP_OFF_O = 27,
  CUTOVER_SNAP_OFF_O_ALT = 28,
  CUTOVER_SNAP_OFF_KV = 29,
  CUTOVER_SNAP_END = 30
};

/* Enqueue the gated snapshot of the verify call `call` (the arguments its cutover_verify_attention had, with o =
 * stock's output, o_alt = ours, enable = the gate's {serve, sample} flags) on `stream`: one launch that exits at
 * once unless ARM names `layer` and enable[1] is set. `call->workspace` / `workspace_bytes` is the staging area
 * (16-byte aligned, at least CUTOVER_SNAPSHOT_HEADER_WORDS * 8 bytes, header zero-filled once); gate_state the
 * layer's gate row (its call counter tells launches apart); from_graph is recorded. CUDA-graph capturable; launched
 * like cutover_verify_gate, a programmatic dependent that waits for the kernel before it at entry. */
CUTOVER_API int cutover_verify_snapshot(const CutoverVerifyParams* call, const int32_t* gate_state, int32_t layer,
                                        int32_t from_graph, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* CUTOVER_VERIFY_H_ */
