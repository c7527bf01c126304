"""A stand-in for SGLang's TritonAttnBackend: just enough surface for the plugin's hooks to attach the same way.

``StandInBackend.__init__`` sets ``self.extend_attention_fwd`` and ``forward_extend(q, k, v, layer,
forward_batch)`` calls it with SGLang's positional arguments, as TritonAttnBackend does in every supported
SGLang version; the plugin's hooks are registered on these two methods through SGLang's HookRegistry.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StandInModelRunner:
    """The fields of SGLang's ModelRunner the plugin reads (rank and device) plus the stock kernel."""

    tp_rank: int
    device: torch.device
    stock_kernel: object


@dataclass
class StandInLayer:
    layer_id: int


class TargetVerifyMode:
    """forward_batch.forward_mode of a target-verify step."""

    @staticmethod
    def is_target_verify() -> bool:
        return True


@dataclass
class StandInForwardBatch:
    """A target-verify forward batch: SGLang's metadata buffers for ``extend_attention_fwd``."""

    batch: object  # kernel_ext.testing.VerifyBatch
    forward_mode: object = TargetVerifyMode()


class StandInBackend:
    """Holds ``extend_attention_fwd`` like TritonAttnBackend; not SGLang (the sandbox says so)."""

    def __init__(self, model_runner: StandInModelRunner):
        self.extend_attention_fwd = model_runner.stock_kernel

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        b = forward_batch.batch
        self.extend_attention_fwd(q, k, v, b.o, b.k_buffer, b.v_buffer, b.qo_indptr, b.kv_indptr, b.kv_indices,
                                  b.custom_mask, b.is_causal, b.mask_indptr, b.max_len_extend, b.k_scale,
                                  b.v_scale, b.sm_scale)
        return b.o
