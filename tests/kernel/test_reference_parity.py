"""CPU parity: the torch references against SGLang's real Triton ``extend_attention_fwd`` (interpreted).

SGLang runs in float32 (Triton's interpreter is wrong in bf16); the reference runs in float64. Measured
rel-L2 between them is ~3e-7 to 6e-7; the tolerance leaves a few x headroom, far below the ~1e-1 that any
mask mis-indexing produces (``test_misindexed_mask_is_detected`` proves the suite notices).
"""

from __future__ import annotations

import math

import pytest
import torch

from kernel_ext.reference import (
    reference_extend_attention_fwd,
    reference_verify_attention,
    splitk_extend_attention_fwd,
    splitk_verify_attention,
)
from kernel_ext.testing import (
    assert_close,
    compare,
    make_verify_batch,
    tree_tail_mask,
)

FLOAT32_TOL = 2e-6  # reference (float64) vs SGLang (float32)
MISINDEXED_MIN_REL_L2 = 1e-2  # a wrong mask read is at least this far off on the cases below

PARITY_CASES = {
    # name: (H, T, batch, prefix_lens, mask, make_verify_batch keyword overrides)
    "tree-3req-mixed-prefix": (2, 8, 3, [0, 5, 67], "tree", {}),
    "tree-int32-indices": (8, 16, 2, [33, 1], "tree", {"index_dtype": torch.int32}),
    "chain": (1, 5, 2, [7, 100], "chain", {}),
    "causal-no-mask": (2, 8, 2, [3, 50], "causal", {}),
    "prefix-0": (2, 4, 2, 0, "tree", {}),
    "odd-sizes": (3, 7, 3, [1, 13, 31], "tree", {}),
    "single-draft": (2, 1, 2, [9, 0], "chain", {}),
    "t64-crosses-block-m": (1, 64, 1, 40, "tree", {}),
    "graph-layout-int64-qo-uint8-mask": (
        2,
        8,
        2,
        [11, 6],
        "tree",
        {"qo_indptr_dtype": torch.int64, "kv_indptr_dtype": torch.int64, "mask_dtype": torch.uint8},
    ),
    "scales": (2, 8, 2, [20, 9], "tree", {"k_scale": 0.5, "v_scale": 2.0, "sm_scale": 0.05}),
    "noncontiguous-q": (2, 8, 2, [12, 30], "tree", {"q_row_padding": 64}),
    "no-mask-not-causal": (2, 8, 2, [3, 10], "causal", {"is_causal": False}),
}


def float32_batch(H, T, batch, prefix_lens, mask, seed=0, **overrides):
    return make_verify_batch(H, T, batch, prefix_lens, mask=mask, dtype=torch.float32, seed=seed, **overrides)


def run_sglang(sglang_fwd, b):
    out = b.fresh_output()
    sglang_fwd(*b.args(out))
    return out


@pytest.mark.sglang
@pytest.mark.parametrize("case", PARITY_CASES, ids=list(PARITY_CASES))
def test_reference_matches_sglang(sglang_extend_attention_fwd, case):
    H, T, batch, prefix, mask, overrides = PARITY_CASES[case]
    b = float32_batch(H, T, batch, prefix, mask, seed=list(PARITY_CASES).index(case), **overrides)
    expected = run_sglang(sglang_extend_attention_fwd, b)
    assert_close(
        reference_verify_attention(**b.verify_kwargs()), expected, FLOAT32_TOL, f"reference [{case}]"
    )


@pytest.mark.sglang
@pytest.mark.parametrize("is_causal", [True, False])
def test_mask_above_diagonal_follows_sglang_block_rule(sglang_extend_attention_fwd, is_causal):
    """A mask with entries above the diagonal (never a draft tree): SGLang with is_causal stops each
    32-row query block's tail sweep at the block's end; the reference reproduces that exactly."""
    b = float32_batch(2, 40, 1, 6, "tree", seed=5)
    b.custom_mask = torch.randint(
        0, 2, b.custom_mask.shape, generator=torch.Generator().manual_seed(5)
    ).bool()
    b.is_causal = is_causal
    expected = run_sglang(sglang_extend_attention_fwd, b)
    assert_close(
        reference_verify_attention(**b.verify_kwargs()), expected, FLOAT32_TOL, "above-diagonal mask"
    )
    if is_causal:  # the block rule matters here: reading the whole tail would be wrong
        whole_tail = reference_verify_attention(**b.verify_kwargs(), causal_block_m=64)
        assert compare(whole_tail, expected).rel_l2 > MISINDEXED_MIN_REL_L2


def transposed_tail(b):
    """A mask that, read correctly, gives what a kernel reading tail[j, i] instead of tail[i, j] gets."""
    mask = b.custom_mask.clone()
    for start, p in zip(b.mask_indptr.tolist(), b.prefix_lens):
        block = mask[start : start + b.num_draft * (p + b.num_draft)].view(b.num_draft, -1)
        block[:, p:] = block[:, p:].t().clone()
    return mask


def row_stride_without_prefix(b):
    """... what a kernel gets that uses row stride T instead of P + T (forgets the prefix columns)."""
    mask = b.custom_mask.clone()
    for start, p in zip(b.mask_indptr.tolist(), b.prefix_lens):
        t = b.num_draft
        read = b.custom_mask[start : start + t * t].view(t, t)
        mask[start : start + t * (p + t)].view(t, p + t)[:, p:] = read
    return mask


def first_request_mask_for_all(b):
    """... what a kernel gets that ignores mask_indptr[b] and reads request 0's tail for every request."""
    mask = b.custom_mask.clone()
    t, p0 = b.num_draft, b.prefix_lens[0]
    tail0 = b.custom_mask[: t * (p0 + t)].view(t, p0 + t)[:, p0:]
    for start, p in zip(b.mask_indptr.tolist(), b.prefix_lens):
        mask[start : start + t * (p + t)].view(t, p + t)[:, p:] = tail0
    return mask


@pytest.mark.sglang
@pytest.mark.parametrize(
    "bug",
    ["transposed-tail", "row-stride-T", "reads-prefix-columns", "ignores-mask", "first-request-mask"],
)
def test_misindexed_mask_is_detected(sglang_extend_attention_fwd, bug):
    """The comparison that passes above must flag every plausible mask-indexing bug."""
    b = float32_batch(2, 8, 2, [5, 30], "tree", seed=11)
    b.parents[1] = b.parents[0][:1] + [0] * 7  # request 1: a star, so its tree differs from request 0's
    t, p1 = b.num_draft, b.prefix_lens[1]
    start = b.mask_indptr[1].item()
    b.custom_mask.view(-1)[start : start + t * (p1 + t)].view(t, p1 + t)[:, p1:] = tree_tail_mask(
        b.parents[1]
    )
    expected = run_sglang(sglang_extend_attention_fwd, b)
    kwargs = b.verify_kwargs()
    if bug == "transposed-tail":
        kwargs["custom_mask"] = transposed_tail(b)
    elif bug == "row-stride-T":
        kwargs["custom_mask"] = row_stride_without_prefix(b)
    elif bug == "reads-prefix-columns":
        kwargs["skip_prefix_custom_mask"] = False
    elif bug == "ignores-mask":
        kwargs["custom_mask"] = None
    else:
        kwargs["custom_mask"] = first_request_mask_for_all(b)
    buggy = compare(reference_verify_attention(**kwargs), expected)
    assert not buggy.within(FLOAT32_TOL), f"{bug} went unnoticed: {buggy.describe()}"
    assert buggy.rel_l2 > MISINDEXED_MIN_REL_L2, buggy.describe()
    with pytest.raises(AssertionError, match="differs"):
        assert_close(reference_verify_attention(**kwargs), expected, FLOAT32_TOL)


@pytest.mark.sglang
def test_dropin_reference_writes_exactly_the_rows_sglang_writes(sglang_extend_attention_fwd):
    """max_len_extend below T: SGLang covers cdiv(max_len_extend, 32) query blocks and leaves the rest."""
    b = float32_batch(2, 40, 2, [3, 17], "tree", seed=7)
    b.max_len_extend = 20
    expected = run_sglang(sglang_extend_attention_fwd, b)
    actual = b.fresh_output()
    reference_extend_attention_fwd(*b.args(actual))
    assert torch.equal(torch.isnan(actual), torch.isnan(expected))
    assert torch.isnan(expected).any() and not torch.isnan(expected[:32]).any()
    assert_close(torch.nan_to_num(actual), torch.nan_to_num(expected), FLOAT32_TOL, "drop-in reference")


@pytest.mark.sglang
def test_empty_extend_writes_nothing(sglang_extend_attention_fwd):
    """The live switch's gate: a zeroed qo_indptr makes SGLang's kernel (and the stand-in) write nothing."""
    b = float32_batch(2, 8, 2, [4, 9], "tree", seed=2)
    b.qo_indptr = torch.zeros_like(b.qo_indptr)
    for name, kernel in (
        ("sglang", sglang_extend_attention_fwd),
        ("reference", reference_extend_attention_fwd),
    ):
        out = b.fresh_output()
        kernel(*b.args(out))
        assert torch.isnan(out).all(), f"{name} wrote rows of an empty extend"


@pytest.mark.parametrize(
    "prefix_lens, split_size",
    [([0, 1, 300], 64), ([257, 256], 256), ([5, 1000], 100), ([3], 1)],
)
@pytest.mark.parametrize("mask", ["tree", "causal"])
def test_splitk_matches_reference_float32(prefix_lens, split_size, mask):
    b = float32_batch(4, 8, len(prefix_lens), prefix_lens, mask, seed=split_size)
    expected = reference_verify_attention(**b.verify_kwargs())
    assert_close(
        splitk_verify_attention(**b.verify_kwargs(), split_size=split_size), expected, 1e-6, "split-K"
    )


def test_splitk_bf16_is_as_close_to_truth_as_a_bf16_kernel():
    """bf16 inputs: split-K rounds softmax weights to bf16 before P.V, as SGLang and MMA kernels do."""
    b = make_verify_batch(8, 16, 3, [0, 700, 2000], mask="tree", dtype=torch.bfloat16, seed=4)
    truth = reference_verify_attention(**b.verify_kwargs())
    err = compare(splitk_verify_attention(**b.verify_kwargs(), split_size=128), truth)
    assert err.within(1e-2), err.describe()
    assert err.rel_l2 > 1e-5, "bf16 rounding of the weights should be visible; is split-K computing in fp32?"


def test_splitk_dropin_serves_verify_and_declines_other_features():
    b = make_verify_batch(8, 8, 2, [10, 40], mask="tree", dtype=torch.bfloat16, seed=9)
    out = b.fresh_output()
    assert splitk_extend_attention_fwd(*b.args(out)) is True
    assert_close(out, reference_verify_attention(**b.verify_kwargs()), 1e-2, "split-K drop-in")
    declined = {
        "logit_cap": 30.0,
        "skip_prefix_custom_mask": False,
        "sliding_window_size": 128,
        "sinks": torch.zeros(8),
        "xai_temperature_len": 4,
        "lse_extend": torch.zeros(16, 8),
        "skip_prefix": True,
        "page_size": 64,
        "identity_kv_indices": True,
    }
    for name, value in declined.items():
        out = b.fresh_output()
        assert splitk_extend_attention_fwd(*b.args(out), **{name: value}) is False, name
        assert torch.isnan(out).all(), f"{name}: declined but wrote the output"


def test_splitk_dropin_declines_uneven_drafts_and_other_head_dims():
    b = make_verify_batch(2, 4, 2, [3, 5], mask="tree", dtype=torch.float32, seed=1)
    args = list(b.args())
    args[6] = torch.tensor([0, 3, 8], dtype=torch.int32)  # drafts 3 and 5: SGLang passes max_len_extend=5
    args[12] = 5
    assert splitk_extend_attention_fwd(*args) is False
    assert splitk_extend_attention_fwd(b.q[..., :192], *b.args()[1:]) is False
    with pytest.raises(TypeError, match="not_an_option"):
        splitk_extend_attention_fwd(*b.args(), not_an_option=1)


def test_reference_dropin_refuses_features_it_does_not_model():
    b = make_verify_batch(2, 4, 1, 3, mask="tree", dtype=torch.float32)
    with pytest.raises(NotImplementedError, match="logit_cap"):
        reference_extend_attention_fwd(*b.args(), logit_cap=30.0)


def test_make_verify_batch_matches_sglang_target_verify_layout():
    b = make_verify_batch(4, 8, 3, [0, 5, 9], mask="tree", index_dtype=torch.int32, seed=6)
    assert (b.qo_indptr.dtype, b.kv_indptr.dtype, b.kv_indices.dtype, b.mask_indptr.dtype) == (
        torch.int32,
        torch.int32,
        torch.int32,
        torch.int64,
    )
    assert b.qo_indptr.tolist() == [0, 8, 16, 24] and b.kv_indptr.tolist() == [0, 0, 5, 14]
    assert b.mask_indptr.tolist() == [0, 64, 64 + 104, 64 + 104 + 136]
    assert b.custom_mask.numel() == b.mask_indptr[-1].item() and b.custom_mask.dtype == torch.bool
    assert b.v_buffer.data_ptr() == b.k_buffer.data_ptr() and b.v_buffer.shape[-1] == 512
    used = torch.zeros(b.k_buffer.shape[0], dtype=torch.bool)
    used[b.kv_indices.long()] = True
    assert b.kv_indices.unique().numel() == b.kv_indices.numel()
    assert torch.isnan(b.k_buffer[~used].float()).all() and torch.isfinite(b.k_buffer[used].float()).all()
    assert torch.isnan(b.o.float()).all()
    assert b.q.is_contiguous() and not make_verify_batch(2, 4, 1, 3, q_row_padding=64).q.is_contiguous()
    for start, p, parents in zip(b.mask_indptr.tolist(), b.prefix_lens, b.parents):
        tail = b.custom_mask[start : start + 8 * (p + 8)].view(8, p + 8)[:, p:]
        assert torch.equal(tail, tree_tail_mask(parents))
        assert all(parents[i] < i for i in range(1, 8)) and parents[0] == -1


def test_comparator_flags_nonfinite_and_reports_worst_index():
    expected = torch.zeros(2, 3, 4)
    actual = expected.clone()
    actual[1, 2, 3] = 0.5
    result = compare(actual, expected)
    assert result.max_abs == 0.5 and result.max_abs_index == (1, 2, 3)
    actual[0, 0, 0] = math.nan
    assert compare(actual, expected).nonfinite_actual == 1
    with pytest.raises(AssertionError, match="nonfinite actual=1"):
        assert_close(actual, expected, 1.0)
