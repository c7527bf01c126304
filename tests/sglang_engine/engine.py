"""SGLang's real attention engine path without a model, for the plugin's engine tests.

Runs in a worker process that imported Triton with TRITON_INTERPRET=1 (SGLang's Triton kernels on the CPU,
float32: the interpreter is wrong in bf16). It builds SGLang's own objects: a ``ModelRunner`` (the runner of
SGLang's attention test kit, ``MockMLAModelRunner``: a real ModelRunner subclass with real pools) whose
``MLATokenToKVPool`` holds a 576-wide latent K (V is its first 512 columns, page size 1) and a real
``ReqToTokenPool``; a real ``TritonAttnBackend`` built from it (the plugin's hooks, applied by SGLang's
``load_plugins()`` from the installed entry point, run inside its ``__init__``); a real ``ForwardBatch`` in
``ForwardMode.TARGET_VERIFY`` whose ``EagleVerifyInput`` carries a draft tree mask laid out as SGLang lays it
(FULL_MASK: per request a row-major T x (prefix + T) block, ``mask_indptr`` from the backend). Trees come from
``kernel_ext.testing`` (random DDTree shapes, any T up to 64; the kit's own builder stops at 3 tokens).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

KV_LORA_RANK, ROPE_DIM = 512, 64
QK_DIM = KV_LORA_RANK + ROPE_DIM


@dataclass
class Engine:
    """One model runner and the TritonAttnBackend SGLang built for it."""

    runner: object
    backend: object
    num_heads: int
    layers: int


@dataclass
class VerifyStep:
    """One target-verify step's inputs, and the float64 truth per layer."""

    batch: object  # sglang ForwardBatch
    prefix_lens: tuple[int, ...]
    draft_tokens: int
    q: dict  # layer -> [N, H, 576]
    k: dict  # layer -> [N, 1, 576]
    expected: dict  # layer -> [N, H, 512] float64


def enter_single_rank_context(tp_rank: int = 0) -> None:
    """This worker's place in SGLang's parallel runtime context for the rest of its life, as a one-GPU scheduler
    process publishes it (one TP rank, no attention TP, CP or DCP split)."""
    from sglang.srt.runtime_context import get_parallel

    get_parallel().override_permanently(tp_rank=tp_rank, attn_tp_size=1, attn_tp_rank=0, attn_dcp_rank=0,
                                        attn_cp_size=1, attn_cp_rank=0)


def build_engine(prefix_lens: tuple[int, ...], draft_tokens: int, *, num_heads: int = 2, layers: int = 2,
                 draft_worker: bool = False, max_requests: int = 4, max_context_len: int = 128,
                 device: str = "cpu", dtype: torch.dtype = torch.float32, cuda_graph: bool = False) -> Engine:
    """A ModelRunner (target, or a draft worker's) with real pools for ``layers`` MLA layers, and the
    TritonAttnBackend SGLang builds for it (``TritonAttnBackend(model_runner)``, hooks and all)."""
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods.mla_attention import (
        MLAAttentionCase, MockMLAModelRunner, TinyMLAModelConfig)

    case = MLAAttentionCase(name="cutover_engine", backend="triton", forward_mode=ForwardMode.TARGET_VERIFY,
                            num_heads=num_heads, page_size=1, prefix_lens=prefix_lens,
                            extend_lens=(draft_tokens,) * len(prefix_lens))
    config = TinyMLAModelConfig(num_heads=num_heads, kv_lora_rank=KV_LORA_RANK, qk_rope_head_dim=ROPE_DIM,
                                hidden_size=64, context_len=max_context_len)
    runner = MockMLAModelRunner(case=case, model_config=config, dtype=dtype, device=device,
                                max_context_len=max_context_len, kv_lora_rank=KV_LORA_RANK,
                                qk_rope_head_dim=ROPE_DIM, runner_batch_size=max_requests,
                                disable_cuda_graph=not cuda_graph)
    runner.is_draft_worker = draft_worker
    runner.token_to_kv_pool = MLATokenToKVPool(  # the kit's pool has one layer; the counters are per layer
        size=runner.token_to_kv_pool.size, page_size=1, dtype=dtype, kv_lora_rank=KV_LORA_RANK,
        qk_rope_head_dim=ROPE_DIM, layer_num=layers, device=device, enable_memory_saver=False)
    return Engine(runner, TritonAttnBackend(runner), num_heads, layers)


def tree_mask_rows(parents: list[int], prefix_len: int) -> torch.Tensor:
    """One request's FULL_MASK block: T x (prefix + T), the prefix all visible, the tail the tree."""
    from kernel_ext.testing import tree_tail_mask

    t = len(parents)
    rows = torch.ones(t, prefix_len + t, dtype=torch.bool)
    rows[:, prefix_len:] = tree_tail_mask(parents)
    return rows


def verify_step(engine: Engine, prefix_lens: tuple[int, ...], draft_tokens: int, seed: int) -> VerifyStep:
    """A TARGET_VERIFY ForwardBatch over ``prefix_lens`` with a random draft tree of ``draft_tokens`` per request,
    prefix KV written into the pool, q/k per layer, and the float64 truth (kernel_ext.reference) computed from
    this step's own layout (not from the backend's metadata)."""
    from kernel_ext.reference import reference_verify_attention
    from kernel_ext.testing import random_tree_parents
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput
    from sglang.test.kits.attention_unittest.attention_methods.mla_attention import (
        MLAAttentionCase, _make_forward_batch)

    generator = torch.Generator().manual_seed(seed)
    runner, batch_size = engine.runner, len(prefix_lens)
    case = MLAAttentionCase(name="cutover_step", backend="triton", forward_mode=ForwardMode.TARGET_VERIFY,
                            num_heads=engine.num_heads, page_size=1, prefix_lens=prefix_lens,
                            extend_lens=(draft_tokens,) * batch_size)
    device, dtype = runner.device, runner.dtype
    batch = _make_forward_batch(case, runner, max_context_len=runner.req_to_token_pool.max_context_len,
                                device=device)
    # target verify: seq_lens are the committed prefixes; the drafts are the extend part
    batch.seq_lens_cpu = torch.tensor(prefix_lens, dtype=torch.int32)
    batch.seq_lens = batch.seq_lens_cpu.to(device)
    batch.seq_lens_sum = sum(prefix_lens)
    trees = [random_tree_parents(draft_tokens, generator) for _ in prefix_lens]
    blocks = [tree_mask_rows(parents, prefix) for parents, prefix in zip(trees, prefix_lens)]
    custom_mask = torch.cat([block.reshape(-1) for block in blocks]).to(device)
    n = batch_size * draft_tokens
    batch.spec_info = EagleVerifyInput(
        draft_token=batch.input_ids, custom_mask=custom_mask, positions=batch.positions,
        retrieve_index=torch.arange(n, device=device).view(batch_size, draft_tokens),
        retrieve_next_token=torch.full((batch_size, draft_tokens), -1, device=device),
        retrieve_next_sibling=torch.full((batch_size, draft_tokens), -1, device=device),
        retrieve_cum_len=torch.arange(batch_size + 1, dtype=torch.int32, device=device) * draft_tokens,
        spec_steps=max(0, draft_tokens - 1), topk=2, draft_token_num=draft_tokens,
        capture_hidden_mode=CaptureHiddenMode.FULL, seq_lens_sum=batch.seq_lens_sum, seq_lens_cpu=batch.seq_lens_cpu)

    req_to_token = runner.req_to_token_pool.req_to_token
    prefix_locs = torch.cat([req_to_token[b, :p].long() for b, p in enumerate(prefix_lens)])
    kv_indptr = torch.tensor([0, *torch.tensor(prefix_lens).cumsum(0).tolist()], dtype=torch.int64, device=device)
    qo_indptr = torch.arange(batch_size + 1, dtype=torch.int64, device=device) * draft_tokens
    mask_indptr = torch.tensor([0, *torch.tensor([b.numel() for b in blocks]).cumsum(0).tolist()], device=device)
    q, k, expected = {}, {}, {}
    for layer in range(engine.layers):
        k_buffer = runner.token_to_kv_pool.get_key_buffer(layer)
        k_buffer[prefix_locs] = torch.randn(len(prefix_locs), 1, QK_DIM, generator=generator).to(device, dtype)
        q[layer] = torch.randn(n, engine.num_heads, QK_DIM, generator=generator).to(device, dtype)
        k[layer] = torch.randn(n, 1, QK_DIM, generator=generator).to(device, dtype)
        expected[layer] = reference_verify_attention(
            q[layer], k[layer], k[layer][..., :KV_LORA_RANK], k_buffer, k_buffer[..., :KV_LORA_RANK], qo_indptr,
            kv_indptr, prefix_locs, custom_mask, True, mask_indptr, sm_scale=QK_DIM ** -0.5)
    return VerifyStep(batch, prefix_lens, draft_tokens, q, k, expected)


def radix_layer(engine: Engine, layer_id: int):
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(num_heads=engine.num_heads, head_dim=QK_DIM, scaling=QK_DIM ** -0.5, num_kv_heads=1,
                          layer_id=layer_id, v_head_dim=KV_LORA_RANK)


def run_step(engine: Engine, step: VerifyStep) -> dict:
    """SGLang's own path for one verify step: ``init_forward_metadata`` then ``forward_extend`` per layer (the
    draft tokens' KV is written into the pool by it). Returns layer -> output [N, H, 512]."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    outputs = {}
    with torch.no_grad(), forward_context(ForwardContext(attn_backend=engine.backend)):
        engine.backend.init_forward_metadata(step.batch)
        for layer in range(engine.layers):
            k = step.k[layer]
            o = engine.backend.forward_extend(step.q[layer], k, k[..., :KV_LORA_RANK], radix_layer(engine, layer),
                                              step.batch)
            outputs[layer] = o.view(-1, engine.num_heads, KV_LORA_RANK).clone()
    return outputs


@dataclass
class CapturedVerify:
    """What a CUDA graph of one verify step (every layer) captures: the capture-time ForwardBatch, whose buffers
    (out_cache_loc among them) the graph reads at every replay, and the static q/k inputs."""

    batch: object
    q: dict
    k: dict
    capture_bs: int
    drafts: int


def capture_verify_metadata(engine: Engine, capture_bs: int, drafts: int) -> CapturedVerify:
    """SGLang's capture-time path for target verify: ``init_cuda_graph_state`` and the capture metadata of a full
    batch of ``capture_bs`` requests at the backend's fill prefix (call inside a forward_context)."""
    from sglang.test.kits.attention_unittest.runner_modes.speculative_cuda_graph_runner import (
        _init_cuda_graph_capture_metadata)

    fill = engine.backend.get_cuda_graph_seq_len_fill_value()
    step = verify_step(engine, (fill,) * capture_bs, drafts, seed=1)
    _init_cuda_graph_capture_metadata(engine.backend, capture_bs, step.batch)
    return CapturedVerify(step.batch, {layer: step.q[layer].clone() for layer in step.q},
                          {layer: step.k[layer].clone() for layer in step.k}, capture_bs, drafts)


def forward_captured(engine: Engine, captured: CapturedVerify) -> dict:
    """Every layer's ``forward_extend`` over the captured inputs (what the graph records, or replays eagerly);
    layer -> output [N, H, 512]."""
    outputs = {}
    for layer in range(engine.layers):
        k = captured.k[layer]
        o = engine.backend.forward_extend(captured.q[layer], k, k[..., :KV_LORA_RANK], radix_layer(engine, layer),
                                          captured.batch)
        outputs[layer] = o.view(-1, engine.num_heads, KV_LORA_RANK)
    return outputs


def load_replay(engine: Engine, captured: CapturedVerify, prefixes: tuple[int, ...], seed: int) -> VerifyStep:
    """A step of ``prefixes`` made ready for a replay as SGLang's graph runner makes one: the batch padded to the
    captured size (built with the fill prefix there, then overwritten as production pads), the replay metadata
    (call inside a forward_context), and the step's q, k and KV write slots copied into the captured buffers."""
    from sglang.test.kits.attention_unittest.runner_modes.speculative_cuda_graph_runner import (
        _apply_prod_fill_padding, _init_cuda_graph_replay_metadata)

    fill = engine.backend.get_cuda_graph_seq_len_fill_value()
    padding = (fill,) * (captured.capture_bs - len(prefixes))
    step = verify_step(engine, prefixes + padding, captured.drafts, seed=seed)
    _apply_prod_fill_padding(step.batch, real_bs=len(prefixes), capture_bs=captured.capture_bs,
                             seq_len_fill_value=fill, num_tokens_per_req=captured.drafts)
    _init_cuda_graph_replay_metadata(engine.backend, captured.capture_bs, step.batch)
    for layer in range(engine.layers):
        captured.q[layer].copy_(step.q[layer])
        captured.k[layer].copy_(step.k[layer])
    captured.batch.out_cache_loc.copy_(step.batch.out_cache_loc)
    return step


class StockSpy:
    """Wraps SGLang's kernel behind the plugin's dispatcher on one backend: records the qo_indptr of every call
    (an all-zero one is the empty extend custom mode gives Triton)."""

    def __init__(self, backend):
        self.dispatcher = backend._cutover_dispatcher
        self.stock = self.dispatcher.stock
        self.qo_indptrs: list[list[int]] = []
        self.dispatcher.stock = self

    def __call__(self, *args, **kwargs):
        self.qo_indptrs.append(args[6].tolist())
        return self.stock(*args, **kwargs)

    def take(self) -> list[list[int]]:
        taken, self.qo_indptrs = self.qo_indptrs, []
        return taken


def wait_for_mode(paths, rank: int, mode: str, generation: int, timeout_s: float = 20.0):
    """The rank's heartbeat once it runs ``mode`` at ``generation`` (the control thread applied it)."""
    from cutover.hostprotocol.hostlayout import read_heartbeat

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        beat = read_heartbeat(paths.heartbeat(rank))
        if beat is not None and beat.generation_seen >= generation and beat.mode_active == mode:
            return beat
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} did not reach {mode} at generation {generation}: last heartbeat {beat}")
