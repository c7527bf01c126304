"""The accounting epilogue (devicestate.torch_shadow_epilogue): its exact semantics, flag by flag."""

from __future__ import annotations

import bisect
import math

import pytest
import torch

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from cutover.plugin.devicestate import (CALLS, COMPARED, COUNTER_WIDTH, HIST, MAX_ABS, NONFINITE_SENTINEL,
                                        REL_L2_MAX, nonfinite_custom, nonfinite_stock, torch_shadow_epilogue)

EDGES = torch.tensor(REL_L2_BIN_EDGES, dtype=torch.float64)


def account(o, scratch, serve, sample):
    counters = torch.zeros(COUNTER_WIDTH, dtype=torch.float64)
    torch_shadow_epilogue(o, scratch, torch.tensor([serve, sample], dtype=torch.int32), counters, EDGES)
    return counters


def outputs(scale=2e-3):
    torch.manual_seed(0)
    o = torch.randn(6, 8, 512).to(torch.bfloat16)
    return o, (o.float() * (1 + scale)).to(torch.bfloat16)


def test_a_shadow_sample_records_rel_l2_max_abs_and_its_bucket():
    o, scratch = outputs()
    c = account(o, scratch, serve=0, sample=1)
    rel = float(torch.linalg.vector_norm((scratch - o).float()) / torch.linalg.vector_norm(o.float()))
    assert (c[CALLS], c[COMPARED]) == (1, 1) and float(c[REL_L2_MAX]) == pytest.approx(rel, rel=1e-3)
    assert float(c[MAX_ABS]) == pytest.approx(float((scratch.float() - o.float()).abs().max()), rel=1e-3)
    bucket = bisect.bisect_right(REL_L2_BIN_EDGES, rel)  # edges[k-1] <= rel < edges[k]
    assert c[HIST + bucket] == 1 and c[HIST:].sum() == 1
    assert nonfinite_custom(c) == 0 and nonfinite_stock(c) == 0


def test_an_unsampled_call_only_counts_the_call_even_with_garbage_in_the_scratch():
    o, _ = outputs()
    garbage = torch.full_like(o, math.nan)
    for serve in (0, 1):  # triton mode, and custom mode (ours in o, scratch unused)
        c = account(o, garbage, serve=serve, sample=0)
        assert c[CALLS] == 1 and c[COMPARED] == 0 and c[HIST:].sum() == 0
        assert c[REL_L2_MAX] == 0 and c[MAX_ABS] == 0 and nonfinite_custom(c) == 0 and nonfinite_stock(c) == 0


@pytest.mark.parametrize("where", ["scratch", "o"])
def test_a_non_finite_output_is_counted_against_its_kernel(where):
    o, scratch = outputs()
    (scratch if where == "scratch" else o).view(-1)[7] = math.inf if where == "o" else math.nan
    c = account(o, scratch, serve=0, sample=1)
    assert (nonfinite_custom(c), nonfinite_stock(c)) == ((1, 0) if where == "scratch" else (0, 1))
    assert float(c[REL_L2_MAX]) == NONFINITE_SENTINEL and float(c[MAX_ABS]) == NONFINITE_SENTINEL
    assert c[HIST + len(REL_L2_BIN_EDGES)] == 1  # the last bucket (>= 1.0)


def test_custom_mode_checks_the_served_output():
    o, scratch = outputs()
    o.view(-1)[3] = math.nan  # o is ours in custom mode
    c = account(o, scratch, serve=1, sample=0)
    assert nonfinite_custom(c) == 1 and nonfinite_stock(c) == 0 and c[COMPARED] == 0
