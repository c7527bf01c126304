"""Dispatch semantics in all three modes, with the reference kernels (and SGLang's real kernel, interpreted)."""

from __future__ import annotations

import math

import pytest
import torch

from cutover.plugin.devicestate import CALLS, COMPARED, HIST, REL_L2_MAX, nonfinite_custom
from cutover.plugin.dispatch import verify_site
from kernel_ext.reference import reference_extend_attention_fwd, splitk_extend_attention_fwd
from kernel_ext.testing import make_verify_batch


class RecordingStock:
    """The stock kernel (reference stand-in or SGLang's), recording the qo_indptr of every call."""

    def __init__(self, kernel=reference_extend_attention_fwd):
        self.kernel = kernel
        self.qo_indptrs: list[list[int]] = []

    def __call__(self, *args, **kwargs):
        self.qo_indptrs.append(args[6].tolist())
        return self.kernel(*args, **kwargs)


class CountingCustom:
    """Wraps the runtime's kernel set; counts custom launches that were enabled (did work)."""

    def __init__(self, inner):
        self.inner = inner
        self.label = inner.label
        self.enabled_runs = 0

    def gate(self, *args):
        self.inner.gate(*args)

    def epilogue(self, *args):
        self.inner.epilogue(*args)

    def custom(self, args, kwargs, out, enable):
        self.enabled_runs += int(enable[0])
        return self.inner.custom(args, kwargs, out, enable)


@pytest.fixture
def batch():
    return make_verify_batch(8, 8, 3, [37, 0, 90], dtype=torch.bfloat16, seed=3)


def expected(kernel, batch) -> torch.Tensor:
    out = batch.fresh_output()
    kernel(*batch.args(out))
    return out


def set_mode(runtime, write_control, mode, generation, sample_rate=1):
    write_control(mode, generation, sample_rate=sample_rate)
    runtime.control.poll_once()
    assert runtime.control.mode_active == mode


def run(runtime, stock, batch, layer=2, **kwargs) -> torch.Tensor:
    out = batch.fresh_output()
    dispatcher = runtime.wrap(stock)
    with verify_site(layer):
        dispatcher(*batch.args(out), **kwargs)
    return out


def test_triton_mode_serves_stock_and_our_kernel_does_no_work(runtime, write_control, batch):
    set_mode(runtime, write_control, "triton", 1)
    runtime.kernels = counting = CountingCustom(runtime.kernels)
    stock = RecordingStock()
    out = run(runtime, stock, batch)
    assert torch.equal(out, expected(reference_extend_attention_fwd, batch))
    assert counting.enabled_runs == 0 and stock.qo_indptrs == [batch.qo_indptr.tolist()]
    assert runtime.state.counters[2, CALLS] == 1 and runtime.state.counters[2, COMPARED] == 0


def test_custom_mode_serves_our_kernel_and_stock_gets_an_empty_extend(runtime, write_control, batch):
    set_mode(runtime, write_control, "custom", 1)
    stock = RecordingStock()
    out = run(runtime, stock, batch)
    ours = expected(splitk_extend_attention_fwd, batch)
    assert torch.equal(out, ours) and not torch.equal(ours, expected(reference_extend_attention_fwd, batch))
    assert stock.qo_indptrs == [[0, 0, 0, 0]]  # SGLang's kernel returns at once for an empty extend


def test_shadow_mode_serves_stock_and_counts_the_divergence(runtime, write_control, batch):
    set_mode(runtime, write_control, "shadow", 1)
    stock = RecordingStock()
    out = run(runtime, stock, batch, layer=5)
    assert torch.equal(out, expected(reference_extend_attention_fwd, batch))
    row = runtime.state.counters[5]
    stock_out, ours = expected(reference_extend_attention_fwd, batch), expected(splitk_extend_attention_fwd, batch)
    diff = torch.linalg.vector_norm(ours.float() - stock_out.float())
    rel = float(diff / torch.linalg.vector_norm(stock_out.float()))
    assert row[CALLS] == 1 and row[COMPARED] == 1 and row[HIST:].sum() == 1
    assert float(row[REL_L2_MAX]) == pytest.approx(rel, rel=1e-4) and 0 < rel < 1e-2
    assert stock.qo_indptrs == [batch.qo_indptr.tolist()]


def test_shadow_sampling_compares_every_nth_call(runtime, write_control, batch):
    set_mode(runtime, write_control, "shadow", 1, sample_rate=3)
    stock = RecordingStock()
    for _ in range(7):
        run(runtime, stock, batch, layer=0)
    assert runtime.state.counters[0, CALLS] == 7 and runtime.state.counters[0, COMPARED] == 3  # calls 0, 3, 6


def test_unserved_shape_falls_back_to_stock_in_custom_mode(runtime, write_control):
    set_mode(runtime, write_control, "custom", 1)
    wide = make_verify_batch(4, 4, 1, 20, dtype=torch.float32)
    wide_args = list(wide.args())
    wide_args[1] = wide.k_extend.expand(-1, 2, -1)  # two KV heads: not absorbed MLA, not served
    stock = RecordingStock(lambda *a, **k: a[3].fill_(7.0))
    out = wide.fresh_output()
    with verify_site(0):
        runtime.wrap(stock)(*wide_args[:3], out, *wide_args[4:])
    assert stock.qo_indptrs == [wide.qo_indptr.tolist()] and bool((out == 7.0).all())
    assert len(runtime.fallback_shapes) == 1


def test_calls_outside_target_verify_go_straight_to_stock(runtime, write_control, batch):
    set_mode(runtime, write_control, "custom", 1)
    stock = RecordingStock()
    out = batch.fresh_output()
    runtime.wrap(stock)(*batch.args(out))  # no verify_site: e.g. a prefill or draft extend
    assert torch.equal(out, expected(reference_extend_attention_fwd, batch))
    assert stock.qo_indptrs == [batch.qo_indptr.tolist()] and runtime.state.counters[:, CALLS].sum() == 0


def test_custom_mode_counts_a_non_finite_served_output(runtime, write_control, batch):
    set_mode(runtime, write_control, "custom", 1)
    from cutover.sandbox.faults import FaultyKernels, parse_faults

    runtime.kernels = faulty = FaultyKernels(runtime.kernels, runtime.device, rank=0)
    faulty.set_faults(parse_faults("nan:layer=4"))
    out = run(runtime, RecordingStock(), batch, layer=4)
    assert math.isnan(float(out.view(-1)[0])) and nonfinite_custom(runtime.state.counters[4]) == 1
    run(runtime, RecordingStock(), batch, layer=3)
    assert nonfinite_custom(runtime.state.counters[3]) == 0


@pytest.mark.sglang
def test_sglang_kernel_does_no_work_on_the_gated_indptr(runtime, write_control, sglang_extend_attention_fwd):
    """With SGLang's real Triton kernel (interpreted, float32): custom mode output is exactly ours."""
    small = make_verify_batch(8, 4, 2, [16, 9], dtype=torch.float32, seed=5)
    set_mode(runtime, write_control, "custom", 1)
    out = run(runtime, sglang_extend_attention_fwd, small)
    assert torch.equal(out, expected(splitk_extend_attention_fwd, small))
    set_mode(runtime, write_control, "triton", 2)
    out = run(runtime, sglang_extend_attention_fwd, small)
    assert torch.equal(out, expected(sglang_extend_attention_fwd, small))
    assert not torch.equal(out, expected(splitk_extend_attention_fwd, small))
