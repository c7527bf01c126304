"""A rank whose SGLang runs another attention backend than triton still heartbeats: the plugin's hook on the
ModelRunner method that builds the attention backends makes it refuse custom there, naming the backend, instead
of leaving no heartbeat ("the serving process is down or the plugin is not loaded"). Draft runners are never
judged. Hooks applied by SGLang's real HookRegistry to stand-in runner and backend classes; CPU only."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cutover.hostprotocol.hostlayout import live_heartbeats
from cutover.plugin import hooks
from cutover.sandbox import backend as standin

from .test_hooks import clean_registry  # noqa: F401 - a fixture
from .test_refusals import wait_for_heartbeat

hook_registry = pytest.importorskip("sglang.srt.plugins.hook_registry",
                                    reason="needs SGLang (pip install --no-deps sglang==0.5.23)")
HookRegistry, HookType = hook_registry.HookRegistry, hook_registry.HookType
STANDIN_BACKEND = "cutover.sandbox.backend.StandInBackend"
RUNNER_BUILDER = f"{__name__}.StandInRunner.init_attention_backends"


def stock_kernel(*args, **kwargs):
    pass


class FlashInferMLAAttnBackend:
    """Stands in for an SGLang attention backend the plugin does not hook."""

    def __init__(self, model_runner):
        self.model_runner = model_runner


class StandInRunner:
    """ModelRunner where the plugin reads it (tp_rank, device, is_draft_worker, attn_backend); like SGLang
    0.5.14+, ``init_attention_backends`` (called after ``__init__``) builds the backend."""

    def __init__(self, tp_rank: int, backend_class, is_draft_worker: bool = False):
        self.tp_rank = tp_rank
        self.device = torch.device("cpu")
        self.is_draft_worker = is_draft_worker
        self.stock_kernel = stock_kernel  # what StandInBackend takes as SGLang's kernel
        self.backend_class = backend_class

    def init_attention_backends(self):
        self.attn_backend = self.backend_class(self)


TRITON, OTHER = standin.StandInBackend, FlashInferMLAAttnBackend


@pytest.fixture
def hooked(clean_registry, paths, monkeypatch):
    """The Triton hooks on StandInBackend (as the sandbox registers them) and the backend check on
    StandInRunner.init_attention_backends, applied by the registry; a fresh process runtime, stopped after."""
    monkeypatch.setenv("CUTOVER_STATE_DIR", paths.state_dir)
    monkeypatch.setenv("CUTOVER_ROOT", paths.cutover_root)
    monkeypatch.setattr(hooks, "_runtime", None)
    originals = (TRITON.__init__, TRITON.forward_extend, StandInRunner.init_attention_backends)
    hooks.register_hooks(clean_registry, backend_path=STANDIN_BACKEND)
    clean_registry.register(RUNNER_BUILDER, hooks.around_attention_backends, HookType.AROUND)
    clean_registry.apply_hooks()
    yield
    TRITON.__init__, TRITON.forward_extend, StandInRunner.init_attention_backends = originals
    if hooks._runtime is not None:
        hooks._runtime.stop()


def build(*runners: StandInRunner) -> None:
    """What SGLang's scheduler does after building the runners: each builds its attention backends."""
    for runner in runners:
        runner.init_attention_backends()


def test_a_rank_on_another_backend_heartbeats_which_and_refuses_shadow_and_custom(hooked, paths, write_control):
    write_control("triton", 1)  # as `cutover stage` leaves the host
    runner = StandInRunner(4, OTHER)
    build(runner)

    assert isinstance(runner.attn_backend, OTHER)  # SGLang's backend, untouched
    beat = wait_for_heartbeat(paths, 4, lambda b: b.generation_seen >= 1)
    assert set(live_heartbeats(paths, 8, stale_s=10.0)) == {4}  # what `cutover stage` waits for
    assert beat.mode_active == "triton"
    assert beat.reason == ("custom path unavailable: SGLang's attention backend here is FlashInferMLAAttnBackend, "
                           "not triton: cutover serves only --attention-backend triton (start SGLang with it to "
                           "use the custom kernel); serving runs FlashInferMLAAttnBackend only")

    for generation, mode in ((2, "shadow"), (3, "custom")):
        write_control(mode, generation)
        beat = wait_for_heartbeat(paths, 4, lambda b, g=generation: b.generation_seen >= g)
        assert beat.mode_active == "triton" and not beat.acknowledges(generation, mode)
        assert "attention backend here is FlashInferMLAAttnBackend" in beat.reason


def test_a_rank_on_the_hooked_backend_is_not_refused(hooked, paths, write_control):
    write_control("triton", 1)
    runner = StandInRunner(0, TRITON)
    build(runner)

    assert runner.attn_backend.extend_attention_fwd is not stock_kernel  # the dispatcher wraps it
    assert hooks._runtime.unavailable == ""
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 0, lambda b: b.generation_seen >= 2)
    assert beat.acknowledges(2, "shadow") and beat.reason == ""


@pytest.mark.parametrize("draft_first", [False, True], ids=["target-first", "draft-first"])
def test_a_draft_runner_on_another_backend_does_not_refuse_the_rank(hooked, paths, write_control, draft_first):
    write_control("triton", 1)
    target, draft = StandInRunner(1, TRITON), StandInRunner(1, OTHER, is_draft_worker=True)
    build(*((draft, target) if draft_first else (target, draft)))

    assert hooks._runtime.unavailable == ""
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 1, lambda b: b.generation_seen >= 2)
    assert beat.acknowledges(2, "shadow") and beat.reason == ""


@pytest.mark.parametrize("draft_first", [False, True], ids=["target-first", "draft-first"])
def test_a_hooked_draft_backend_does_not_make_a_target_on_another_backend_look_served(
        hooked, paths, write_control, draft_first):
    write_control("triton", 1)
    target, draft = StandInRunner(2, OTHER), StandInRunner(2, TRITON, is_draft_worker=True)
    build(*((draft, target) if draft_first else (target, draft)))

    assert draft.attn_backend.extend_attention_fwd is stock_kernel  # a draft worker's backend keeps SGLang's kernel
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 2, lambda b: b.generation_seen >= 2)
    assert beat.mode_active == "triton" and not beat.acknowledges(2, "shadow")
    assert "SGLang's attention backend here is FlashInferMLAAttnBackend, not triton" in beat.reason


LAYOUTS = {  # SGLang's runtime context's settings -> the refusal's words (None: served)
    "one-tp-group": (dict(pp_size=1, dp_size=1, nnodes=1), None),
    "two-stages": (dict(pp_size=2), "SGLang runs 2 pipeline stages here (--pp-size 2)"),
    "two-replicas": (dict(dp_size=2), "SGLang runs 2 data-parallel replicas here (--dp-size 2)"),
    # SGLang before 0.5.23 counted attention-DP groups with dp_size: one TP group, served
    "dp-attention": (dict(dp_size=2, enable_dp_attention=True), None),
    "two-nodes": (dict(nnodes=2), "SGLang's TP group spans 2 nodes here (--nnodes 2)"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_rank_of_a_layout_cutover_does_not_serve_refuses_custom_saying_why(hooked, paths, write_control, layout):
    """Pipeline stages and data-parallel replicas repeat TP ranks on one host (two processes per heartbeat file), a
    TP group over several nodes leaves a host part of its ranks: the process refuses custom on the hooked backend
    too, naming the flag. SGLang's runtime context says the layout (set here as its own tests do, with
    ``override``)."""
    context = pytest.importorskip("sglang.srt.runtime_context",
                                  reason="this SGLang has no runtime context (before 0.5.20)")
    settings, refusal = LAYOUTS[layout]
    write_control("triton", 1)
    runner = StandInRunner(5, TRITON)
    with context.get_parallel().override(**settings):
        build(runner)

    assert runner.attn_backend.extend_attention_fwd is not stock_kernel  # hooked: a refusal is the layout's
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 5, lambda b: b.generation_seen >= 2)
    assert beat.acknowledges(2, "shadow") is (refusal is None)
    assert (beat.mode_active == "triton") is (refusal is not None)
    if refusal is not None:
        assert refusal in beat.reason and "serving runs Triton only" in beat.reason


def test_a_model_runner_that_keeps_its_pp_size_is_judged_by_it(hooked, paths, write_control):
    """SGLang before 0.5.23 keeps pp_size on the ModelRunner (no runtime context): read there first."""
    write_control("triton", 1)
    runner = StandInRunner(6, TRITON)
    runner.pp_size = 4
    build(runner)

    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 6, lambda b: b.generation_seen >= 2)
    assert beat.mode_active == "triton" and not beat.acknowledges(2, "shadow")
    assert "SGLang runs 4 pipeline stages here (--pp-size 4)" in beat.reason


@pytest.mark.parametrize("attention_dp, refused", [(False, True), (True, False)], ids=["replicas", "dp-attention"])
def test_without_a_runtime_context_the_server_arguments_say_the_layout(attention_dp, refused):
    """SGLang before 0.5.20 has no runtime context: dp_size and enable_dp_attention are the server arguments' (there
    dp_size with DP attention counts attention-DP groups of one TP group); the ModelRunner's own dp_size (attention
    DP only) is never read."""
    runner = StandInRunner(0, TRITON)
    runner.dp_size = 4
    runner.server_args = SimpleNamespace(dp_size=2, enable_dp_attention=attention_dp, nnodes=1)

    reason = hooks.layout_refusal(runner)

    assert ("SGLang runs 2 data-parallel replicas here (--dp-size 2)" in reason) is refused
    assert bool(reason) is refused


def test_a_rank_of_a_tp_group_over_nodes_heartbeats_under_its_place_on_its_node(monkeypatch):
    """TP rank 11 of 16 over 2 nodes is the fourth rank of its node: its heartbeat is rank-3.json, where that host's
    status looks (ranks 0..7), so the second node's ranks say why they refuse instead of looking down."""
    context = pytest.importorskip("sglang.srt.runtime_context",
                                  reason="this SGLang has no runtime context (before 0.5.20)")
    runner = StandInRunner(11, TRITON)
    with context.get_parallel().override(tp_size=16, nnodes=2):
        assert hooks._rank_of(runner) == 3
    with context.get_parallel().override(tp_size=16, nnodes=1):
        assert hooks._rank_of(runner) == 11


def test_the_backend_check_never_stops_sglang_from_starting(hooked, monkeypatch, caplog):
    def broken(model_runner, unavailable=""):
        raise RuntimeError("disk full")

    monkeypatch.setattr(hooks, "runtime_for_process", broken)
    runner = StandInRunner(3, OTHER)
    build(runner)

    assert isinstance(runner.attn_backend, OTHER)
    assert "rank left on Triton without a heartbeat" in caplog.text and "FlashInferMLAAttnBackend" in caplog.text


def test_a_rank_whose_judgment_fails_starts_and_refuses_custom_saying_why(monkeypatch):
    refused = []
    monkeypatch.setattr(hooks, "refuse_process", lambda runner, reason: refused.append((runner, reason)))

    def judge(runner):
        raise KeyError("pp_size")

    runner = object()
    assert hooks.run_then_refuse(lambda r: "built", runner, (), {}, judge) == "built"
    assert refused == [(runner, hooks.refusal_reason("judging this rank failed (KeyError: 'pp_size')"))]


def test_load_plugin_hooks_the_backend_builder_of_the_installed_model_runner(clean_registry):
    from cutover.plugin import load_plugin

    load_plugin()
    target = f"{hooks.MODEL_RUNNER_MODULE}.{hooks.MODEL_RUNNER_CLASS}.init_attention_backends"
    assert [(kind, fn.__name__) for kind, fn, _ in clean_registry._hooks[target]] == [
        (HookType.AROUND, "around_attention_backends")]


def test_the_sandbox_registers_no_model_runner_hook(clean_registry):
    hooks.register_hooks(clean_registry, backend_path=STANDIN_BACKEND)
    assert sorted(clean_registry._hooks) == [f"{STANDIN_BACKEND}.__init__", f"{STANDIN_BACKEND}.forward_extend"]


def installed_model_runner_methods() -> dict[str, ast.FunctionDef]:
    module, cls_name = hooks.MODEL_RUNNER_MODULE, hooks.MODEL_RUNNER_CLASS
    path = Path(importlib.util.find_spec("sglang").origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    [cls] = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == cls_name]
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_the_installed_model_runner_builds_its_backend_after_init_in_the_hooked_method():
    """0.5.14+: __init__ returns before the scheduler calls init_attention_backends, which sets attn_backend;
    a check after __init__ would find no backend and refuse every rank."""
    methods = installed_model_runner_methods()

    def sets_attn_backend(fn):
        return any(isinstance(t, ast.Attribute) and t.attr == "attn_backend"
                   for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets)

    assert hooks.installed_attention_builder() == "init_attention_backends"
    assert sets_attn_backend(methods["init_attention_backends"]) and not sets_attn_backend(methods["__init__"])


@pytest.mark.parametrize("methods, builder", [
    (["__init__", "initialize", "init_attention_backend"], "init_attention_backend"),  # 0.5.11-0.5.13
    (["__init__", "init_attention_backends", "init_attention_backend"], "init_attention_backends"),  # 0.5.14-15
    (["__init__", "init_attention_backends"], "init_attention_backends"),  # 0.5.16+
    (["__init__", "initialize"], None),
])
def test_the_backend_builder_is_found_in_every_layout(methods, builder):
    body = "".join(f"    def {name}(self):\n        pass\n" for name in methods)
    assert hooks.attention_builder(f"class ModelRunner:\n{body}") == builder


class HybridAttnBackend:
    """Stands in for SGLang's HybridAttnBackend (--prefill-attention-backend and --decode-attention-backend
    differ): target verify runs on the decode side under --speculative-attention-mode decode, else on prefill."""

    def __init__(self, model_runner, prefill_class, decode_class, verify_on_decode):
        self.prefill_backend = prefill_class(model_runner)
        self.decode_backend = decode_class(model_runner)
        self.spec_attn_is_decode = verify_on_decode


def hybrid(prefill_class, decode_class, verify_on_decode=False):
    return lambda runner: HybridAttnBackend(runner, prefill_class, decode_class, verify_on_decode)


@pytest.mark.parametrize("backend_class, side", [
    (hybrid(OTHER, TRITON), "prefill"),  # Triton decodes, FlashInfer verifies (SGLang's default mode)
    (hybrid(TRITON, OTHER, verify_on_decode=True), "decode"),
], ids=["prefill-verifies", "decode-verifies"])
def test_a_hybrid_backend_that_verifies_on_another_backend_refuses(hooked, paths, write_control, backend_class, side):
    write_control("triton", 1)
    runner = StandInRunner(5, backend_class)
    build(runner)

    # the Triton side's runtime may heartbeat once before the runner's check refuses
    beat = wait_for_heartbeat(paths, 5, lambda b: b.generation_seen >= 1 and b.reason != "")
    assert beat.reason == (
        f"custom path unavailable: SGLang's attention backend here is HybridAttnBackend, whose {side} side runs "
        "target verify: FlashInferMLAAttnBackend, not triton: cutover serves only a triton target verify "
        f"(--attention-backend triton, or --{side}-attention-backend triton); serving runs "
        "FlashInferMLAAttnBackend for target verify only")
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 5, lambda b: b.generation_seen >= 2)
    assert beat.mode_active == "triton" and not beat.acknowledges(2, "shadow")


@pytest.mark.parametrize("backend_class", [hybrid(TRITON, OTHER), hybrid(OTHER, TRITON, verify_on_decode=True)],
                         ids=["prefill-verifies", "decode-verifies"])
def test_a_hybrid_backend_that_verifies_on_triton_is_served(hooked, paths, write_control, backend_class):
    write_control("triton", 1)
    runner = StandInRunner(6, backend_class)
    build(runner)

    assert hooks._runtime.unavailable == ""
    write_control("shadow", 2)
    beat = wait_for_heartbeat(paths, 6, lambda b: b.generation_seen >= 2)
    assert beat.acknowledges(2, "shadow") and beat.reason == ""


def test_without_the_mode_on_the_backend_the_server_arguments_say_which_side_verifies():
    class Args:
        speculative_attention_mode = "decode"

    runner = StandInRunner(7, OTHER)
    runner.server_args = Args()
    backend = HybridAttnBackend(runner, OTHER, OTHER, verify_on_decode=None)
    assert hooks.hybrid_verify_side(runner, backend) == ("decode", backend.decode_backend)
    del runner.server_args
    assert hooks.hybrid_verify_side(runner, backend) == ("prefill", backend.prefill_backend)
    assert hooks.hybrid_verify_side(runner, OTHER(runner)) is None


def test_the_installed_hybrid_backend_keeps_what_the_check_reads():
    """SGLang's HybridAttnBackend sets prefill_backend, decode_backend and spec_attn_is_decode in __init__, and its
    _select_backend sends target verify to the decode side exactly when spec_attn_is_decode."""
    path = Path(importlib.util.find_spec("sglang").origin).parent / "srt/layers/attention/hybrid_attn_backend.py"
    [cls] = [n for n in ast.parse(path.read_text()).body
             if isinstance(n, ast.ClassDef) and n.name == "HybridAttnBackend"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    assigned = {t.attr for n in ast.walk(methods["__init__"]) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute)}
    assert {"prefill_backend", "decode_backend", "spec_attn_is_decode"} <= assigned
    select = ast.unparse(methods["_select_backend"])
    assert "is_target_verify()" in select
    assert "self.decode_backend if self.spec_attn_is_decode else self.prefill_backend" in " ".join(select.split())
