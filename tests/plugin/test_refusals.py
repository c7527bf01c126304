"""When the plugin cannot hook or read SGLang's verify calls, the rank stays on Triton and says so: it still
heartbeats (``cutover stage`` sees it live with the release), its heartbeat gives the reason, a shadow or custom
request is refused with that reason, and a call form it cannot read is noted (``errors``) instead of a heartbeat
that says custom while nothing custom runs. CPU only; the registration through SGLang's HookRegistry is in
test_hooks.py."""

from __future__ import annotations

import os
import time

import pytest
import torch

from cutover.hostprotocol.hostlayout import ControlRecord, atomic_write_text, live_heartbeats, read_heartbeat
from cutover.plugin import hooks
from cutover.plugin import runtime as runtime_module
from cutover.plugin.dispatch import MIN_POSITIONAL_ARGS, VerifyDispatcher, verify_site
from cutover.sandbox.backend import StandInBackend, StandInForwardBatch, StandInLayer, StandInModelRunner
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch
from armed import TEST_RELEASE

RELEASE = TEST_RELEASE


@pytest.fixture
def release(loaded_release):
    """A staged release: <cutover_root>/current -> releases/<id> (what the runtime reports as loaded)."""
    return loaded_release


@pytest.fixture
def process_runtime(paths, monkeypatch):
    """hooks' per-process runtime, empty at the start, with the host paths in the environment; stopped after."""
    monkeypatch.setenv("CUTOVER_STATE_DIR", paths.state_dir)
    monkeypatch.setenv("CUTOVER_ROOT", paths.cutover_root)
    monkeypatch.setattr(hooks, "_runtime", None)
    yield
    if hooks._runtime is not None:
        hooks._runtime.stop()


def write_request(paths, mode: str, generation: int, release_id: str | None = None) -> None:
    """As `cutover shadow` / `cutover promote` write it: with a lease and the release they judged."""
    record = ControlRecord(mode=mode, generation=generation, lease_expires_at=time.time() + 60, release_id=release_id,
                           set_by="test")
    atomic_write_text(paths.control, record.to_json())


def wait_for_heartbeat(paths, rank: int, ready, timeout_s: float = 5.0):
    deadline = time.time() + timeout_s
    while True:
        beat = read_heartbeat(paths.heartbeat(rank))
        if beat is not None and ready(beat):
            return beat
        if time.time() >= deadline:
            pytest.fail(f"no heartbeat of rank {rank} as expected within {timeout_s} s; last: {beat}")
        time.sleep(0.02)


def test_a_backend_without_the_kernel_attribute_still_heartbeats_and_refuses_shadow_with_why(
        paths, release, runtime):
    class ChangedBackend:  # an SGLang whose backend no longer holds extend_attention_fwd
        pass

    write_request(paths, "triton", 1)  # as `cutover stage` leaves the host
    try:
        assert hooks.install_on_backend(ChangedBackend(), runtime) is False
        beat = wait_for_heartbeat(paths, 0, lambda b: True)
        assert 0 in live_heartbeats(paths, 1, stale_s=10.0)  # what `cutover stage` waits for
        assert (beat.mode_active, beat.release_id) == ("triton", release)
        assert "cutover could not hook SGLang" in beat.reason and "ChangedBackend has no extend_attention_fwd" \
            in beat.reason and beat.reason.endswith("serving runs Triton only")

        write_request(paths, "shadow", 2, release)  # `cutover shadow` arms
        beat = wait_for_heartbeat(paths, 0, lambda b: b.generation_seen >= 2)
        assert beat.mode_active == "triton" and not beat.acknowledges(2, "shadow")
        assert beat.reason.startswith("custom path unavailable: cutover could not hook SGLang")
        assert not os.path.exists(paths.armed_marker(0))
    finally:
        runtime.stop()


def test_a_runtime_that_cannot_be_built_still_heartbeats_the_reason(paths, release, process_runtime, monkeypatch):
    def broken(device, release_dir):
        raise RuntimeError("CUDA error: out of memory")  # not KernelUnavailable: PluginRuntime() itself raises

    monkeypatch.setattr(runtime_module, "select_kernels", broken)
    write_request(paths, "triton", 1)

    def stock(*args, **kwargs):
        pass

    backend = StandInBackend.__new__(StandInBackend)
    hooks.around_backend_init(lambda b, mr: StandInBackend.__init__(b, mr), backend,
                              StandInModelRunner(1, torch.device("cpu"), stock))

    assert backend.extend_attention_fwd is stock  # SGLang's kernel, untouched
    beat = wait_for_heartbeat(paths, 1, lambda b: True)
    assert beat.release_id == release and beat.mode_active == "triton"
    assert "installing on StandInBackend failed: RuntimeError: CUDA error: out of memory" in beat.reason


def test_an_armed_rank_that_loses_its_hook_returns_to_triton_and_disarms(runtime, paths, write_control):
    write_control("custom", 1, lease_s=None)  # a promoted host
    runtime.control.poll_once()
    assert runtime.control.mode_active == "custom" and os.path.exists(paths.armed_marker(0))

    runtime.refuse(hooks.refusal_reason("StandInBackend has no extend_attention_fwd"))
    runtime.control.poll_once()

    beat = read_heartbeat(paths.heartbeat(0))
    assert (beat.mode_active, beat.generation_seen) == ("triton", 1)
    assert "has no extend_attention_fwd" in beat.reason
    assert not os.path.exists(paths.armed_marker(0))


def test_a_verify_call_with_too_few_positional_arguments_is_noted_and_the_rank_refuses_custom(
        runtime, paths, write_control):
    write_control("custom", 1, lease_s=None)
    runtime.control.poll_once()
    batch = make_verify_batch(8, 8, 2, [30, 55], seed=0)
    calls = []

    def stock(*args, **kwargs):  # an SGLang that passes the index tensors by keyword
        calls.append((len(args), sorted(kwargs)))

    dispatcher = runtime.wrap(stock)
    args = batch.args(batch.fresh_output())
    short = MIN_POSITIONAL_ARGS - 1
    with verify_site(4):
        dispatcher(*args[:short], max_len_extend=args[short])
        dispatcher(*args[:short], max_len_extend=args[short])

    assert calls == [(short, ["max_len_extend"])] * 2  # SGLang's kernel served both
    assert len(runtime.problems) == 1 and not runtime.active
    runtime.control.poll_once()
    beat = read_heartbeat(paths.heartbeat(0))
    assert beat.mode_active == "triton" and beat.counters["errors"] == 1
    assert f"with {short} positional argument(s) in target verify" in beat.reason


@pytest.mark.parametrize("forward_batch, layer", [
    (object(), StandInLayer(3)),  # no forward_mode: which calls are target verify cannot be told
    (StandInForwardBatch(None), object()),  # target verify, but no layer id
], ids=["no-forward-mode", "no-layer-id"])
def test_a_forward_extend_call_the_hook_cannot_read_is_noted_and_the_rank_refuses_custom(
        runtime, paths, write_control, forward_batch, layer):
    write_control("shadow", 1)
    runtime.control.poll_once()
    seen = []

    def stock(*args, **kwargs):
        pass

    backend = StandInBackend(StandInModelRunner(0, torch.device("cpu"), stock))
    backend._cutover_dispatcher = runtime.wrap(stock)  # install_on_backend, without starting the control thread
    assert isinstance(backend._cutover_dispatcher, VerifyDispatcher)

    def forward_extend(backend, q, k, v, layer, forward_batch):
        from cutover.plugin.dispatch import current_verify_layer

        seen.append(current_verify_layer())
        return "served"

    for _ in range(2):
        assert hooks.around_forward_extend(forward_extend, backend, None, None, None, layer, forward_batch) == "served"

    assert seen == [None, None]
    assert len(runtime.problems) == 1 and sum(runtime.problems.values()) == 2  # one distinct problem, logged once
    runtime.control.poll_once()
    beat = read_heartbeat(paths.heartbeat(0))
    assert beat.mode_active == "triton" and beat.counters["errors"] == 1
    assert "forward_extend called in a form the plugin cannot read" in beat.reason


def test_a_readable_call_form_is_not_a_problem(runtime, write_control):
    write_control("custom", 1)
    runtime.control.poll_once()
    batch = make_verify_batch(8, 8, 2, [30, 55], seed=0)
    backend = StandInBackend(StandInModelRunner(0, torch.device("cpu"), reference_extend_attention_fwd))
    backend._cutover_dispatcher = dispatcher = runtime.wrap(reference_extend_attention_fwd)
    backend.extend_attention_fwd = dispatcher

    hooks.around_forward_extend(StandInBackend.forward_extend, backend, batch.q, batch.k_extend, batch.v_extend,
                                StandInLayer(2), StandInForwardBatch(batch))

    assert runtime.problems == {} and runtime.active and runtime.fallback_shapes == set()


SOURCE = '''
class TritonAttnBackend:
    def __init__(self, model_runner):
        self.extend_attention_fwd = extend_attention_fwd

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if forward_batch.forward_mode.is_target_verify():
            pass
        {call}

    def _kernel(self, layer, *args, **kwargs):
        return self.extend_attention_fwd(*args, **kwargs)
'''


def args_list(n: int) -> str:
    return ", ".join(f"a{i}" for i in range(n))


@pytest.mark.parametrize("call, short", [
    (f"self.extend_attention_fwd({args_list(16)})", None),
    (f"self.extend_attention_fwd({args_list(12)}, max_len_extend=m)", 12),
    (f"self._kernel(layer, {args_list(16)})", None),  # 0.5.23's form: a helper forwarding *args
    (f"self._kernel(layer, {args_list(12)}, max_len_extend=m)", 12),
    ("self._kernel(layer, *everything)", None),  # not shown by the source: not judged
])
def test_the_hook_target_check_counts_the_positional_arguments_the_dispatcher_reads(call, short):
    problems = hooks.hook_target_problems(SOURCE.format(call=call))
    found = [p for p in problems if "positional argument" in p]
    if short is None:
        assert problems == []
    else:
        assert found == [f"forward_extend passes self.extend_attention_fwd {short} positional argument(s); the "
                         f"plugin reads at least {MIN_POSITIONAL_ARGS} (q_extend .. max_len_extend)"]
