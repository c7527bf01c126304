"""Torch reference of SGLang's Triton ``extend_attention_fwd`` for speculative target verify.

Two computations of the same semantics (docs/kernel.md, "Semantics served"), from SGLang's own buffers:

* ``reference_verify_attention``: exact attention in float64 (or float32), the truth anchor;
* ``splitk_verify_attention``: the arithmetic of a split-K flash-decode kernel (per-chunk online-softmax
  partials in float32, softmax weights rounded to the value dtype before P.V, one combine with the draft
  tail); on machines without a GPU it stands in for the CUDA kernel.

``reference_extend_attention_fwd`` and ``splitk_extend_attention_fwd`` wrap them behind SGLang's positional
signature (``o_extend`` written in place), so either can be dropped in where ``extend_attention_fwd`` is
called. Every detail follows ``sglang/kernels/ops/attention/extend_attention.py`` (0.5.23, ``_fwd_kernel``):

* ``sm_scale or 1/sqrt(q.shape[-1])`` (so 0.0 and None both mean the default);
* prefix logits are scaled by ``sm_scale * k_scale``, prefix P.V partials by ``v_scale``; the draft tail by
  neither; ``k_scale``/``v_scale`` never touch the softmax denominator;
* prefix keys/values come from ``k_buffer``/``v_buffer`` rows ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``,
  draft keys/values from ``k_extend``/``v_extend`` rows ``qo_indptr[b]:qo_indptr[b+1]``;
* request b's mask is the row-major ``T x (P_b + T)`` block at ``mask_indptr[b]``; with
  ``skip_prefix_custom_mask`` only its ``T x T`` tail is read and every draft token sees the whole prefix;
* without a mask the tail is causal when ``is_causal`` and fully visible otherwise; WITH a mask and
  ``is_causal`` SGLang still stops each query block's tail sweep at the block's end, so mask entries above
  the diagonal beyond ``(i // BLOCK_M + 1) * BLOCK_M`` are never read (``causal_block_m``; a draft tree's
  mask only has entries at or below the diagonal, where this changes nothing);
* a query that sees no key at all gets an output of zeros.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

# SGLang's BLOCK_M for the MLA head dims (Lq=576, Lv=512) on sm_90, sm_120 and the CPU interpreter
# (_get_block_sizes_for_extend_attention); sm_100 uses 16, ROCm 64.
SGLANG_MLA_BLOCK_M = 32

# Head dims of the absorbed MLA verify the CUDA kernel serves: 512 latent + 64 RoPE for q/k, 512 for v.
MLA_QK_DIM = 576
MLA_V_DIM = 512
MAX_DRAFT_TOKENS = 64


@dataclass(frozen=True)
class _Request:
    """Where one request's rows live in the flat SGLang buffers."""

    q_start: int
    num_draft: int
    kv_start: int
    prefix_len: int
    mask_start: int


def _requests(qo_indptr, kv_indptr, mask_indptr, has_mask: bool) -> list[_Request]:
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    masks = mask_indptr.tolist() if has_mask else [0] * len(qo)
    if len(kv) != len(qo):
        raise ValueError(
            f"kv_indptr has {len(kv)} entries but qo_indptr has {len(qo)}: both must be batch_size + 1 long"
        )
    return [
        _Request(qo[b], qo[b + 1] - qo[b], kv[b], kv[b + 1] - kv[b], masks[b]) for b in range(len(qo) - 1)
    ]


def _scale(value) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


def default_sm_scale(q_extend: torch.Tensor, sm_scale=None) -> float:
    """SGLang's softmax scale: ``sm_scale or 1/sqrt(Lq)`` (0.0 and None both mean the default)."""
    return float(sm_scale or 1.0 / (q_extend.shape[-1] ** 0.5))


def _visibility(custom_mask, req: _Request, is_causal, skip_prefix_custom_mask, causal_block_m, device):
    """(prefix_visible [T, P] or None for "all", tail_visible [T, T]) exactly as SGLang reads them."""
    t, p = req.num_draft, req.prefix_len
    rows = torch.arange(t, device=device)[:, None]
    cols = torch.arange(t, device=device)[None, :]
    if custom_mask is None:
        tail = rows >= cols if is_causal else torch.ones(t, t, dtype=torch.bool, device=device)
        return None, tail
    end = req.mask_start + t * (p + t)
    if end > custom_mask.numel():
        raise ValueError(
            f"custom_mask has {custom_mask.numel()} elements but request at mask_indptr={req.mask_start} "
            f"needs {t}x({p}+{t}) up to element {end}: mask_indptr or custom_mask is wrong"
        )
    block = custom_mask[req.mask_start : end].reshape(t, p + t) != 0
    tail = block[:, p:]
    if is_causal:
        tail = tail & (cols < (rows // causal_block_m + 1) * causal_block_m)
    return (None if skip_prefix_custom_mask else block[:, :p]), tail


def _request_logits(q, k_prefix, k_tail, sm_scale, k_scale, prefix_visible, tail_visible):
    """Masked logits [Hkv, G, T, P+T] of one request; q [T, H, Dq], k_* [S, Hkv, Dq]."""
    t, h, dq = q.shape
    hkv = k_tail.shape[1]
    qg = q.reshape(t, hkv, h // hkv, dq)
    s_prefix = torch.einsum("tkgd,skd->kgts", qg, k_prefix) * (sm_scale * k_scale)
    s_tail = torch.einsum("tkgd,skd->kgts", qg, k_tail) * sm_scale
    neg_inf = torch.tensor(-math.inf, dtype=s_tail.dtype, device=s_tail.device)
    if prefix_visible is not None:
        s_prefix = torch.where(prefix_visible, s_prefix, neg_inf)
    s_tail = torch.where(tail_visible, s_tail, neg_inf)
    return s_prefix, s_tail


def _gather_request(k_extend, v_extend, k_buffer, v_buffer, kv_indices, req: _Request, dtype):
    rows = kv_indices[req.kv_start : req.kv_start + req.prefix_len].long()
    tail = slice(req.q_start, req.q_start + req.num_draft)
    return (
        k_buffer[rows].to(dtype),
        v_buffer[rows].to(dtype),
        k_extend[tail].to(dtype),
        v_extend[tail].to(dtype),
    )


def _check_shapes(q_extend, k_extend, v_extend, k_buffer, v_buffer):
    if q_extend.dim() != 3 or k_extend.dim() != 3 or v_extend.dim() != 3:
        raise ValueError("q_extend, k_extend and v_extend must be [tokens, heads, head_dim]")
    if q_extend.shape[1] % k_extend.shape[1] != 0:
        raise ValueError(
            f"q_extend has {q_extend.shape[1]} heads, not a multiple of k_extend's {k_extend.shape[1]}"
        )
    if k_buffer.shape[1:] != k_extend.shape[1:] or v_buffer.shape[1:] != v_extend.shape[1:]:
        raise ValueError(
            f"k_buffer {tuple(k_buffer.shape)} / v_buffer {tuple(v_buffer.shape)} must match "
            f"k_extend {tuple(k_extend.shape)} / v_extend {tuple(v_extend.shape)} after the row dimension"
        )


# The verify inputs both computations take first, in SGLang's order, then their shared options.
_VERIFY_INPUTS = ("q_extend", "k_extend", "v_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr", "kv_indices",
                  "custom_mask", "is_causal", "mask_indptr")
_VERIFY_PARAMETERS = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in _VERIFY_INPUTS] + [
    inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=value)
    for name, value in {"sm_scale": None, "k_scale": 1.0, "v_scale": 1.0, "skip_prefix_custom_mask": True}.items()
]


def _verify_signature(option: str, default) -> inspect.Signature:
    """The verify inputs and shared options, then the computation's own `option`, then causal_block_m."""
    return inspect.Signature([
        *_VERIFY_PARAMETERS,
        inspect.Parameter(option, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default),
        inspect.Parameter("causal_block_m", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=SGLANG_MLA_BLOCK_M),
    ])


def _bind(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name, defaults filled in; TypeError for a call the signature does not accept."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _verify_attention(a: Mapping, compute_dtype, attend) -> torch.Tensor:
    """Per request of the bound arguments ``a``: gather its rows, build its masked logits, and let ``attend``
    turn them into outputs."""
    q_extend, k_extend, v_extend, k_buffer, v_buffer = (a[name] for name in _VERIFY_INPUTS[:5])
    custom_mask = a["custom_mask"]
    _check_shapes(q_extend, k_extend, v_extend, k_buffer, v_buffer)
    scale = default_sm_scale(q_extend, a["sm_scale"])
    k_scale, v_scale = _scale(a["k_scale"]), _scale(a["v_scale"])
    n, h, _ = q_extend.shape
    out = torch.zeros(n, h, v_extend.shape[-1], dtype=compute_dtype, device=q_extend.device)
    for req in _requests(a["qo_indptr"], a["kv_indptr"], a["mask_indptr"], custom_mask is not None):
        if req.num_draft == 0:
            continue
        k_pre, v_pre, k_tail, v_tail = _gather_request(
            k_extend, v_extend, k_buffer, v_buffer, a["kv_indices"], req, compute_dtype
        )
        q = q_extend[req.q_start : req.q_start + req.num_draft].to(compute_dtype)
        prefix_visible, tail_visible = _visibility(
            custom_mask, req, a["is_causal"], a["skip_prefix_custom_mask"], a["causal_block_m"], q.device
        )
        s_pre, s_tail = _request_logits(q, k_pre, k_tail, scale, k_scale, prefix_visible, tail_visible)
        o = attend(s_pre, s_tail, v_pre * v_scale, v_tail)  # [Hkv, G, T, Dv]
        out[req.q_start : req.q_start + req.num_draft] = o.permute(2, 0, 1, 3).reshape(req.num_draft, h, -1)
    return out


_REFERENCE_SIGNATURE = _verify_signature("compute_dtype", torch.float64)


def reference_verify_attention(*args, **kwargs) -> torch.Tensor:
    """Exact verify attention; returns [N, H, Dv] in ``compute_dtype``.

    Arguments (``_REFERENCE_SIGNATURE``): q_extend, k_extend, v_extend, k_buffer, v_buffer, qo_indptr,
    kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, sm_scale=None, k_scale=1.0, v_scale=1.0,
    skip_prefix_custom_mask=True, compute_dtype=torch.float64, causal_block_m=SGLANG_MLA_BLOCK_M.
    q_extend [N, H, Dq]; k_extend [N, Hkv, Dq]; v_extend [N, Hkv, Dv]; k_buffer [pool, Hkv, Dq];
    v_buffer [pool, Hkv, Dv] (MLA: Dq=576, Dv=512, Hkv=1, v_buffer = k_buffer[..., :512]);
    qo_indptr/kv_indptr [B+1] int; kv_indices [sum P] int32/int64 row ids; custom_mask flat bool/int8/uint8
    or None; mask_indptr [B+1] int (ignored without a mask). Semantics: module docstring.
    """
    a = _bind(_REFERENCE_SIGNATURE, args, kwargs)
    return _verify_attention(a, a["compute_dtype"], _exact_softmax)


reference_verify_attention.__signature__ = _REFERENCE_SIGNATURE


def _exact_softmax(s_pre, s_tail, v_pre, v_tail):
    """softmax over prefix and tail logits together, times the values; [Hkv, G, T, Dv]."""
    logits = torch.cat([s_pre, s_tail], -1)
    p = torch.exp(logits - _finite_max(logits))
    p_len = s_pre.shape[-1]
    acc = torch.einsum("kgts,skv->kgtv", p[..., :p_len], v_pre) + torch.einsum(
        "kgts,skv->kgtv", p[..., p_len:], v_tail
    )
    return _normalise(acc, p.sum(-1))


def _finite_max(s):
    """Row max over the last dim, keepdim, with fully masked rows (-inf) mapped to 0."""
    m = s.amax(-1, keepdim=True)
    return torch.where(m == -math.inf, torch.zeros_like(m), m)


def _normalise(acc, denom):
    """acc / denom, with zeros where a query saw no key (denom 0), as SGLang stores them."""
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom[..., None] > 0, acc / safe[..., None], torch.zeros_like(acc))


_SPLITK_VERIFY_SIGNATURE = _verify_signature("split_size", 256)


def splitk_verify_attention(*args, **kwargs) -> torch.Tensor:
    """Split-K flash-decode arithmetic of the same semantics; returns [N, H, Dv] float32.

    Each request's prefix is cut into ``split_size`` chunks (default 256); every chunk (and the draft tail)
    yields a float32 partial (row max m, exp-sum l, accumulator acc, with softmax weights rounded to the value
    dtype before P.V as a bf16 tensor-core kernel does); the partials are combined with weights
    exp(m_i - max m). Arguments as ``reference_verify_attention``, with ``split_size`` in place of
    ``compute_dtype`` (``_SPLITK_VERIFY_SIGNATURE``).
    """
    a = _bind(_SPLITK_VERIFY_SIGNATURE, args, kwargs)
    split_size = a["split_size"]
    if split_size < 1:
        raise ValueError(f"split_size must be >= 1, got {split_size}")
    v_dtype = a["v_extend"].dtype

    def combine(s_pre, s_tail, v_pre, v_tail):
        return _combine_splits(s_pre, s_tail, v_pre, v_tail, split_size, v_dtype)

    return _verify_attention(a, torch.float32, combine)


splitk_verify_attention.__signature__ = _SPLITK_VERIFY_SIGNATURE


def _partial(s, v_dtype):
    """Online-softmax partial of one chunk: (max, exp-sum, weights rounded to v's dtype for P.V)."""
    p = torch.exp(s - _finite_max(s))
    return s.amax(-1), p.sum(-1), p.to(v_dtype).float()


def _combine_splits(s_pre, s_tail, v_pre, v_tail, split_size, v_dtype):
    """Partials per prefix chunk [.., C] and for the tail, combined into [Hkv, G, T, Dv]."""
    p_len = s_pre.shape[-1]
    chunks = max(1, -(-p_len // split_size))
    pad = chunks * split_size - p_len
    s_chunks = torch.nn.functional.pad(s_pre, (0, pad), value=-math.inf).unflatten(-1, (chunks, split_size))
    v_chunks = torch.nn.functional.pad(v_pre, (0, 0, 0, 0, 0, pad)).unflatten(0, (chunks, split_size))
    m_c, l_c, p_c = _partial(s_chunks, v_dtype)  # m_c, l_c [K, G, T, C]
    acc_c = torch.einsum("kgtcs,cskv->kgtcv", p_c, v_chunks)
    m_t, l_t, p_t = _partial(s_tail, v_dtype)  # [K, G, T]
    acc_t = torch.einsum("kgts,skv->kgtv", p_t, v_tail)
    m_all = torch.cat([m_c, m_t.unsqueeze(-1)], -1)
    weights = torch.exp(m_all - _finite_max(m_all))  # exp(-inf) = 0 drops empty partials
    denom = (weights[..., :-1] * l_c).sum(-1) + weights[..., -1] * l_t
    acc = (weights[..., :-1, None] * acc_c).sum(-2) + weights[..., -1, None] * acc_t
    return _normalise(acc, denom)


# SGLang's keyword options of extend_attention_fwd (0.5.11 .. 0.5.23) with the values that leave them off.
SGLANG_KEYWORD_DEFAULTS = {
    "logit_cap": 0.0,
    "skip_prefix_custom_mask": True,
    "sliding_window_size": -1,
    "sinks": None,
    "window_kv_offsets": None,
    "xai_temperature_len": -1,
    "lse_extend": None,
    "skip_prefix": False,
    "skip_extend": False,
    "page_size": 1,
    "score_mod": None,
    "aux_tensors": None,
    "extend_seq_lens_cpu": None,
    "identity_kv_indices": False,
}
_NO_EFFECT_ON_RESULT = ("extend_seq_lens_cpu",)  # a launch-shape hint in SGLang
_SGLANG_REQUIRED = ("q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr",
                    "kv_indices", "custom_mask", "is_causal", "mask_indptr", "max_len_extend", "k_scale", "v_scale")
# The signature of SGLang's extend_attention_fwd, which the CPU stand-ins below accept (and report to inspect).
SGLANG_SIGNATURE = inspect.Signature(
    [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in _SGLANG_REQUIRED]
    + [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=value)
       for name, value in {"sm_scale": None, **SGLANG_KEYWORD_DEFAULTS}.items()]
)


# The stand-ins' arguments in the order unserved_feature takes them.
_SERVED_INPUTS = ("q_extend", "k_extend", "v_extend", "qo_indptr", "custom_mask", "max_len_extend")


def _features_in_use(options: dict, has_mask: bool) -> list[str]:
    """SGLang options set to something other than "off" (skip_prefix_custom_mask=False counts with a mask)."""
    used = []
    for name, off in SGLANG_KEYWORD_DEFAULTS.items():
        value = options[name]
        if name in _NO_EFFECT_ON_RESULT:
            continue
        if name == "skip_prefix_custom_mask":
            on, name = has_mask and not value, "skip_prefix_custom_mask=False"
        elif off is None:
            on = value is not None
        elif name in ("logit_cap", "sliding_window_size", "xai_temperature_len"):
            on = value is not None and value > 0
        else:
            on = value != off
        if on:
            used.append(name)
    return used


def unserved_feature(
    q_extend, k_extend, v_extend, qo_indptr, custom_mask, max_len_extend, options: Mapping | None = None
) -> str | None:
    """Why the verify kernel cannot serve this ``extend_attention_fwd`` call, or None when it can.

    ``options``: SGLang's keyword options by name (``SGLANG_KEYWORD_DEFAULTS``; a missing one is off; other
    names are ignored). Reads only shapes and host values,
    never device data, so it is safe under CUDA-graph capture. Every request has the same number of drafts
    exactly when q has batch x ``max_len_extend`` rows (SGLang passes the longest extend as max_len_extend).
    """
    options = {name: (options or {}).get(name, off) for name, off in SGLANG_KEYWORD_DEFAULTS.items()}
    used = _features_in_use(options, custom_mask is not None)
    if used:
        return "unsupported feature: " + ", ".join(used)
    if q_extend.shape[-1] != MLA_QK_DIM or k_extend.shape[1:] != (1, MLA_QK_DIM):
        return f"not absorbed MLA: q {tuple(q_extend.shape)}, k_extend {tuple(k_extend.shape)}"
    if v_extend.shape[1:] != (1, MLA_V_DIM):
        return f"not absorbed MLA: v_extend {tuple(v_extend.shape)}"
    batch = qo_indptr.numel() - 1
    if batch < 1:
        return "no requests in the call"
    if custom_mask is not None and custom_mask.numel() == 0:
        return "an empty custom_mask (its data pointer is null)"
    if q_extend.shape[0] != batch * max_len_extend:
        return (
            f"draft lengths differ between requests: {q_extend.shape[0]} rows for {batch} x {max_len_extend}"
        )
    if not 1 <= max_len_extend <= MAX_DRAFT_TOKENS:
        return f"{max_len_extend} draft tokens per request (serves 1..{MAX_DRAFT_TOKENS})"
    return None


def reference_extend_attention_fwd(*args, **kwargs) -> None:
    """Drop-in CPU stand-in for SGLang's ``extend_attention_fwd`` (verify subset); writes ``o_extend``.

    SGLang's positional and keyword arguments (``SGLANG_SIGNATURE``). Computes
    ``reference_verify_attention`` in float32 (the stock kernel's accumulation), stored in ``o_extend``'s
    dtype. Like SGLang, rows beyond the ``cdiv(max_len_extend, BLOCK_M)`` query blocks of a request are left
    untouched, and an empty extend (all-zero ``qo_indptr``) writes nothing. Raises
    NotImplementedError for options outside target verify (logit cap, sliding window, sinks, xai
    temperature, LSE output, skip_prefix/skip_extend, page_size > 1, score_mod, identity_kv_indices).
    """
    a = _bind(SGLANG_SIGNATURE, args, kwargs)
    unmodelled = [f for f in _features_in_use(a, a["custom_mask"] is not None) if not f.startswith("skip_prefix_")]
    if unmodelled:
        raise NotImplementedError(f"reference_extend_attention_fwd does not model: {', '.join(unmodelled)}")
    result = reference_verify_attention(*(a[name] for name in _VERIFY_INPUTS), a["sm_scale"], a["k_scale"],
                                        a["v_scale"], a["skip_prefix_custom_mask"], torch.float32)
    rows_per_request = -(-int(a["max_len_extend"]) // SGLANG_MLA_BLOCK_M) * SGLANG_MLA_BLOCK_M
    _store_rows(a["o_extend"], result, a["qo_indptr"], rows_per_request)


reference_extend_attention_fwd.__signature__ = SGLANG_SIGNATURE


def splitk_extend_attention_fwd(*args, **kwargs) -> bool:
    """CPU stand-in of ``kernel_ext.verify_attention``: True when it wrote ``o_extend``, False to fall back.

    SGLang's positional and keyword arguments (``SGLANG_SIGNATURE``), plus ``split_size``. Serves exactly
    what the CUDA kernel serves (``unserved_feature`` is None): absorbed MLA shapes, the same number of draft
    tokens (1..64) for every request, every option off except skip_prefix_custom_mask=True.
    """
    a = _bind(_SPLITK_SIGNATURE, args, kwargs)
    if _unserved_bound(a):
        return False
    result = splitk_verify_attention(*(a[name] for name in _VERIFY_INPUTS), a["sm_scale"], a["k_scale"],
                                     a["v_scale"], True, a["split_size"])
    _store_rows(a["o_extend"], result, a["qo_indptr"], result.shape[0])
    return True


_SPLITK_SIGNATURE = SGLANG_SIGNATURE.replace(parameters=[
    *SGLANG_SIGNATURE.parameters.values(),
    inspect.Parameter("split_size", inspect.Parameter.KEYWORD_ONLY, default=256),
])
splitk_extend_attention_fwd.__signature__ = _SPLITK_SIGNATURE


def _unserved_bound(arguments: Mapping) -> str | None:
    return unserved_feature(*(arguments[name] for name in _SERVED_INPUTS), arguments)


def unserved_call(*args, **kwargs) -> str | None:
    """``unserved_feature`` of a call with ``splitk_extend_attention_fwd``'s arguments (SGLang's + split_size)."""
    return _unserved_bound(_bind(_SPLITK_SIGNATURE, args, kwargs))


def _store_rows(o_extend, result, qo_indptr, rows_per_request):
    """Write each request's first ``rows_per_request`` rows of ``result`` into ``o_extend``."""
    qo = qo_indptr.tolist()
    for start, end in zip(qo[:-1], qo[1:]):
        stop = min(end, start + rows_per_request)
        if stop > start:
            o_extend[start:stop] = result[start:stop].to(o_extend.dtype)
