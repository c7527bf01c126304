"""Hooks SGLang registered but did not apply (an import error inside SGLang's module: its ``apply_hooks`` only
logs "Failed to apply hooks" and serves on): each rank still heartbeats, on Triton, naming the cause and the fix,
and refuses shadow with it, instead of leaving no trace but "not serving"."""

from __future__ import annotations

import sys

import pytest

from cutover.plugin import binding, hooks

from .test_hooks import clean_registry  # noqa: F401 - a fixture
from .test_refusals import wait_for_heartbeat

plugins = pytest.importorskip("sglang.srt.plugins", reason="needs SGLang (pip install --no-deps sglang==0.5.23)")
RANK = 3


@pytest.fixture
def fresh_process(clean_registry, paths, monkeypatch):
    """This process as a rank process that has not loaded plugins yet: SGLang's load-once flag cleared, the host
    layout in tmp_path, the rank named by $CUTOVER_RANK, a short grace; the runtime it starts stopped after."""
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setenv("CUTOVER_STATE_DIR", paths.state_dir)
    monkeypatch.setenv("CUTOVER_ROOT", paths.cutover_root)
    monkeypatch.setenv(hooks.RANK_ENV, str(RANK))
    monkeypatch.setattr(hooks, "_runtime", None)
    monkeypatch.setattr(binding, "BINDING_GRACE_S", 0.3)
    yield clean_registry
    if hooks._runtime is not None:
        hooks._runtime.stop()


def test_a_rank_whose_hooks_sglang_could_not_apply_heartbeats_why_and_refuses_shadow(
        fresh_process, paths, write_control, monkeypatch, caplog):
    for module in (hooks.BACKEND_MODULE, hooks.MODEL_RUNNER_MODULE):  # importing them fails inside apply_hooks
        monkeypatch.setitem(sys.modules, module, None)
    write_control("shadow", 1)

    plugins.load_plugins()  # SGLang's loader: our entry point registers, apply_hooks fails, SGLang serves on

    assert any("Failed to apply hooks" in r.getMessage() for r in caplog.records)
    beat = wait_for_heartbeat(paths, RANK, lambda b: "did not apply" in b.reason)
    assert beat.mode_active == "triton" and not beat.acknowledges(1, "shadow")
    assert f"{hooks.BACKEND_MODULE}.{hooks.BACKEND_CLASS}.forward_extend" in beat.reason
    assert "Failed to apply hooks to" in beat.reason and "restart serving" in beat.reason


def test_hooks_that_applied_leave_no_trace(fresh_process, paths, monkeypatch):
    from cutover.sandbox.backend import StandInBackend

    for name in ("__init__", "forward_extend"):  # restored after: apply_hooks patches the class
        monkeypatch.setattr(StandInBackend, name, getattr(StandInBackend, name))
    targets = hooks.register_hooks(fresh_process, backend_path="cutover.sandbox.backend.StandInBackend")
    fresh_process.apply_hooks()
    watch = binding.watch_binding(targets, fresh_process)
    watch.join(timeout=5)
    assert not watch.is_alive() and hooks._runtime is None


def test_a_process_sglang_gives_no_rank_writes_no_heartbeat(fresh_process, paths, monkeypatch):
    """SGLang's main, detokenizer and DP-controller processes load plugins too and serve no attention."""
    monkeypatch.delenv(hooks.RANK_ENV)
    monkeypatch.setattr(binding, "POLL_S", 0.01)
    watch = binding.watch_binding(["sglang.srt.nowhere.Nothing.method"], fresh_process)
    watch.join(timeout=5)
    assert not watch.is_alive() and hooks._runtime is None
