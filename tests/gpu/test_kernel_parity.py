"""GPU parity of the CUDA verify kernel (a representative slice of kernel_ext.gpu_parity's grid).

The full grid (H {8,16} x T {1,2,8,16,32,64} x batch {1,3,8,32} x prefix {0,1,7,1000,5000,32768})
runs as `python -m kernel_ext.gpu_parity --subset full`; these tests keep a slice of it, the live-switch
checks and a CUDA-graph replay in the suite. Each case: fresh random inputs, unused KV rows NaN, outputs
NaN-poisoned; pass = our relative L2 error against float64 <= 1.25x SGLang Triton's, every output written.
The parity cases and the early-start check run twice: in the configuration the device picks, and in the small
mma.sync tiles that sm_120 runs.
"""
from __future__ import annotations

import pytest

from kernel_ext.gpu_parity import (LONG_AMONG_20, LONG_AMONG_64, LONG_AMONG_SHORT, LONG_PAST_1024, SPREAD_LENGTHS,
                                  SPREAD_LENGTHS_LONG)
from kernel_ext.testing import TILE_CONFIGS

pytestmark = pytest.mark.gpu

CASES = [
    # H, T, batch, prefix, mask, index dtype
    (8, 1, 1, 0, "tree", "int64"),
    (8, 2, 3, 1, "chain", "int32"),
    (16, 8, 8, 7, "causal", "int64"),
    (8, 16, 3, 1000, "tree", "int32"),  # 132 SMs: 9 splits of 1064 keys of work, the last holds the tail alone
    (16, 32, 1, 5000, "chain", "int64"),
    (8, 64, 8, 1000, "tree", "int64"),
    (16, 64, 3, 32768, "tree", "int32"),
    (8, 8, 32, 5000, "causal", "int32"),
]


@pytest.fixture(params=sorted(TILE_CONFIGS))
def tile_config(request, monkeypatch):
    from kernel_ext import api

    monkeypatch.setattr(api, "TILE_CONFIG", TILE_CONFIGS[request.param])
    return request.param


@pytest.fixture(scope="module")
def parity():
    import torch

    from kernel_ext import gpu_parity

    triton_fwd = gpu_parity.load_sglang_triton()
    if triton_fwd is None:
        pytest.skip("needs SGLang's Triton extend_attention_fwd as the reference: pip install --no-deps sglang")
    return gpu_parity, triton_fwd, torch


@pytest.mark.sglang
@pytest.mark.parametrize("H,T,batch,prefix,mask,index", CASES)
def test_kernel_matches_float64_at_least_as_well_as_triton(parity, tile_config, H, T, batch, prefix, mask, index):
    gpu_parity, triton_fwd, torch = parity
    case = gpu_parity.make_case(H, T, batch, prefix, mask, getattr(torch, index), seed=H * 1000 + T * 10 + batch)
    row = gpu_parity.run_case(case, triton_fwd, dict(H=H, T=T, batch=batch, prefix=prefix, mask=mask))
    assert row["served"], "verify_attention declined a case it must serve"
    assert row["nonfinite_ours"] == 0, f"unwritten or non-finite outputs: {row}"
    assert row["err_ours"] <= gpu_parity.TRITON_RATIO * row["err_triton"], row


@pytest.mark.sglang
def test_mixed_prefix_lengths_and_int8_mask(parity, tile_config):
    gpu_parity, triton_fwd, torch = parity
    case = gpu_parity.make_case(16, 16, 5, [4097, 0, 63, 20000, 9], "tree", mask_dtype=torch.int8, seed=5)
    row = gpu_parity.run_case(case, triton_fwd, {})
    assert row["passed"], row


# LONG_AMONG_SHORT: one long request among more requests than a wave holds CTAs (16 x 16 rows: 4 row tiles, so 33
# work items per wave on 132 SMs): the plan runs it in waves of splits instead of one split per request.
@pytest.mark.sglang
def test_long_request_among_many_short_ones(parity, tile_config):
    gpu_parity, triton_fwd, torch = parity
    case = gpu_parity.make_case(16, 16, len(LONG_AMONG_SHORT), LONG_AMONG_SHORT, "tree", seed=6)
    row = gpu_parity.run_case(case, triton_fwd, {})
    assert row["passed"], row


# More requests than a wave holds work items (8 x 16 rows: 66 per wave on 132 SMs), lengths spread over 0-9000
# keys: one split per request, which the SMs take in waves, longest first; 160 requests take the order's path for
# requests past the 128 it keeps in registers.
@pytest.mark.sglang
@pytest.mark.parametrize("lengths", [SPREAD_LENGTHS, SPREAD_LENGTHS_LONG], ids=["80-requests", "160-requests"])
def test_more_requests_than_a_wave_of_spread_lengths(parity, tile_config, lengths):
    gpu_parity, triton_fwd, torch = parity
    case = gpu_parity.make_case(8, 16, len(lengths), lengths, "tree", torch.int32, seed=8)
    row = gpu_parity.run_case(case, triton_fwd, {})
    assert row["passed"], row


# Long requests among many short ones where the combine merges few splits per request (8 x 8 rows: two for 64
# requests, six for 20): the long ones' splits take the combine's long-request pass, which finds them 1024
# requests at a time. The workspace's entries show that each long request had more splits than both layouts merge
# in two batches (4 and 16), so the pass ran wherever the host picked one of those layouts.
@pytest.mark.sglang
@pytest.mark.parametrize("H,T,lengths,mask", [(8, 8, LONG_AMONG_64, "tree"), (8, 8, LONG_AMONG_20, "chain"),
                                             (8, 1, LONG_PAST_1024, "causal")],
                         ids=["3-of-64", "1-of-20", "2-of-1100"])
def test_long_requests_take_the_combines_long_request_pass(parity, tile_config, H, T, lengths, mask):
    gpu_parity, triton_fwd, torch = parity
    from kernel_ext import api

    batch = len(lengths)
    case = gpu_parity.make_case(H, T, batch, lengths, mask, seed=9)
    workspace = torch.zeros(api.workspace_bytes(batch, H, T), dtype=torch.uint8, device="cuda")
    assert api.verify_attention(*case.args(case.fresh_output()), workspace=workspace)
    torch.cuda.synchronize()
    splits = workspace[:8 * batch].view(torch.int32).view(batch, 2)[:, 0].tolist()
    long_splits = [n for n, keys in zip(splits, lengths) if keys == max(lengths)]
    assert min(long_splits) > 16, f"the long requests' splits: {long_splits}"
    row = gpu_parity.run_case(case, triton_fwd, {})
    assert row["passed"], row


def test_plan_splits_a_long_request_among_many_short_ones(tile_config):
    """req[b] = (splits, first partial slot) in the workspace, written by each call: the long request gets
    several splits (one split per request would leave it to one CTA while the others idle), the short ones one."""
    import torch

    from kernel_ext import api, gpu_parity

    batch = len(LONG_AMONG_SHORT)
    case = gpu_parity.make_case(16, 16, batch, LONG_AMONG_SHORT, "tree", seed=7)
    workspace = torch.zeros(api.workspace_bytes(batch, 16, 16), dtype=torch.uint8, device="cuda")
    assert api.verify_attention(*case.args(case.fresh_output()), workspace=workspace)
    torch.cuda.synchronize()
    splits = workspace[:8 * batch].view(torch.int32).view(batch, 2)[:, 0].tolist()
    assert splits[0] >= 4, f"the long request's splits: {splits[0]} (all: {splits})"
    assert splits[1:] == [1] * (batch - 1), splits


def test_enable_gate_and_verify_gate_semantics():
    from kernel_ext import gpu_parity

    failed = [c["check"] for c in gpu_parity.check_enable_gate() if not c["passed"]]
    assert not failed, failed


def test_graph_replay_follows_inputs_and_gate_without_recapture():
    from kernel_ext import gpu_parity

    failed = [c["check"] for c in gpu_parity.check_graph_replay() if not c["passed"]]
    assert not failed, failed


def test_early_start_back_to_back_equals_plain_stream_order(tile_config):
    from kernel_ext import gpu_parity

    failed = [c["check"] for c in gpu_parity.check_early_start() if not c["passed"]]
    assert not failed, failed
