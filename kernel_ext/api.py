"""Python API of the verify kernel: SGLang's `extend_attention_fwd` signature, served or declined.

`verify_attention` returns True when the CUDA kernel ran, False when the case is outside what it serves (the
caller falls back to SGLang's Triton kernel), and raises ValueError naming the argument for malformed input.
The decision depends only on shapes, dtypes, devices, strides and Python scalars: never on tensor contents, and
nothing here synchronises the device, so the call can be captured into a CUDA graph.
"""
from __future__ import annotations

import dataclasses
import math
import os

import torch

from . import _lib
from .reference import SGLANG_KEYWORD_DEFAULTS, unserved_feature

DIM_QK, DIM_V = 576, 512
MAX_DRAFT_TOKENS = 64
MAX_HEADS = 128
MAX_POOL_ROWS = 2**31  # row ids up to 2^31 - 1
INDEX_DTYPES = {torch.int32: _lib.DTYPE_INT32, torch.int64: _lib.DTYPE_INT64}
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)

# Kernel configuration (CutoverVerifyParams.config): 0 auto (wgmma on sm_90), 1 large mma.sync tiles, 2 small
# mma.sync tiles (sm_120 class), 3 wgmma (sm_90 only). For tests and benchmarks.
TILE_CONFIG = int(os.environ.get("CUTOVER_KERNEL_TILES", "0"))

_num_sms: dict[int, int] = {}


def _sm_count(device: int) -> int:
    if device not in _num_sms:
        _num_sms[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _num_sms[device]


def _scale_arg(value, name: str, device: torch.device):
    """(float, device pointer or None) for a scale, or None when the scale's form is not served."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype != torch.float32 or value.device != device:
            return None
        return 1.0, value.data_ptr()
    if isinstance(value, (int, float)):
        return float(value), None
    raise ValueError(f"{name} must be a float or a 1-element tensor, got {type(value).__name__}")


def _require_last_dim_contiguous(t: torch.Tensor, name: str) -> None:
    if t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got strides {tuple(t.stride())}")


def _vector_friendly(t: torch.Tensor) -> bool:
    """16-byte aligned base and row strides that are multiples of 8 elements (the kernel's 16-byte accesses)."""
    return t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:-1])


def verify_attention(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                     custom_mask, is_causal, mask_indptr, max_len_extend, k_scale=1.0, v_scale=1.0, sm_scale=None,
                     logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1, sinks=None,
                     window_kv_offsets=None, xai_temperature_len=-1, lse_extend=None, skip_prefix=False,
                     skip_extend=False, page_size=1, score_mod=None, aux_tensors=None, extend_seq_lens_cpu=None,
                     identity_kv_indices=False, *, enable=None, o_alt=None, workspace=None, early_start=False,
                     snapshot_of=None, **extra_kwargs) -> bool:
    """Tree-masked MLA verify attention into `o_extend`; True if served, False if the caller must fall back.

    N = total draft tokens, B = batch (qo_indptr.numel() - 1), H = heads, T = max_len_extend (draft tokens per
    request, 1..64), pool = KV pool rows. All tensors on one CUDA device.

    q_extend     bf16 [N, H, 576]  absorbed queries (512 latent + 64 rope); last dim contiguous
    k_extend     bf16 [N, 1, 576]  draft tokens' keys
    v_extend     bf16 [N, 1, 512]  draft tokens' values
    o_extend     bf16 [N, H, 512]  output, written
    k_buffer     bf16 [pool, 1, 576]  KV pool (page size 1)
    v_buffer     bf16 [pool, 1, 512]  must be the view k_buffer[..., :512] (same storage)
    qo_indptr    int32/int64 [B+1]  request b's draft tokens are rows qo_indptr[b] .. qo_indptr[b+1]-1
    kv_indptr    int32/int64 [B+1]  request b's prefix rows are kv_indices[kv_indptr[b] : kv_indptr[b+1]]
    kv_indices   int32/int64 [>= kv_indptr[B]]  row ids into k_buffer
    custom_mask  bool/int8/uint8 flat, or None. Request b's block at mask_indptr[b] is row-major T x (P_b + T);
                 only the T x T draft tail is read (skip_prefix_custom_mask=True). None: causal tail if
                 is_causal, else every draft token visible.
    mask_indptr  int32/int64 [B+1] (read only with a custom_mask)
    k_scale, v_scale  float, or a 1-element float32 tensor on the device (read on the device); they scale the
                 KV-pool part only, as SGLang does.
    sm_scale     float or None (None or 0: 1/sqrt(576), as SGLang)
    enable       optional int32 device tensor: when enable[0] == 0 the kernels exit at once, writing nothing.
    o_alt        optional bf16 [N, H, 512] (the shadow scratch), needs enable with 2 flags {serve, sample}: the
                 kernels then choose on the device: serve -> o_extend, else sample -> o_alt, else nothing. One
                 captured launch thus serves both the custom mode and the shadow samples.
    workspace    optional uint8 device tensor of at least `workspace_bytes(...)` bytes; otherwise one is taken
                 from torch's caching allocator (graph-pool safe).
    snapshot_of  (verify_snapshot's) a _SnapshotLaunch: launch the gated snapshot of this call instead of the
                 attention; `workspace` is then the staging area.
    early_start  True: the kernel may start while the kernel enqueued just before it still runs, and plan from
                 the index tensors (qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr) and device scales
                 meanwhile. Only when those were complete before that kernel started: not written by it nor by a
                 kernel it overlaps (the plugin's gate precedes every call). q, k/v_extend, enable and the outputs
                 are touched after it ends. False (default): plain stream order.

    Not served (returns False): logit_cap, sliding window, sinks, window offsets, xai temperature, lse_extend,
    skip_prefix/skip_extend, score_mod/aux_tensors, identity_kv_indices, page_size != 1,
    skip_prefix_custom_mask=False, requests with different draft counts (q rows != batch * max_len_extend),
    non-bf16 (e.g. fp8) tensors, head dims other than 576/512, more than one KV head, H > 128, T outside 1..64,
    v_buffer not a view of k_buffer, unaligned tensors, unknown keyword args.
    """
    options = {name: value for name, value in locals().items() if name in SGLANG_KEYWORD_DEFAULTS}
    tensors = {"q_extend": q_extend, "k_extend": k_extend, "v_extend": v_extend, "o_extend": o_extend,
               "k_buffer": k_buffer, "v_buffer": v_buffer, "qo_indptr": qo_indptr, "kv_indptr": kv_indptr,
               "kv_indices": kv_indices}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if isinstance(max_len_extend, torch.Tensor) or not isinstance(max_len_extend, int):
        raise ValueError(f"max_len_extend must be a Python int, got {type(max_len_extend).__name__}")
    if not isinstance(early_start, bool):
        raise ValueError(f"early_start must be True or False, got {early_start!r}")
    # Features, head dims, draft counts: the same gate as the CPU stand-in (shapes and host values only).
    if extra_kwargs or unserved_feature(q_extend, k_extend, v_extend, qo_indptr, custom_mask, max_len_extend, options):
        return False
    # 1. arch
    device = q_extend.device
    if device.type == "cuda":  # (a tensor elsewhere is refused under 3. below, before lib or dev_index is used)
        lib, dev_index = _lib.load_library(), _device_index(device)
        lib.check_device(dev_index)
    # 2. dtype
    data = ("q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer")
    for name in data:
        dt = tensors[name].dtype
        if not dt.is_floating_point:
            raise ValueError(f"{name} must be a floating-point tensor (bf16), got {dt}")
        if dt != torch.bfloat16:
            return False  # fp16 / fp32 / fp8 KV: Triton serves it
    if o_alt is not None and (not isinstance(o_alt, torch.Tensor) or o_alt.dtype != o_extend.dtype):
        raise ValueError(f"o_alt must be a tensor of o_extend's dtype {o_extend.dtype}")
    if custom_mask is not None and custom_mask.dtype not in MASK_DTYPES:
        raise ValueError(f"custom_mask must be bool, int8 or uint8, got {custom_mask.dtype}")
    # 3. device
    extra = {"custom_mask": custom_mask, "mask_indptr": mask_indptr if custom_mask is not None else None,
             "enable": enable, "o_alt": o_alt, "workspace": workspace}
    for name, t in list(tensors.items()) + [(k, v) for k, v in extra.items() if v is not None]:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != device or device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; every tensor must be on the same CUDA device as q_extend")
    # 4. layout / stride
    for name in data:
        _require_last_dim_contiguous(tensors[name], name)
    for name in ("qo_indptr", "kv_indptr", "kv_indices"):
        if tensors[name].dim() != 1 or not tensors[name].is_contiguous():
            raise ValueError(f"{name} must be a contiguous 1-D tensor, got shape {tuple(tensors[name].shape)}")
    if custom_mask is not None and not custom_mask.is_contiguous():
        raise ValueError("custom_mask must be contiguous (a flat buffer, SGLang layout)")
    if custom_mask is not None and (mask_indptr is None or mask_indptr.dim() != 1 or not mask_indptr.is_contiguous()):
        raise ValueError("mask_indptr must be a contiguous 1-D tensor when custom_mask is given")
    if v_buffer.data_ptr() != k_buffer.data_ptr() or v_buffer.stride(0) != k_buffer.stride(0):
        return False  # the kernel reads V as the first 512 dims of each K row
    if k_buffer.shape[0] > MAX_POOL_ROWS:
        return False  # row ids are 32-bit in the wgmma kernel (a 2.5-TB pool per layer: none exists today)
    if o_alt is not None:
        _require_last_dim_contiguous(o_alt, "o_alt")
    if not all(_vector_friendly(t) for t in [tensors[name] for name in data] + [o_alt] if t is not None):
        return False
    # 5. shape
    if q_extend.dim() != 3 or k_extend.dim() != 3 or v_extend.dim() != 3 or o_extend.dim() != 3:
        raise ValueError("q_extend, k_extend, v_extend and o_extend must be 3-D [tokens, heads, dim]")
    if k_buffer.dim() != 3 or v_buffer.dim() != 3:
        raise ValueError("k_buffer and v_buffer must be 3-D [pool, kv_heads, dim] (page_size 1)")
    n_tok, heads = q_extend.shape[0], q_extend.shape[1]
    if (q_extend.shape[2], k_extend.shape[2], v_extend.shape[2]) != (DIM_QK, DIM_QK, DIM_V):
        return False  # other head dims: not this kernel
    if k_extend.shape[1] != 1 or k_buffer.shape[1] != 1 or k_buffer.shape[2] != DIM_QK or v_buffer.shape[2] != DIM_V:
        return False  # not MLA absorbed (one latent KV head)
    for name, t, want in (("k_extend", k_extend, (n_tok, 1, DIM_QK)), ("v_extend", v_extend, (n_tok, 1, DIM_V)),
                          ("o_extend", o_extend, (n_tok, heads, DIM_V))):
        if tuple(t.shape) != want:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {want} from q_extend {tuple(q_extend.shape)}")
    if o_alt is not None and o_alt.shape != o_extend.shape:
        raise ValueError(f"o_alt has shape {tuple(o_alt.shape)}, expected o_extend's {tuple(o_extend.shape)}")
    batch = qo_indptr.numel() - 1  # >= 1: unserved_feature declined empty calls
    if kv_indptr.numel() != batch + 1:
        raise ValueError(f"kv_indptr has {kv_indptr.numel()} elements, expected batch+1 = {batch + 1}")
    if custom_mask is not None and mask_indptr.numel() < batch + 1:
        raise ValueError(f"mask_indptr has {mask_indptr.numel()} elements, expected at least batch+1 = {batch + 1}")
    if heads < 1 or heads > MAX_HEADS or max_len_extend < 1 or max_len_extend > MAX_DRAFT_TOKENS:
        return False
    # 6. index dtype
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices)) + (
            (("mask_indptr", mask_indptr),) if custom_mask is not None else ()):
        if t.dtype not in INDEX_DTYPES:
            raise ValueError(f"{name} must be int32 or int64, got {t.dtype}")
    if enable is not None and (enable.dtype != torch.int32 or enable.numel() < 1):
        raise ValueError(f"enable must be an int32 device tensor with >= 1 element, got {enable.dtype}")
    if o_alt is not None and (enable is None or enable.numel() < 2 or not enable.is_contiguous()):
        raise ValueError("o_alt needs enable: a contiguous int32 device tensor of 2 flags {serve, sample}")

    ks = _scale_arg(k_scale, "k_scale", device)
    vs = _scale_arg(v_scale, "v_scale", device)
    if ks is None or vs is None:
        return False
    num_sms = _sm_count(dev_index)
    need = (SNAPSHOT_HEADER_BYTES if snapshot_of is not None
            else lib.workspace_bytes(batch, heads, max_len_extend, num_sms, TILE_CONFIG, dev_index))
    if workspace is None:
        workspace = torch.empty(need, dtype=torch.uint8, device=device)
    elif workspace.dtype != torch.uint8 or workspace.numel() < need or not workspace.is_contiguous():
        raise ValueError(f"workspace must be a contiguous uint8 tensor of >= {need} bytes, got "
                         f"{workspace.dtype} with {workspace.numel()} elements")

    p = _lib.VerifyParams()
    p.batch, p.num_heads, p.max_extend, p.head_dim_qk, p.head_dim_v = batch, heads, max_len_extend, DIM_QK, DIM_V
    p.q, p.q_stride_token, p.q_stride_head = q_extend.data_ptr(), q_extend.stride(0), q_extend.stride(1)
    p.k_extend, p.k_extend_stride_token = k_extend.data_ptr(), k_extend.stride(0)
    p.v_extend, p.v_extend_stride_token = v_extend.data_ptr(), v_extend.stride(0)
    p.o, p.o_stride_token, p.o_stride_head = o_extend.data_ptr(), o_extend.stride(0), o_extend.stride(1)
    if o_alt is not None:
        p.o_alt, p.o_alt_stride_token, p.o_alt_stride_head = o_alt.data_ptr(), o_alt.stride(0), o_alt.stride(1)
    p.kv_buffer, p.kv_buffer_stride_row = k_buffer.data_ptr(), k_buffer.stride(0)
    p.qo_indptr, p.qo_indptr_dtype = qo_indptr.data_ptr(), INDEX_DTYPES[qo_indptr.dtype]
    p.kv_indptr, p.kv_indptr_dtype = kv_indptr.data_ptr(), INDEX_DTYPES[kv_indptr.dtype]
    p.kv_indices, p.kv_indices_dtype = kv_indices.data_ptr(), INDEX_DTYPES[kv_indices.dtype]
    if custom_mask is not None:
        p.custom_mask, p.custom_mask_dtype = custom_mask.data_ptr(), _lib.DTYPE_UINT8
        p.mask_indptr, p.mask_indptr_dtype = mask_indptr.data_ptr(), INDEX_DTYPES[mask_indptr.dtype]
    p.is_causal = int(bool(is_causal))
    p.sm_scale = float(sm_scale or 1.0 / math.sqrt(DIM_QK))
    p.k_scale, p.k_scale_ptr = ks
    p.v_scale, p.v_scale_ptr = vs
    p.enable = enable.data_ptr() if enable is not None else None
    p.workspace, p.workspace_bytes = workspace.data_ptr(), workspace.numel()
    p.num_sms, p.config = num_sms, TILE_CONFIG
    p.early_start = int(early_start)
    stream = torch.cuda.current_stream(device).cuda_stream
    if snapshot_of is not None:
        code = _on_device(dev_index, lambda: lib.verify_snapshot(p, snapshot_of.gate_state.data_ptr(),
                                                                 snapshot_of.layer, snapshot_of.from_graph, stream))
    else:
        code = _on_device(dev_index, lambda: lib.verify_attention(p, stream))
    if code == _lib.OK:
        return True
    if code == _lib.ERR_UNSUPPORTED:
        return False
    message = f"cutover_verify_{'snapshot' if snapshot_of is not None else 'attention'}: {lib.last_error()}"
    if code == _lib.ERR_INVALID_ARGUMENT:
        raise ValueError(message)
    raise _lib.KernelCallError(code, message)


SNAPSHOT_HEADER_BYTES = _lib.SNAPSHOT_HEADER_WORDS * 8


@dataclasses.dataclass(frozen=True)
class _SnapshotLaunch:
    gate_state: torch.Tensor
    layer: int
    from_graph: bool


def verify_snapshot(*call_args, o_alt, enable, gate_state, staging, layer: int, from_graph: bool,
                    **call_kwargs) -> bool:
    """The gated snapshot of one verify call, one launch on the current stream (CUDA-graph capturable).

    ``call_args`` / ``call_kwargs``: the call's SGLang arguments, with ``o_extend`` = stock's output; ``o_alt``
    = ours (the shadow scratch) and ``enable`` = the gate's {serve, sample} flags, as the call's
    ``verify_attention`` had them. ``gate_state`` = the layer's gate row (int32 [4]); ``staging`` = a contiguous
    uint8 device tensor (16-byte aligned; its first ``SNAPSHOT_HEADER_BYTES`` the header, zero-filled once).
    The launch exits at once unless the header's arm word names ``layer`` and enable[1] is set; armed, it copies
    the call into the staging area (the header layout: CutoverSnapshotWord in csrc/cutover_verify.h; reader:
    cutover.plugin.snapshot). Returns False where ``verify_attention`` would not serve the call.
    """
    if not isinstance(gate_state, torch.Tensor) or gate_state.dtype != torch.int32 or gate_state.numel() < 4 \
            or not gate_state.is_contiguous():
        raise ValueError("gate_state must be a contiguous int32 tensor of 4 elements (the layer's gate row)")
    if o_alt is None or enable is None:
        raise ValueError("verify_snapshot needs o_alt (our output) and enable (the gate's flags)")
    if not isinstance(staging, torch.Tensor) or staging.data_ptr() % 16:
        raise ValueError("staging must be a 16-byte aligned uint8 device tensor")
    if not 0 <= layer < (1 << 20) - 1:
        raise ValueError(f"layer must be in 0 .. {(1 << 20) - 2}, got {layer}")
    return verify_attention(*call_args, o_alt=o_alt, enable=enable, workspace=staging,
                            snapshot_of=_SnapshotLaunch(gate_state, layer, bool(from_graph)), **call_kwargs)


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _on_device(index: int, launch):
    """Run `launch` with device `index` current: the C entries plan and launch for the thread's current device,
    which a caller holding tensors of another device may not have set (torch ops follow their tensors' device)."""
    if torch.cuda.current_device() == index:
        return launch()
    with torch.cuda.device(index):
        return launch()


def workspace_bytes(batch: int, num_heads: int, max_len_extend: int, device: int | None = None) -> int:
    """Bytes of workspace a call with these shapes needs (for callers that pre-allocate it)."""
    dev = torch.cuda.current_device() if device is None else device
    return _lib.load_library().workspace_bytes(batch, num_heads, max_len_extend, _sm_count(dev), TILE_CONFIG, dev)


def verify_gate(gate_state, qo_indptr, qo_indptr_gated, custom_enable) -> None:
    """Live-switch gate, one tiny kernel on the current stream (CUDA-graph capturable).

    gate_state      int32 [4] on the device: {mode (0 triton, 1 shadow, 2 custom), sample_every (>= 1),
                    call_counter, reserved}; call_counter is incremented.
    qo_indptr       int32/int64 [B+1]
    qo_indptr_gated same dtype and size: zeros when mode == 2 (SGLang's kernel then does nothing), else a copy.
    custom_enable   int32 [>= 2]: [0] = (mode == 2), [1] = (mode == 1 and counter % sample_every == 0), with the
                    counter value before this call's increment.
    """
    for name, t in (("gate_state", gate_state), ("qo_indptr", qo_indptr), ("qo_indptr_gated", qo_indptr_gated),
                    ("custom_enable", custom_enable)):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        if t.device != gate_state.device:
            raise ValueError(f"{name} is on {t.device}; the gate's tensors must all be on {gate_state.device}")
    if gate_state.dtype != torch.int32 or gate_state.numel() < 4:
        raise ValueError(f"gate_state must be int32 with 4 elements, got {gate_state.dtype} x {gate_state.numel()}")
    if custom_enable.dtype != torch.int32 or custom_enable.numel() < 2:
        raise ValueError(f"custom_enable must be int32 with >= 2 elements, got {custom_enable.dtype} x "
                         f"{custom_enable.numel()}")
    if qo_indptr.dtype not in INDEX_DTYPES:
        raise ValueError(f"qo_indptr must be int32 or int64, got {qo_indptr.dtype}")
    if qo_indptr_gated.dtype != qo_indptr.dtype or qo_indptr_gated.numel() != qo_indptr.numel():
        raise ValueError("qo_indptr_gated must have qo_indptr's dtype and number of elements")
    lib = _lib.load_library()
    device = gate_state.device
    _on_device(_device_index(device), lambda: lib.verify_gate(
        gate_state.data_ptr(), qo_indptr.data_ptr(), qo_indptr_gated.data_ptr(), qo_indptr.numel(),
        qo_indptr.dtype == torch.int64, custom_enable.data_ptr(), torch.cuda.current_stream(device).cuda_stream))


def _bf16_rows(t, name: str, like=None):
    """(pointer, token stride, head stride) of a bf16 [N, H, 512] tensor the epilogue reads 16 bytes at a time."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor")
    if t.dtype != torch.bfloat16 or t.dim() != 3 or t.shape[2] != DIM_V:
        raise ValueError(f"{name} must be bf16 [tokens, heads, {DIM_V}], got {t.dtype} {tuple(t.shape)}")
    if like is not None and (t.shape != like.shape or t.device != like.device):
        raise ValueError(f"{name} must match o: {tuple(t.shape)} on {t.device} vs {tuple(like.shape)} on {like.device}")
    _require_last_dim_contiguous(t, name)
    if not _vector_friendly(t):
        raise ValueError(f"{name} must be 16-byte aligned with strides that are multiples of 8 elements, got "
                         f"{tuple(t.stride())}")
    return t.data_ptr(), t.stride(0), t.stride(1)


def shadow_accumulate(o, scratch, enable, counters, bin_edges, workspace) -> None:
    """Fused shadow epilogue, one launch on the current stream (CUDA-graph capturable; docs/kernel.md).

    o          bf16 [N, H, 512]  stock's output (shadow) or ours (custom)
    scratch    bf16 [N, H, 512]  ours in a shadow sample (read only then)
    enable     int32 [2]  the gate's flags {serve, sample}; both 0: only counters[CALLS] += 1
    counters   float64 [COUNTER_HIST + len(bin_edges) + 1]  this layer's counters (_lib.COUNTER_*), updated
    bin_edges  float64 [E]  ascending rel-L2 histogram edges (cutover.hostprotocol.hostlayout.REL_L2_BIN_EDGES)
    workspace  uint8 [_lib.SHADOW_WORKSPACE_BYTES]  this layer's, zero-filled once; calls on it must be stream-ordered
    """
    o_ptr = _bf16_rows(o, "o")
    s_ptr = _bf16_rows(scratch, "scratch", like=o)
    for name, t, dtype in (("enable", enable, torch.int32), ("counters", counters, torch.float64),
                           ("bin_edges", bin_edges, torch.float64), ("workspace", workspace, torch.uint8)):
        if not isinstance(t, torch.Tensor) or t.device != o.device or t.dtype != dtype or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous {dtype} tensor on {o.device}")
    if enable.numel() < 2:
        raise ValueError(f"enable must hold the 2 flags {{serve, sample}}, got {enable.numel()} elements")
    if counters.numel() < _lib.COUNTER_HIST + bin_edges.numel() + 1:
        raise ValueError(f"counters has {counters.numel()} elements, the layout needs "
                         f"{_lib.COUNTER_HIST + bin_edges.numel() + 1}")
    if workspace.numel() < _lib.SHADOW_WORKSPACE_BYTES or workspace.data_ptr() % 16:
        raise ValueError(f"workspace must be 16-byte aligned with >= {_lib.SHADOW_WORKSPACE_BYTES} bytes")
    lib = _lib.load_library()
    _on_device(_device_index(o.device), lambda: lib.shadow_accumulate(
        o_ptr, s_ptr, o.shape[0], o.shape[1], enable.data_ptr(), counters.data_ptr(), bin_edges.data_ptr(),
        bin_edges.numel(), workspace.data_ptr(), torch.cuda.current_stream(o.device).cuda_stream))
