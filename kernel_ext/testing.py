"""Verify batches in SGLang's exact target-verify layout, and comparators, for every kernel test.

``make_verify_batch`` builds what SGLang 0.5.23's Triton backend hands ``extend_attention_fwd`` for a
target-verify step (``TritonAttnBackend.init_forward_metadata``): ``qo_indptr`` int32 (``b*T``),
``kv_indptr`` int32, ``kv_indices`` int64 (int32 on request) scattered over a larger KV pool whose unused
rows are NaN so an out-of-bounds read cannot hide, a flat bool ``custom_mask`` of T x (P_b + T) blocks at
``mask_indptr`` int64, ``max_len_extend = T``. The mask's prefix columns, which SGLang never reads
(skip_prefix_custom_mask=True), are random bits, so a kernel that reads them is caught. The output buffer
starts as NaN, so an unwritten row is caught. CUDA-graph replay uses an int64 ``qo_indptr`` and a uint8
mask: pass ``qo_indptr_dtype``/``mask_dtype`` to build those.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import multiprocessing
import os
from dataclasses import dataclass, field

import torch

from kernel_ext.reference import MLA_QK_DIM, MLA_V_DIM

MASK_KINDS = ("tree", "chain", "causal")
# Kernel configurations (CUTOVER_KERNEL_TILES) the GPU tests run: the one the device picks (wgmma on the H200), and
# the small mma.sync tiles that sm_120, production's arch, runs (forced; docs/kernel.md, "sm_120").
TILE_CONFIGS = {"auto": 0, "sm120_small_tiles": 2}


@dataclass
class VerifyBatch:
    """All buffers of one target-verify ``extend_attention_fwd`` call (positional order: ``args()``)."""

    q: torch.Tensor  # [N, H, 576]
    k_extend: torch.Tensor  # [N, 1, 576]
    v_extend: torch.Tensor  # [N, 1, 512], contiguous copy of k_extend[..., :512] as SGLang passes it
    o: torch.Tensor  # [N, H, 512], NaN-poisoned
    k_buffer: torch.Tensor  # [pool, 1, 576]
    v_buffer: torch.Tensor  # [pool, 1, 512], a view of k_buffer[..., :512]
    qo_indptr: torch.Tensor  # [B+1]
    kv_indptr: torch.Tensor  # [B+1]
    kv_indices: torch.Tensor  # [sum P]
    custom_mask: torch.Tensor | None  # flat [sum T*(P_b+T)], None for mask="causal"
    is_causal: bool
    mask_indptr: torch.Tensor  # [B+1] int64
    max_len_extend: int
    sm_scale: float
    k_scale: float = 1.0
    v_scale: float = 1.0
    prefix_lens: list[int] = field(default_factory=list)
    num_draft: int = 0
    parents: list[list[int]] = field(default_factory=list)  # per request: parent of draft i (-1: root)

    def args(self, o: torch.Tensor | None = None) -> tuple:
        """Positional arguments of SGLang's ``extend_attention_fwd`` (through ``sm_scale``)."""
        return (
            self.q,
            self.k_extend,
            self.v_extend,
            self.o if o is None else o,
            self.k_buffer,
            self.v_buffer,
            self.qo_indptr,
            self.kv_indptr,
            self.kv_indices,
            self.custom_mask,
            self.is_causal,
            self.mask_indptr,
            self.max_len_extend,
            self.k_scale,
            self.v_scale,
            self.sm_scale,
        )

    def verify_kwargs(self) -> dict:
        """Keyword arguments of ``reference_verify_attention`` / ``splitk_verify_attention``."""
        return dict(
            q_extend=self.q,
            k_extend=self.k_extend,
            v_extend=self.v_extend,
            k_buffer=self.k_buffer,
            v_buffer=self.v_buffer,
            qo_indptr=self.qo_indptr,
            kv_indptr=self.kv_indptr,
            kv_indices=self.kv_indices,
            custom_mask=self.custom_mask,
            is_causal=self.is_causal,
            mask_indptr=self.mask_indptr,
            sm_scale=self.sm_scale,
            k_scale=self.k_scale,
            v_scale=self.v_scale,
        )

    def fresh_output(self) -> torch.Tensor:
        """A new NaN-filled output buffer shaped like ``o``."""
        return torch.full_like(self.o, math.nan)


def random_tree_parents(num_draft: int, generator: torch.Generator) -> list[int]:
    """DDTree shape: draft 0 is the root (-1), every later draft i has a random parent < i."""
    return [-1] + [int(torch.randint(0, i, (1,), generator=generator)) for i in range(1, num_draft)]


def tree_tail_mask(parents: list[int]) -> torch.Tensor:
    """T x T bool: draft i sees itself and its ancestors."""
    t = len(parents)
    mask = torch.zeros(t, t, dtype=torch.bool)
    for i in range(t):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return mask


def make_verify_batch(
    H: int,
    T: int,
    batch: int,
    prefix_lens: int | list[int],
    mask: str = "tree",
    index_dtype: torch.dtype = torch.int64,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    pool_factor: float = 2.0,
    nan_unused_rows: bool = True,
    seed: int = 0,
    qo_indptr_dtype: torch.dtype = torch.int32,
    kv_indptr_dtype: torch.dtype = torch.int32,
    mask_dtype: torch.dtype = torch.bool,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    sm_scale: float | None = None,
    is_causal: bool = True,
    q_row_padding: int = 0,
) -> VerifyBatch:
    """A random target-verify batch: H query heads, T drafts per request, ``batch`` requests.

    ``prefix_lens``: one int for all requests or one per request. ``mask``: "tree" (random DDTree),
    "chain" (lower-triangular tail) or "causal" (no custom mask). KV rows are scattered over a pool of
    ``pool_factor`` x sum(P) rows (+ one spare); unused rows are NaN when ``nan_unused_rows``.
    ``q_row_padding`` > 0 makes q a non-contiguous view into rows that many elements wider. Tensors are
    drawn on ``device`` (fast for GPU-sized batches) from ``seed``; tree shapes on the CPU.
    """
    if mask not in MASK_KINDS:
        raise ValueError(f"mask must be one of {MASK_KINDS}, got {mask!r}")
    prefix = [prefix_lens] * batch if isinstance(prefix_lens, int) else list(prefix_lens)
    if len(prefix) != batch or min(prefix, default=0) < 0:
        raise ValueError(f"prefix_lens must be one int or {batch} ints >= 0, got {prefix_lens!r}")
    if pool_factor < 1.0:
        raise ValueError(f"pool_factor must be >= 1 (the pool holds every prefix row), got {pool_factor}")
    gen = torch.Generator(device=device).manual_seed(seed)
    tree_gen = torch.Generator().manual_seed(seed)
    n, total_prefix = batch * T, sum(prefix)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    def indptr(lengths, index_type):
        return torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0).to(index_type).to(device)

    pool = int(total_prefix * pool_factor) + 1
    k_buffer = torch.full(
        (pool, 1, MLA_QK_DIM), math.nan if nan_unused_rows else 0.0, dtype=dtype, device=device
    )
    kv_indices = torch.randperm(pool, generator=gen, device=device)[:total_prefix]
    k_buffer[kv_indices] = randn(total_prefix, 1, MLA_QK_DIM)
    k_extend = randn(n, 1, MLA_QK_DIM)
    q = randn(n, H, MLA_QK_DIM + q_row_padding)[..., :MLA_QK_DIM]

    parents, flat_mask = [], []
    for p in prefix:
        tree = random_tree_parents(T, tree_gen) if mask == "tree" else list(range(-1, T - 1))
        parents.append(tree)
        block = torch.randint(0, 2, (T, p + T), generator=gen, device=device, dtype=torch.uint8).bool()
        block[:, p:] = tree_tail_mask(tree).to(device)
        flat_mask.append(block.flatten())

    return VerifyBatch(
        q=q,
        k_extend=k_extend,
        v_extend=k_extend[..., :MLA_V_DIM].contiguous(),
        o=torch.full((n, H, MLA_V_DIM), math.nan, dtype=dtype, device=device),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :MLA_V_DIM],
        qo_indptr=indptr([T] * batch, qo_indptr_dtype),
        kv_indptr=indptr(prefix, kv_indptr_dtype),
        kv_indices=kv_indices.to(index_dtype),
        custom_mask=None if mask == "causal" else torch.cat(flat_mask).to(mask_dtype),
        is_causal=is_causal,
        mask_indptr=indptr([T * (p + T) for p in prefix], torch.int64),
        max_len_extend=T,
        sm_scale=sm_scale or 1.0 / math.sqrt(MLA_QK_DIM),
        k_scale=k_scale,
        v_scale=v_scale,
        prefix_lens=prefix,
        num_draft=T,
        parents=parents,
    )


def rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected||_2 / ||expected||_2 in float64 (0 when both are zero)."""
    a, e = actual.double(), expected.double()
    norm = e.norm().item()
    diff = (a - e).norm().item()
    return diff / norm if norm > 0 else diff


@dataclass(frozen=True)
class Comparison:
    """How far ``actual`` is from ``expected``: FlashMLA-style worst errors with their indices."""

    rel_l2: float
    max_abs: float
    max_abs_index: tuple[int, ...]
    max_rel: float
    max_rel_index: tuple[int, ...]
    nonfinite_actual: int
    nonfinite_expected: int

    def within(self, rel_l2_tol: float) -> bool:
        return self.nonfinite_actual == 0 and self.nonfinite_expected == 0 and self.rel_l2 <= rel_l2_tol

    def describe(self) -> str:
        return (
            f"rel_l2={self.rel_l2:.3e} max_abs={self.max_abs:.3e} at {self.max_abs_index} "
            f"max_rel={self.max_rel:.3e} at {self.max_rel_index} "
            f"nonfinite actual={self.nonfinite_actual} expected={self.nonfinite_expected}"
        )


def compare(actual: torch.Tensor, expected: torch.Tensor) -> Comparison:
    """Compare two same-shaped outputs in float64; non-finite elements are counted, not averaged."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape mismatch: actual {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    finite = torch.isfinite(a) & torch.isfinite(e)
    abs_err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    rel_err = abs_err / (e.abs() + 1e-6)
    if a.numel() == 0:
        return Comparison(0.0, 0.0, (), 0.0, (), 0, 0)
    abs_at = int(abs_err.argmax())
    rel_at = int(rel_err.argmax())
    return Comparison(
        rel_l2=rel_l2(torch.where(finite, a, 0.0), torch.where(finite, e, 0.0)),
        max_abs=abs_err.flatten()[abs_at].item(),
        max_abs_index=tuple(int(i) for i in torch.unravel_index(torch.tensor(abs_at), a.shape)),
        max_rel=rel_err.flatten()[rel_at].item(),
        max_rel_index=tuple(int(i) for i in torch.unravel_index(torch.tensor(rel_at), a.shape)),
        nonfinite_actual=int((~torch.isfinite(a)).sum()),
        nonfinite_expected=int((~torch.isfinite(e)).sum()),
    )


def assert_close(
    actual: torch.Tensor, expected: torch.Tensor, rel_l2_tol: float, what: str = "output"
) -> Comparison:
    """Raise AssertionError naming ``what`` and the worst errors unless within ``rel_l2_tol``, all finite."""
    result = compare(actual, expected)
    if not result.within(rel_l2_tol):
        raise AssertionError(f"{what} differs (tolerance rel_l2 {rel_l2_tol:.1e}): {result.describe()}")
    return result


SGLANG_EXTEND_ATTENTION_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",  # 0.5.16 and later
    "sglang.srt.layers.attention.triton_ops.extend_attention",  # 0.5.11 .. 0.5.15
)


class InterpretedSGLangExtendAttention:
    """SGLang's real ``extend_attention_fwd`` in Triton's CPU interpreter, in a worker process.

    Triton decides at import time whether its own language functions are interpreted, so SGLang's kernel
    can only be interpreted in a process that imported Triton with TRITON_INTERPRET=1. This starts one
    such worker (spawned with TRITON_INTERPRET=1, so this process's Triton is untouched and may still
    drive a GPU) and forwards each call to it; the output argument is filled in place as SGLang does.
    Float32 CPU tensors only (the interpreter is wrong in bf16). ``source_path`` runs another copy of
    SGLang's extend_attention.py (say, one read from an older wheel) instead of the installed module.
    ``close()`` stops the worker.
    """

    def __init__(self, source_path: str | None = None):
        context = multiprocessing.get_context("spawn")
        previous = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            self._pool = context.Pool(1, initializer=_load_interpreted_sglang, initargs=(source_path,))
        finally:
            if previous is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = previous
        self.module_name = self._pool.apply(_loaded_module_name)

    def __call__(self, *args, **kwargs) -> None:
        args[3].copy_(self._pool.apply(_run_interpreted_sglang, (args, kwargs)))

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()


_worker_module = None
_worker_load_error: BaseException | None = None


def _load_interpreted_sglang(source_path: str | None) -> None:
    """Worker initializer: import SGLang's extend_attention (either layout, or a file) under the interpreter.

    A failure is kept and raised by the first call: an initializer that raises makes a Pool respawn
    its worker forever.
    """
    global _worker_module, _worker_load_error
    try:
        assert os.environ.get("TRITON_INTERPRET") == "1", "worker started without TRITON_INTERPRET=1"
        _worker_module = _import_extend_attention(source_path)
    except BaseException as error:  # noqa: BLE001 - reported to the caller by _loaded_module()
        _worker_load_error = error


def _import_extend_attention(source_path: str | None):
    if source_path is not None:
        spec = importlib.util.spec_from_file_location("sglang_extend_attention_under_test", source_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    for name in SGLANG_EXTEND_ATTENTION_MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError("SGLang's extend_attention module: pip install --no-deps sglang")


def _loaded_module():
    if _worker_load_error is not None:
        raise RuntimeError(f"could not load SGLang's extend_attention: {_worker_load_error!r}")
    return _worker_module


def _loaded_module_name() -> str:
    module = _loaded_module()
    return getattr(module, "__file__", None) or module.__name__


def _run_interpreted_sglang(args, kwargs):
    _loaded_module().extend_attention_fwd(*args, **kwargs)
    return args[3]
