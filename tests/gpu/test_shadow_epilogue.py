"""The fused shadow epilogue (kernel_ext.api.shadow_accumulate) and the kernel's device-side output choice.

The epilogue's counters are checked against a float64 torch computation on random outputs, cell by cell, with
NaN/inf injection, the both-flags-0 early exit, many calls on one workspace (the "last block finalises" ticket
must be reset every call, also under CUDA-graph replay) and a strided o; and against the torch specification
(devicestate.torch_shadow_epilogue) on the same inputs. The gate and the epilogue are launched as programmatic
dependents of the kernel before them and wait for it at entry: two tests put each right behind a kernel that
writes what it reads, many times over, where a missing wait would read old data.
"""

from __future__ import annotations

import bisect
import math

import pytest
import torch

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from cutover.plugin.devicestate import (CALLS, COMPARED, COUNTER_WIDTH, HIST, MAX_ABS, NONFINITE_SENTINEL,
                                        REL_L2_MAX, SAMPLE_BAD_O, SAMPLE_BAD_SCRATCH, SERVE_BAD_O, SERVED,
                                        torch_shadow_epilogue)

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (run through the device tool)", allow_module_level=True)

from kernel_ext import _lib, api  # noqa: E402
from kernel_ext.testing import make_verify_batch  # noqa: E402

DEV = torch.device("cuda")
EDGES = torch.tensor(REL_L2_BIN_EDGES, dtype=torch.float64, device=DEV)


class Layer:
    """One layer's counters and epilogue workspace, as the plugin keeps them."""

    def __init__(self):
        self.counters = torch.zeros(COUNTER_WIDTH, dtype=torch.float64, device=DEV)
        self.workspace = torch.zeros(_lib.SHADOW_WORKSPACE_BYTES, dtype=torch.uint8, device=DEV)
        self.enable = torch.zeros(2, dtype=torch.int32, device=DEV)

    def account(self, o, scratch, serve: int, sample: int) -> torch.Tensor:
        self.enable.copy_(torch.tensor([serve, sample], dtype=torch.int32))
        api.shadow_accumulate(o, scratch, self.enable, self.counters, EDGES, self.workspace)
        torch.cuda.synchronize()
        return self.counters.cpu()


def outputs(tokens=24, heads=8, rel=3e-3, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    o = torch.randn(tokens, heads, 512, device=DEV, generator=g).to(torch.bfloat16)
    noise = torch.randn(tokens, heads, 512, device=DEV, generator=g)
    return o, (o.float() + rel * noise).to(torch.bfloat16)


def truth(o, scratch):
    """(rel L2, max abs) in float64."""
    d = scratch.double() - o.double()
    return float(d.norm() / o.double().norm()), float(d.abs().max())


@pytest.mark.parametrize("tokens,heads", [(1, 1), (24, 8), (2048, 16)])  # 1 block .. the 256-block cap
def test_a_shadow_sample_matches_float64(tokens, heads):
    o, scratch = outputs(tokens, heads)
    c = Layer().account(o, scratch, serve=0, sample=1)
    rel, max_abs = truth(o, scratch)
    assert (c[CALLS], c[COMPARED], c[SERVED]) == (1, 1, 0)
    assert float(c[REL_L2_MAX]) == pytest.approx(rel, rel=1e-4)
    assert float(c[MAX_ABS]) == pytest.approx(max_abs, rel=1e-6)
    assert c[HIST + bisect.bisect_right(REL_L2_BIN_EDGES, float(c[REL_L2_MAX]))] == 1 and c[HIST:].sum() == 1
    assert c[SAMPLE_BAD_O] == 0 and c[SAMPLE_BAD_SCRATCH] == 0 and c[SERVE_BAD_O] == 0


def test_it_agrees_with_the_torch_specification():
    layer, spec = Layer(), torch.zeros(COUNTER_WIDTH, dtype=torch.float64, device=DEV)
    for i, (serve, sample) in enumerate([(0, 1), (0, 0), (1, 0), (0, 1), (0, 1)]):
        o, scratch = outputs(16, 8, rel=10.0 ** -(i + 1), seed=i)
        if i == 4:
            scratch.view(-1)[123] = math.nan
        layer.account(o, scratch, serve, sample)
        torch_shadow_epilogue(o, scratch, layer.enable, spec, EDGES)
    torch.cuda.synchronize()
    assert torch.allclose(layer.counters, spec, rtol=1e-4, atol=0), (layer.counters, spec)


@pytest.mark.parametrize("where,value", [("scratch", math.nan), ("o", math.inf), ("o", -math.inf)])
def test_a_non_finite_output_is_counted_against_its_kernel(where, value):
    o, scratch = outputs()
    (scratch if where == "scratch" else o).view(-1)[4097] = value
    c = Layer().account(o, scratch, serve=0, sample=1)
    assert (c[SAMPLE_BAD_SCRATCH], c[SAMPLE_BAD_O]) == ((1, 0) if where == "scratch" else (0, 1))
    assert float(c[REL_L2_MAX]) == NONFINITE_SENTINEL and float(c[MAX_ABS]) == NONFINITE_SENTINEL
    assert c[HIST + len(REL_L2_BIN_EDGES)] == 1 and c[COMPARED] == 1


def test_custom_mode_checks_o_and_never_reads_the_scratch():
    o, _ = outputs()
    garbage = torch.full_like(o, math.nan)
    layer = Layer()
    c = layer.account(o, garbage, serve=1, sample=0)
    assert (c[CALLS], c[SERVED], c[SERVE_BAD_O], c[COMPARED], c[SAMPLE_BAD_SCRATCH]) == (1, 1, 0, 0, 0)
    o.view(-1)[-1] = math.nan
    c = layer.account(o, garbage, serve=1, sample=0)
    assert (c[CALLS], c[SERVED], c[SERVE_BAD_O]) == (2, 2, 1) and c[REL_L2_MAX] == 0 and c[HIST:].sum() == 0


def test_both_flags_zero_only_counts_the_call():
    o, _ = outputs()
    o.view(-1)[0] = math.nan
    garbage = torch.full_like(o, math.nan)
    c = Layer().account(o, garbage, serve=0, sample=0)
    assert c[CALLS] == 1 and c[1:].abs().sum() == 0


def test_many_calls_and_graph_replays_on_one_workspace():
    """The ticket is reset by every call: sizes change between calls; a captured call replays correctly."""
    layer = Layer()
    expected_max = 0.0
    for i, tokens in enumerate([2048, 3, 700, 2048, 1]):
        o, scratch = outputs(tokens, 16, rel=2e-3 * (i + 1), seed=i)
        layer.account(o, scratch, 0, 1)
        expected_max = max(expected_max, truth(o, scratch)[0])
    c = layer.counters.cpu()
    assert c[COMPARED] == 5 and c[HIST:].sum() == 5 and float(c[REL_L2_MAX]) == pytest.approx(expected_max, rel=1e-4)

    base = torch.empty(64, 9, 512, dtype=torch.bfloat16, device=DEV)
    o = base[:, 1:, :]  # strided o: head stride 512, token stride 9 * 512
    o.copy_(outputs(64, 8, seed=9)[0])
    scratch = (o.float() * 1.01).to(torch.bfloat16)
    graph_layer = Layer()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        api.shadow_accumulate(o, scratch, graph_layer.enable, graph_layer.counters, EDGES, graph_layer.workspace)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.shadow_accumulate(o, scratch, graph_layer.enable, graph_layer.counters, EDGES, graph_layer.workspace)
    for flags in ([0, 1], [0, 0], [1, 0], [0, 1]):
        graph_layer.enable.copy_(torch.tensor(flags, dtype=torch.int32))
        graph.replay()
    torch.cuda.synchronize()
    c = graph_layer.counters.cpu()
    assert (c[CALLS], c[COMPARED], c[SERVED]) == (5, 2, 1)  # the eager warm-up call had both flags 0
    assert float(c[REL_L2_MAX]) == pytest.approx(truth(o, scratch)[0], rel=1e-4)


def test_the_kernel_writes_the_output_the_device_flags_choose():
    batch = make_verify_batch(8, 16, 4, [1000, 2048, 513, 64], device="cuda", seed=5,
                              qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8)
    reference = batch.fresh_output()
    assert api.verify_attention(*batch.args(reference))
    enable = torch.zeros(2, dtype=torch.int32, device=DEV)
    for serve, sample in ((1, 0), (0, 1), (0, 0)):
        o, alt = batch.fresh_output().fill_(math.nan), batch.fresh_output().fill_(math.nan)
        enable.copy_(torch.tensor([serve, sample], dtype=torch.int32))
        assert api.verify_attention(*batch.args(o), enable=enable, o_alt=alt)
        torch.cuda.synchronize()
        written, untouched = (o, alt) if serve else (alt, o)
        assert torch.isnan(untouched).all(), (serve, sample)
        if serve or sample:
            assert torch.equal(written, reference), (serve, sample)
        else:
            assert torch.isnan(written).all()


CALLS_BEHIND = 200  # a missing wait shows as a race; against a build without the waits both tests fail every run


def right_behind_our_kernel(follow, calls: int = CALLS_BEHIND) -> torch.Tensor:
    """Calls our kernel `calls` times into a NaN-filled o and launches `follow(o)` right after each; returns o.
    Batch 1, 128 rows, 65536 keys: ~130 splits, the longest merge; the combine releases its dependents early."""
    batch = make_verify_batch(16, 8, 1, 65536, device="cuda", seed=6, qo_indptr_dtype=torch.int64,
                              mask_dtype=torch.uint8)
    o = batch.fresh_output()
    for _ in range(calls):
        o.fill_(math.nan)
        assert api.verify_attention(*batch.args(o))
        follow(o)
    torch.cuda.synchronize()
    return o


def test_the_epilogue_right_behind_our_kernel_reads_its_finished_output():
    layer = Layer()
    layer.enable.copy_(torch.tensor([1, 0], dtype=torch.int32))  # custom mode: the epilogue checks o
    o = right_behind_our_kernel(
        lambda o: api.shadow_accumulate(o, o, layer.enable, layer.counters, EDGES, layer.workspace))
    c = layer.counters.cpu()
    assert (c[SERVED], c[SERVE_BAD_O]) == (CALLS_BEHIND, 0), "the epilogue read o before our kernel finished writing it"
    assert torch.isfinite(o).all()


def test_the_gate_right_behind_our_kernel_reads_its_finished_output():
    # the gate copies its qo_indptr; here that is o's storage, which our kernel's combine writes last
    state = torch.tensor([0, 1, 0, 0], dtype=torch.int32, device=DEV)  # triton mode: the gate copies
    enable = torch.zeros(2, dtype=torch.int32, device=DEV)
    copy, stale = [], []

    def gate_copies(o):
        words = o.view(-1).view(torch.int32)
        if not copy:
            copy.append(torch.empty_like(words))
        api.verify_gate(state, words, copy[0], enable)
        stale.append(not torch.equal(copy[0], words))

    right_behind_our_kernel(gate_copies)
    assert not any(stale), f"the gate read o before our kernel finished writing it ({sum(stale)} of {len(stale)} calls)"
