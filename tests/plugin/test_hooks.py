"""Hook registration against SGLang's real HookRegistry, and the hook targets in the installed SGLang."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

from cutover.plugin import hooks
from cutover.plugin.dispatch import VerifyDispatcher, current_verify_layer

hook_registry = pytest.importorskip("sglang.srt.plugins.hook_registry",
                                    reason="needs SGLang (pip install --no-deps sglang==0.5.23)")
HookRegistry, HookType = hook_registry.HookRegistry, hook_registry.HookType
TRITON_TARGET = f"{hooks.BACKEND_MODULE}.{hooks.BACKEND_CLASS}"


@pytest.fixture
def clean_registry():
    """HookRegistry is process-global: give each test an empty one and restore it afterwards."""
    saved_hooks = {k: list(v) for k, v in HookRegistry._hooks.items()}
    saved_patched = set(HookRegistry._patched)
    HookRegistry.reset()
    yield HookRegistry
    HookRegistry.reset()
    HookRegistry._hooks.update(saved_hooks)
    HookRegistry._patched.update(saved_patched)


def installed_backend_source() -> str:
    spec = importlib.util.find_spec("sglang")
    return (Path(spec.origin).parent / "srt" / "layers" / "attention" / "triton_backend.py").read_text()


def test_load_plugin_refuses_with_one_line_when_the_hook_targets_changed(clean_registry, monkeypatch, caplog):
    from cutover.plugin import load_plugin

    monkeypatch.setattr(hooks, "installed_hook_target_problems", lambda: ["forward_extend not found"])
    load_plugin()
    # nothing on TritonAttnBackend: only what keeps every rank heartbeating the reason
    assert [(target, [(kind, fn.__name__) for kind, fn, _ in registered])
            for target, registered in clean_registry._hooks.items()] == [
        (hooks.MODEL_RUNNER_INIT, [(HookType.AROUND, "around_model_runner_init")])]
    lines = [r.getMessage() for r in caplog.records if r.name == "cutover.plugin"]
    assert len(lines) == 1 and "forward_extend not found" in lines[0] and "stays on Triton" in lines[0]
    assert "each rank heartbeats this reason" in lines[0]


def test_ranks_sglang_could_not_be_hooked_on_heartbeat_why_and_refuse_shadow(clean_registry, paths, monkeypatch):
    """The hooks refused (SGLang changed): `cutover stage` still sees every rank live with the release, status
    shows the reason, and shadow is refused with it instead of finding no rank."""
    from cutover.hostprotocol.hostlayout import ControlRecord, atomic_write_text, live_heartbeats, read_heartbeat
    from cutover.plugin import load_plugin
    from cutover.sandbox.backend import StandInModelRunner

    release = os.path.join(paths.cutover_root, "releases", "0123456789-abcdef")
    os.makedirs(release)
    os.symlink(release, paths.current)
    monkeypatch.setenv("CUTOVER_STATE_DIR", paths.state_dir)
    monkeypatch.setenv("CUTOVER_ROOT", paths.cutover_root)
    monkeypatch.setattr(hooks, "_runtime", None)
    monkeypatch.setattr(hooks, "installed_hook_target_problems", lambda: ["forward_extend not found"])

    def request(mode, generation):
        atomic_write_text(paths.control, ControlRecord(mode=mode, generation=generation, release_id="0123456789-abcdef",
                                                       lease_expires_at=time.time() + 60).to_json())

    def beat_when(ready):
        deadline = time.time() + 5.0
        while time.time() < deadline:
            beat = read_heartbeat(paths.heartbeat(2))
            if beat is not None and ready(beat):
                return beat
            time.sleep(0.02)
        pytest.fail(f"rank 2 did not heartbeat as expected: {read_heartbeat(paths.heartbeat(2))}")

    request("triton", 1)  # as stage leaves it
    load_plugin()
    [(_, hook, _)] = clean_registry._hooks[hooks.MODEL_RUNNER_INIT]
    built = []
    try:
        hook(lambda runner, *a, **k: built.append(runner), StandInModelRunner(2, torch.device("cpu"), None), "cfg")
        assert len(built) == 1  # SGLang's ModelRunner.__init__ ran as usual
        beat = beat_when(lambda b: True)
        assert set(live_heartbeats(paths, 3, stale_s=10.0)) == {2}  # the rank `cutover stage` waits for
        assert (beat.mode_active, beat.release_id) == ("triton", "0123456789-abcdef")
        assert beat.reason == ("custom path unavailable: cutover could not hook SGLang 0.5.23: RuntimeError: "
                               f"{hooks.BACKEND_MODULE} does not match what the plugin hooks: forward_extend not "
                               "found; serving runs Triton only")

        request("shadow", 2)
        beat = beat_when(lambda b: b.generation_seen >= 2)
        assert beat.mode_active == "triton" and not beat.acknowledges(2, "shadow")
        assert "forward_extend not found" in beat.reason
    finally:
        if hooks._runtime is not None:
            hooks._runtime.stop()


def test_entry_point_is_declared_for_sglang():
    found = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert found.get("cutover") == "cutover.plugin:load_plugin"


def test_load_plugin_registers_around_hooks_on_triton_backend(clean_registry):
    from cutover.plugin import load_plugin

    load_plugin()
    expected = {"__init__": "around_backend_init", "forward_extend": "around_forward_extend"}
    for method, hook_name in expected.items():
        registered = clean_registry._hooks[f"{TRITON_TARGET}.{method}"]
        assert [(kind, fn.__name__) for kind, fn, _ in registered] == [(HookType.AROUND, hook_name)]


def test_hook_targets_exist_in_the_installed_sglang():
    assert hooks.hook_target_problems(installed_backend_source()) == []
    assert hooks.installed_hook_target_problems() == []


def test_hook_target_check_fails_when_sglang_changes_the_call():
    source = installed_backend_source().replace("self.extend_attention_fwd(", "self.other_kernel(")
    assert "forward_extend does not call self.extend_attention_fwd" in hooks.hook_target_problems(source)
    renamed = installed_backend_source().replace("self.extend_attention_fwd = ", "self.extend_fwd = ")
    assert "__init__ does not set self.extend_attention_fwd" in hooks.hook_target_problems(renamed)


def test_hook_target_check_fails_when_sglang_passes_fewer_positional_arguments():
    """0.5.23 reaches the kernel through ``_forward_extend_kernel(self, layer, *args)``: a helper that takes q, k, v
    and o itself and passes the rest on leaves the kernel 12 positional arguments, fewer than the plugin reads."""
    source = installed_backend_source()
    helper = "def _forward_extend_kernel(self, layer, *args, **kwargs):"
    assert helper in source
    changed = source.replace(helper, "def _forward_extend_kernel(self, layer, q, k, v, o, *args, **kwargs):")
    assert any("passes self.extend_attention_fwd 12 positional argument(s)" in p
               for p in hooks.hook_target_problems(changed))


def test_the_refusal_hook_target_exists_in_the_installed_sglang():
    """register_refusal hooks ModelRunner.__init__ (read from the source: importing it is heavy)."""
    import ast

    module, cls_name, method = hooks.MODEL_RUNNER_INIT.rsplit(".", 2)
    path = Path(importlib.util.find_spec("sglang").origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name]
    assert method in {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_rank_comes_from_sglangs_runtime_context_where_the_model_runner_has_none(monkeypatch):
    """SGLang 0.5.23's ModelRunner has no tp_rank: the rank is its runtime context's, ahead of $CUTOVER_RANK."""
    context = pytest.importorskip("sglang.srt.runtime_context",
                                  reason="this SGLang has no runtime context (before 0.5.23)")
    runner = type("ModelRunner", (), {})()
    monkeypatch.setenv(hooks.RANK_ENV, "3")
    assert hooks._rank_of(runner) == 3  # the context's tp_rank is unwritten in this process
    with context.get_parallel().override(tp_rank=5):
        assert hooks._rank_of(runner) == 5
        runner.tp_rank = 2  # an older ModelRunner's own attribute comes first
        assert hooks._rank_of(runner) == 2


def test_stock_kernel_resolves_from_the_installed_layout():
    kernel, module = hooks.resolve_stock_kernel()
    assert module in hooks.STOCK_KERNEL_MODULES and kernel.__name__ == "extend_attention_fwd"


def test_hook_targets_in_every_documented_sglang_version():
    """docs/sglang_versions.json (facts read from the SGLang wheels 0.5.11..0.5.23) against our hook targets."""
    from cutover.plugin.dispatch import MIN_POSITIONAL_ARGS
    from cutover.plugin.kernels import O_INDEX, QO_INDPTR_INDEX

    versions_file = Path(__file__).resolve().parents[2] / "docs" / "sglang_versions.json"
    versions = json.loads(versions_file.read_text())["versions"]
    layouts = set()
    for v in versions:
        where = f"SGLang {v['version']}"
        assert v["hook_registry"]["exists"] and "AROUND" in v["hook_registry"]["hook_types"], where
        assert v["plugin_entry_point_group"] == "sglang.srt.plugins", where
        assert v["extend_attention_module"] in hooks.STOCK_KERNEL_MODULES, where
        layouts.add(v["extend_attention_module"])
        backend = v["triton_backend"]
        assert backend["init_sets_self_extend_attention_fwd"], where
        reached = {c["in"] for c in backend["extend_calls"] if c["calls"] == "self.extend_attention_fwd"}
        via = {c["in"] for c in backend["extend_calls"] if c["calls"].removeprefix("self.") in reached}
        assert "forward_extend" in reached | via, where
        params = v["extend_attention_fwd"]["params"]
        assert (params[O_INDEX], params[QO_INDPTR_INDEX]) == ("o_extend", "qo_indptr"), where
        assert all(c["positional_args"] == "*args" or c["positional_args"] >= MIN_POSITIONAL_ARGS
                   for c in backend["extend_calls"]), where
    assert layouts == set(hooks.STOCK_KERNEL_MODULES)  # both layouts are covered by the documented versions


def test_hooks_applied_by_the_registry_wrap_the_backend_and_flag_verify_calls(clean_registry, paths, monkeypatch):
    """The real HookRegistry applies our hooks to a backend class shaped like TritonAttnBackend."""
    from cutover.sandbox import backend as standin

    monkeypatch.setenv("CUTOVER_STATE_DIR", paths.state_dir)
    monkeypatch.setenv("CUTOVER_ROOT", paths.cutover_root)
    monkeypatch.setattr(hooks, "_runtime", None)
    original_init, original_forward = standin.StandInBackend.__init__, standin.StandInBackend.forward_extend
    seen = []

    def stock(*args, **kwargs):
        seen.append(current_verify_layer())

    try:
        hooks.register_hooks(clean_registry, backend_path="cutover.sandbox.backend.StandInBackend")
        clean_registry.apply_hooks()
        backend = standin.StandInBackend(standin.StandInModelRunner(3, torch.device("cpu"), stock))
        assert isinstance(backend._cutover_dispatcher, VerifyDispatcher)
        runtime = backend._cutover_dispatcher.runtime
        assert runtime.rank == 3 and runtime.paths.state_dir == paths.state_dir
        from kernel_ext.testing import make_verify_batch

        batch = make_verify_batch(8, 4, 1, 10)
        backend.forward_extend(batch.q, batch.k_extend, batch.v_extend, standin.StandInLayer(7),
                               standin.StandInForwardBatch(batch))
        backend.extend_attention_fwd(*batch.args())  # outside forward_extend: not a verify call
        assert seen == [7, None]
        deadline = time.time() + 2.0  # the runtime's control thread heartbeats within a poll
        while not os.path.exists(paths.heartbeat(3)) and time.time() < deadline:
            time.sleep(0.02)
        assert os.path.exists(paths.heartbeat(3))
    finally:
        standin.StandInBackend.__init__, standin.StandInBackend.forward_extend = original_init, original_forward
        if hooks._runtime is not None:
            hooks._runtime.stop()


def test_load_plugin_never_raises_when_sglang_is_missing(monkeypatch, caplog):
    import sys

    from cutover.plugin import load_plugin

    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", None)  # import fails
    load_plugin()
    assert "plugin not loaded, every rank stays on Triton" in caplog.text
    assert "and no rank can heartbeat it (the same cause)" in caplog.text  # nothing to hook a heartbeat on
