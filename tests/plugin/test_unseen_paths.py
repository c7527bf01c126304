"""Configurations whose verify calls never reach the custom kernel (SGLang's deterministic inference sends them
through ``extend_attention_fwd_unified``; an fp8 KV cache or more than 64 draft tokens fall back on every call):
the rank refuses shadow and custom at once, saying why, instead of a shadow that passes on zero comparisons.
Hooks applied by SGLang's real HookRegistry to the stand-in backend; CPU only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cutover.plugin import hooks

from .test_backend_refusal import TRITON, StandInRunner, build, hooked  # noqa: F401 - a fixture
from .test_hooks import clean_registry  # noqa: F401 - a fixture
from .test_refusals import wait_for_heartbeat


class DeterministicTriton(TRITON):
    """TritonAttnBackend under --enable-deterministic-inference (it keeps ``enable_deterministic``)."""

    enable_deterministic = True


def runner(backend_class=TRITON, **server_args) -> StandInRunner:
    model_runner = StandInRunner(1, backend_class)
    model_runner.server_args = SimpleNamespace(**server_args)
    return model_runner


CASES = {  # a target runner -> the words its refusal must carry
    "deterministic-backend": (lambda: runner(DeterministicTriton), "--enable-deterministic-inference"),
    "deterministic-server-args": (lambda: runner(enable_deterministic_inference=True),
                                  "extend_attention_fwd_unified"),
    "fp8-kv-cache": (lambda: _with(runner(), kv_cache_dtype=torch.float8_e4m3fn), "--kv-cache-dtype fp8_*"),
    "65-draft-tokens": (lambda: runner(speculative_num_draft_tokens=65), "--speculative-num-draft-tokens 65"),
}


def _with(model_runner, **attributes):
    for name, value in attributes.items():
        setattr(model_runner, name, value)
    return model_runner


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_rank_whose_verify_never_reaches_the_kernel_refuses_shadow_saying_why(hooked, paths, write_control, case):
    make, words = CASES[case]
    target = make()
    write_control("triton", 1)
    build(target)
    assert target.attn_backend.extend_attention_fwd is target.stock_kernel  # left to SGLang
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 1, lambda b: b.generation_seen >= 2)
    assert beat.mode_active == "triton" and not beat.acknowledges(2, "shadow")
    assert words in beat.reason and "compare nothing" in beat.reason


def test_a_served_configuration_is_not_refused(hooked, paths, write_control):
    target = _with(runner(speculative_num_draft_tokens=64, enable_deterministic_inference=False),
                   kv_cache_dtype=torch.bfloat16)
    write_control("triton", 1)
    build(target)
    assert hooks._runtime.unavailable == ""
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 1, lambda b: b.generation_seen >= 2)
    assert beat.acknowledges(2, "shadow") and beat.reason == ""
