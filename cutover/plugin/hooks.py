"""SGLang hooks: where the plugin attaches, version-adaptively (SGLang 0.5.11 .. 0.5.23).

Three AROUND hooks through ``sglang.srt.plugins.hook_registry.HookRegistry``:

* ``TritonAttnBackend.__init__``: after the original, ``install_on_backend`` wraps the instance attribute
  ``self.extend_attention_fwd`` (set in ``__init__`` in every supported version, from
  ``sglang.kernels.ops.attention.extend_attention`` in 0.5.16+ or
  ``sglang.srt.layers.attention.triton_ops.extend_attention`` in 0.5.11-0.5.15; wrapping the attribute
  serves both layouts without importing either);
* ``TritonAttnBackend.forward_extend``: runs the original inside ``verify_site(layer.layer_id)`` when
  ``forward_batch.forward_mode.is_target_verify()``, else inside ``verify_site(None)``;
* the ``ModelRunner`` method that builds its attention backends (``init_attention_backends`` in 0.5.14+, called
  after ``__init__``; ``init_attention_backend`` in 0.5.11-0.5.13, called inside it): a target runner for which
  no TritonAttnBackend was built (``--attention-backend flashinfer``, fa3, ...), or whose HybridAttnBackend runs
  target verify on a side that is not one, makes its rank refuse custom, heartbeating which backend it runs
  instead of leaving no heartbeat at all.

Why a flag from ``forward_extend`` rather than guessing from the kernel's arguments: a non-None
``custom_mask`` also reaches the kernel outside target verify (draft extend with a tree mask), and the kernel's
arguments carry no layer id, which the per-layer shadow counters need. The flag is read while SGLang captures
a CUDA graph, so each captured graph bakes in its own (static) answer; the target-verify graphs contain the
switch, all others contain SGLang's kernel alone.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
import threading

from cutover.hostprotocol.hostlayout import CUTOVER_ROOT_ENV, DEFAULT_CUTOVER_ROOT, DEFAULT_STATE_DIR, STATE_DIR_ENV, HostPaths

log = logging.getLogger("cutover.plugin")

BACKEND_MODULE = "sglang.srt.layers.attention.triton_backend"
BACKEND_CLASS = "TritonAttnBackend"
STOCK_KERNEL_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",  # 0.5.16+
    "sglang.srt.layers.attention.triton_ops.extend_attention",  # 0.5.11-0.5.15
)
RANK_ENV = "CUTOVER_RANK"
MODEL_RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
MODEL_RUNNER_CLASS = "ModelRunner"
# where a rank process is still visible when the Triton hooks cannot be registered: every rank builds a ModelRunner
MODEL_RUNNER_INIT = f"{MODEL_RUNNER_MODULE}.{MODEL_RUNNER_CLASS}.__init__"
# the ModelRunner method that sets self.attn_backend: 0.5.14+ (after __init__), 0.5.11-0.5.13 (inside __init__)
ATTENTION_BUILDERS = ("init_attention_backends", "init_attention_backend")
# set on a ModelRunner for which the hooked backend class was built
HOOKED_BACKEND_MARK = "_cutover_hooked_backend"
# set on a draft worker's backend: its forward_extend calls are never target verify to the plugin
DRAFT_BACKEND_MARK = "_cutover_draft_backend"

_runtime = None
_runtime_lock = threading.Lock()


def register_hooks(registry=None, backend_path: str = f"{BACKEND_MODULE}.{BACKEND_CLASS}") -> list[str]:
    """Register both AROUND hooks on ``backend_path`` (SGLang's TritonAttnBackend; the sandbox passes its
    stand-in) with ``registry`` (default: SGLang's HookRegistry), and, for SGLang's own backend, the check of
    which backend each ModelRunner built (``around_attention_backends``; the sandbox has no ModelRunner). Returns
    the registered targets. Raises when the installed SGLang is not what the Triton hooks hook (``load_plugin``
    then calls ``register_refusal``)."""
    from sglang.srt.plugins.hook_registry import HookType

    if registry is None:
        from sglang.srt.plugins.hook_registry import HookRegistry as registry
    sglang_backend = backend_path == f"{BACKEND_MODULE}.{BACKEND_CLASS}"
    if sglang_backend:
        problems = installed_hook_target_problems()
        if problems:
            raise RuntimeError(f"{BACKEND_MODULE} does not match what the plugin hooks: {'; '.join(problems)}")
    targets = [f"{backend_path}.__init__", f"{backend_path}.forward_extend"]
    registry.register(targets[0], around_backend_init, HookType.AROUND)
    registry.register(targets[1], around_forward_extend, HookType.AROUND)
    if sglang_backend:
        targets += register_backend_check(registry)
    return targets


def register_backend_check(registry) -> list[str]:
    """AROUND hook on the installed ModelRunner's attention-backend builder (``around_attention_backends``).
    Without such a method SGLang still serves and Triton ranks still heartbeat; a rank on another backend then
    leaves no heartbeat, which the log line says. Returns the registered target (none or one)."""
    from sglang.srt.plugins.hook_registry import HookType

    builder = installed_attention_builder()
    if builder is None:
        log.warning("cutover: %s.%s has none of %s: a rank whose attention backend is not triton will not "
                    "heartbeat", MODEL_RUNNER_MODULE, MODEL_RUNNER_CLASS, ", ".join(ATTENTION_BUILDERS))
        return []
    target = f"{MODEL_RUNNER_MODULE}.{MODEL_RUNNER_CLASS}.{builder}"
    registry.register(target, around_attention_backends, HookType.AROUND)
    return [target]


@functools.lru_cache(maxsize=1)
def sglang_version() -> str:
    """The installed SGLang's version, for messages (its package metadata, else its ``__version__``)."""
    try:
        return importlib.metadata.version("sglang")
    except Exception:  # noqa: BLE001 - only for a message
        return str(getattr(sys.modules.get("sglang"), "__version__", "(version unknown)"))


def refusal_reason(problem: str) -> str:
    """The reason a rank gives in every heartbeat when the plugin cannot hook SGLang's verify calls there."""
    return f"cutover could not hook SGLang {sglang_version()}: {problem}; serving runs Triton only"


def refuse_process(model_runner, reason: str) -> None:
    """Make this rank process visible although it never serves custom: its runtime (built now without a kernel
    if there is none yet) runs triton and heartbeats ``reason``; a shadow or custom request is refused with it.
    Never raises: if even that fails, SGLang's log is the only trace."""
    try:
        runtime = runtime_for_process(model_runner, unavailable=reason)
        runtime.refuse(reason)
        runtime.start()
    except Exception as exc:  # noqa: BLE001 - the plugin must never stop SGLang from starting
        log.warning("cutover: rank left on Triton without a heartbeat (%s): %s: %s", reason, type(exc).__name__, exc)


def register_refusal(problem: str, registry=None, target: str = MODEL_RUNNER_INIT) -> str:
    """After ``register_hooks`` failed: one AROUND hook on ``target`` (every rank process builds a ModelRunner)
    that starts a runtime refusing custom with the reason, so every rank still heartbeats (``cutover stage`` sees
    its ranks, ``cutover status`` shows why, shadow and promote fail with it). Returns the reason."""
    from sglang.srt.plugins.hook_registry import HookType

    if registry is None:
        from sglang.srt.plugins.hook_registry import HookRegistry as registry
    reason = refusal_reason(problem)

    def around_model_runner_init(original, model_runner, *args, **kwargs):
        return run_then_refuse(original, model_runner, args, kwargs, lambda _: reason)

    registry.register(target, around_model_runner_init, HookType.AROUND)
    return reason


def around_attention_backends(original, model_runner, *args, **kwargs):
    """AROUND the ModelRunner method that builds its attention backends: a process whose parallel layout cutover
    does not serve, or a target runner for which no hooked (Triton) backend was built, makes this process refuse
    custom, saying why."""
    return run_then_refuse(original, model_runner, args, kwargs, serving_refusal)


def run_then_refuse(original, model_runner, args, kwargs, reason_for):
    """The body of the plugin's ModelRunner hooks: run the original, then, where ``reason_for(model_runner)``
    gives a reason, make this rank process refuse custom with it (``refuse_process``: never raises)."""
    result = original(model_runner, *args, **kwargs)
    try:
        reason = reason_for(model_runner)
    except Exception as exc:  # noqa: BLE001 - judging a rank must never stop SGLang from starting
        reason = refusal_reason(f"judging this rank failed ({type(exc).__name__}: {exc})")
    if reason:
        refuse_process(model_runner, reason)
    return result


def serving_refusal(model_runner) -> str:
    """Why this rank cannot serve custom: its process's parallel layout, else its attention backend."""
    return layout_refusal(model_runner) or backend_refusal(model_runner)


def layout_refusal(model_runner) -> str:
    """Why this process's parallel layout is one cutover does not serve, or "". A host's ranks are one TP group on
    that host, keyed by TP rank (runtime/rank-<tp_rank>.json): pipeline stages and data-parallel replicas would
    repeat TP ranks 0..tp_size-1 on one host (two processes writing each heartbeat and stats file), and a TP group
    over several nodes leaves a host only part of its ranks. Where SGLang does not say, nothing is refused."""
    stages = _parallel_setting(model_runner, "pp_size")
    if stages is not None and stages > 1:
        return (f"SGLang runs {stages} pipeline stages here (--pp-size {stages}): their processes repeat TP ranks, "
                f"and cutover keys a host's ranks by TP rank (one TP group per host); serve with --pp-size 1 to use "
                f"the custom kernel; serving runs Triton only")
    # a ModelRunner's own dp_size counts attention-DP groups (SGLang before 0.5.23), not replicas: not read
    replicas = _parallel_setting(model_runner, "dp_size", on_runner=False)
    if (replicas is not None and replicas > 1
            and not _parallel_setting(model_runner, "enable_dp_attention", bool, on_runner=False)):
        return (f"SGLang runs {replicas} data-parallel replicas here (--dp-size {replicas}): their processes repeat "
                f"TP ranks, and cutover keys a host's ranks by TP rank (one TP group per host); run each replica as "
                f"a server of its own (--dp-size 1) with its own cutover host entry to use the custom kernel; "
                f"serving runs Triton only")
    nodes = _parallel_setting(model_runner, "nnodes", on_runner=False)
    if nodes is not None and nodes > 1:
        return (f"SGLang's TP group spans {nodes} nodes here (--nnodes {nodes}): this host holds only part of its "
                f"ranks, and cutover serves a TP group on one host; serve with --nnodes 1 to use the custom kernel; "
                f"serving runs Triton only")
    return ""


def backend_refusal(model_runner) -> str:
    """Why this rank cannot serve custom, judged from a ModelRunner that has built its attention backends: ""
    for a draft runner (its backend never runs target verify) or one the hooked backend was built for and, where
    its backend is hybrid, runs target verify on."""
    if is_draft_runner(model_runner):
        return ""
    backend = getattr(model_runner, "attn_backend", None)
    hybrid = hybrid_verify_side(model_runner, backend)
    if hybrid is None:
        if getattr(model_runner, HOOKED_BACKEND_MARK, False):
            return ""
        name = type(backend).__name__
        if name == BACKEND_CLASS:  # SGLang's Triton backend, built without the plugin's hook on it
            from cutover.plugin.binding import unapplied_reason

            return unapplied_reason([f"{BACKEND_MODULE}.{BACKEND_CLASS}.__init__"])
        return (f"SGLang's attention backend here is {name}, not triton: cutover serves only --attention-backend "
                f"triton (start SGLang with it to use the custom kernel); serving runs {name} only")
    side, verifier = hybrid
    if getattr(verifier, HOOKED_BACKEND_MARK, False):
        return ""
    name = type(verifier).__name__
    return (f"SGLang's attention backend here is {type(backend).__name__}, whose {side} side runs target verify: "
            f"{name}, not triton: cutover serves only a triton target verify (--attention-backend triton, or "
            f"--{side}-attention-backend triton); serving runs {name} for target verify only")


def hybrid_verify_side(model_runner, backend) -> tuple[str, object] | None:
    """For SGLang's HybridAttnBackend (prefill and decode backends differ): the side that runs target verify and
    its backend, as its ``_select_backend`` picks: decode under ``--speculative-attention-mode decode``, else
    prefill. None for any other backend."""
    prefill, decode = getattr(backend, "prefill_backend", None), getattr(backend, "decode_backend", None)
    if prefill is None or decode is None:
        return None
    on_decode = getattr(backend, "spec_attn_is_decode", None)
    if on_decode is None:  # a HybridAttnBackend that does not keep the mode: the server's arguments say
        mode = getattr(getattr(model_runner, "server_args", None), "speculative_attention_mode", "prefill")
        on_decode = mode == "decode"
    return ("decode", decode) if on_decode else ("prefill", prefill)


def around_backend_init(original, backend, *args, **kwargs):
    """AROUND TritonAttnBackend.__init__: build the backend, mark its model runner as served by it, then, for a
    target model's backend, wrap its extend kernel (never raises). A draft worker's backend (``is_draft_worker``:
    the DFlash family's draft also runs TARGET_VERIFY, with layer ids that collide with the target's) keeps
    SGLang's kernel untouched and its calls are never verify calls to the plugin. A target backend in a
    configuration whose verify calls the plugin cannot serve (``config_refusal``) is left untouched too, and the
    rank refuses custom saying why."""
    result = original(backend, *args, **kwargs)
    model_runner = kwargs.get("model_runner", args[0] if args else None)
    _mark_hooked(model_runner)
    _mark_hooked(backend)
    if is_draft_runner(model_runner):
        _set_mark(backend, DRAFT_BACKEND_MARK)
        return result
    try:
        reason = config_refusal(model_runner, backend)
        if reason:
            refuse_process(model_runner, reason)
        else:
            install_on_backend(backend, runtime_for_process(model_runner))
    except Exception as exc:  # noqa: BLE001 - this rank keeps SGLang's kernel
        refuse_process(model_runner, refusal_reason(f"installing on {type(backend).__name__} failed: "
                                                    f"{type(exc).__name__}: {exc}"))
    return result


def is_draft_runner(model_runner) -> bool:
    """Whether ``model_runner`` is a speculative draft worker's (SGLang's ``ModelRunner.is_draft_worker``)."""
    return getattr(model_runner, "is_draft_worker", False) is True


def config_refusal(model_runner, backend) -> str:
    """Why a target backend's verify calls would never reach the custom kernel, or "": then a shadow would compare
    nothing while looking healthy, so the rank refuses shadow and custom with the reason instead."""
    server_args = getattr(model_runner, "server_args", None)
    if (getattr(backend, "enable_deterministic", False) is True
            or getattr(server_args, "enable_deterministic_inference", False) is True):
        return refusal_reason("SGLang runs --enable-deterministic-inference here: its target verify goes through "
                              "extend_attention_fwd_unified, which the plugin does not see (a shadow would compare "
                              "nothing); serve without it to use the custom kernel")
    kv_dtype = getattr(model_runner, "kv_cache_dtype", None)
    if "float8" in str(kv_dtype):
        return refusal_reason(f"SGLang's KV cache here is {kv_dtype} (--kv-cache-dtype fp8_*): the custom kernel "
                              f"serves a bf16 KV cache only, so every verify call would fall back to Triton (a "
                              f"shadow would compare nothing); serve with --kv-cache-dtype auto to use it")
    from kernel_ext.reference import MAX_DRAFT_TOKENS

    drafts = getattr(server_args, "speculative_num_draft_tokens", None)
    if type(drafts) is int and drafts > MAX_DRAFT_TOKENS:
        return refusal_reason(f"SGLang verifies {drafts} draft tokens per request here (--speculative-num-draft-"
                              f"tokens {drafts}): the custom kernel serves 1..{MAX_DRAFT_TOKENS}, so every verify "
                              f"call would fall back to Triton (a shadow would compare nothing)")
    return ""


def _mark_hooked(obj) -> None:
    """Note on a model runner that the hooked backend was built for it, and on the backend that it is hooked (what
    ``backend_refusal`` reads)."""
    _set_mark(obj, HOOKED_BACKEND_MARK)


def _set_mark(obj, mark: str) -> None:
    try:
        setattr(obj, mark, True)
    except (AttributeError, TypeError):  # nothing to mark (none passed, or it takes no attributes)
        pass


def around_forward_extend(original, backend, *args, **kwargs):
    """AROUND TritonAttnBackend.forward_extend(q, k, v, layer, forward_batch, ...): mark verify calls.

    A call it cannot read (no forward_batch.forward_mode.is_target_verify(), no layer.layer_id) is served by
    SGLang as it is, and this process refuses custom from then on with the problem in its heartbeat: the plugin
    cannot tell which calls are target verify, so a heartbeat saying custom would not be true."""
    from cutover.plugin.dispatch import verify_site

    layer_id = None
    if getattr(backend, DRAFT_BACKEND_MARK, False):  # a draft worker's backend: never a target verify call
        with verify_site(None):
            return original(backend, *args, **kwargs)
    try:
        layer = kwargs["layer"] if "layer" in kwargs else args[3]
        forward_batch = kwargs["forward_batch"] if "forward_batch" in kwargs else args[4]
        if forward_batch.forward_mode.is_target_verify():
            layer_id = int(layer.layer_id)
    except Exception as exc:  # noqa: BLE001 - SGLang serves the call; the rank says why it stays on Triton
        layer_id = None
        _unreadable_call(backend, f"{BACKEND_CLASS}.forward_extend called in a form the plugin cannot read "
                                  f"({type(exc).__name__}: {exc}): target-verify calls cannot be told apart")
    with verify_site(layer_id):
        return original(backend, *args, **kwargs)


def _unreadable_call(backend, problem: str) -> None:
    """A hooked call the plugin cannot read: the runtime of ``backend`` notes it and refuses custom."""
    runtime = getattr(getattr(backend, "_cutover_dispatcher", None), "runtime", None)
    if runtime is not None:  # else not installed on this backend: its rank already says why
        runtime.refuse_unreadable(problem)


def install_on_backend(backend, runtime) -> bool:
    """Wrap ``backend.extend_attention_fwd`` with the verify dispatcher (idempotent). The one install point:
    SGLang's hook and the sandbox's stand-in backend both call it. False when the backend has no such
    attribute: then it is left untouched and the runtime is started refusing custom, the reason in its
    heartbeat."""
    import torch

    from cutover.plugin.dispatch import VerifyDispatcher

    stock = getattr(backend, "extend_attention_fwd", None)
    if stock is None:  # the rank still heartbeats, refusing custom with the reason
        runtime.refuse(refusal_reason(f"{type(backend).__name__} has no extend_attention_fwd"))
        runtime.start()
        return False
    if isinstance(getattr(backend, "_cutover_dispatcher", None), VerifyDispatcher):
        return True
    dispatcher = runtime.wrap(stock)
    backend._cutover_dispatcher = dispatcher
    # like SGLang's own kernels: never traced by torch.compile (the dispatcher is launch glue, not math)
    backend.extend_attention_fwd = torch.compiler.disable(dispatcher)
    runtime.start()
    return True


def _rank_of(model_runner) -> int:
    """The rank's heartbeat key on its host: its tensor-parallel rank (one TP group per host: heartbeats are
    runtime/rank-<tp_rank>.json), else $CUTOVER_RANK, else the torch.distributed rank. In a TP group over several
    nodes (refused: layout_refusal) its place among its node's ranks, so that every host's ranks 0..n-1 say why."""
    rank = _parallel_setting(model_runner, "tp_rank")
    if rank is None:
        if os.environ.get(RANK_ENV, "").isdigit():
            return int(os.environ[RANK_ENV])
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    nodes = _parallel_setting(model_runner, "nnodes", on_runner=False)
    size = _parallel_setting(model_runner, "tp_size")
    if nodes is not None and nodes > 1 and size is not None and size % nodes == 0:
        return rank % (size // nodes)
    return rank


def _parallel_setting(model_runner, name: str, kind: type = int, *, on_runner: bool = True):
    """A parallel setting of this SGLang process (tp_rank, pp_size, dp_size, ...) of type `kind`, or None where
    nothing says: the ModelRunner's attribute (SGLang before 0.5.23 keeps some there; not read where `on_runner`
    is False, for a name the runner uses otherwise), else SGLang's parallel runtime context's (`get_parallel()`,
    0.5.20 and later), else its server arguments'."""
    value = getattr(model_runner, name, None) if on_runner else None
    if type(value) is not kind:
        value = _sglang_context_value(name)
    if type(value) is not kind:
        value = getattr(getattr(model_runner, "server_args", None), name, None)
    return value if type(value) is kind else None


def _sglang_context_value(name: str):
    """A value of SGLang's parallel runtime context, or None where that SGLang has none or this process has not
    written it."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return getattr(get_parallel(), name)
    except (ImportError, AttributeError, RuntimeError, ValueError):
        return None


def _device_of(model_runner):
    import torch

    device = getattr(model_runner, "device", None)
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def host_paths_from_env() -> HostPaths:
    return HostPaths(cutover_root=os.environ.get(CUTOVER_ROOT_ENV, DEFAULT_CUTOVER_ROOT),
                     state_dir=os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR))


def runtime_for_process(model_runner, unavailable: str = ""):
    """This process's runtime (one per rank process: the target and the draft backend share it). ``unavailable``:
    if it has to be built now, build it without a kernel, refusing custom for that reason."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            from cutover.plugin.runtime import PluginRuntime

            _runtime = PluginRuntime(host_paths_from_env(), _rank_of(model_runner), _device_of(model_runner),
                                     unavailable=unavailable)
        return _runtime


def resolve_stock_kernel():
    """(SGLang's extend_attention_fwd, module name) from whichever layout the installed SGLang has."""
    problems = []
    for name in STOCK_KERNEL_MODULES:
        try:
            return importlib.import_module(name).extend_attention_fwd, name
        except (ImportError, AttributeError) as exc:
            problems.append(f"{name}: {exc}")
    raise ImportError("SGLang's extend_attention_fwd not found in any known layout: " + "; ".join(problems))


def installed_source_path(module: str) -> str | None:
    """Where the installed SGLang keeps ``module``'s source (None: SGLang is not installed)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(spec.submodule_search_locations[0], *module.split(".")[1:]) + ".py"


def installed_hook_target_problems() -> list[str]:
    """hook_target_problems of the installed SGLang's triton_backend.py, read without importing it."""
    path = installed_source_path(BACKEND_MODULE)
    if path is None:
        return ["sglang is not installed"]
    try:
        with open(path) as handle:
            return hook_target_problems(handle.read())
    except OSError as exc:
        return [f"{BACKEND_MODULE} not readable: {exc}"]


def installed_attention_builder() -> str | None:
    """attention_builder of the installed SGLang's model_runner.py, read without importing it (None: not found)."""
    path = installed_source_path(MODEL_RUNNER_MODULE)
    if path is None:
        return None
    try:
        with open(path) as handle:
            return attention_builder(handle.read())
    except (OSError, SyntaxError):
        return None


def attention_builder(model_runner_source: str) -> str | None:
    """The first of ``ATTENTION_BUILDERS`` that ``class ModelRunner`` in ``model_runner_source`` defines."""
    tree = ast.parse(model_runner_source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == MODEL_RUNNER_CLASS), None)
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} if cls is not None else set()
    return next((name for name in ATTENTION_BUILDERS if name in methods), None)


def hook_target_problems(backend_source: str) -> list[str]:
    """What ``triton_backend.py`` source lacks for our hooks (empty list: every target is there).

    Checks: class TritonAttnBackend; its ``__init__`` assigns ``self.extend_attention_fwd``; its
    ``forward_extend`` takes (q, k, v, layer, forward_batch, ...) and reaches ``self.extend_attention_fwd``
    (directly or through a helper method of the class) with at least the positional arguments the dispatcher
    reads (``dispatch.MIN_POSITIONAL_ARGS``; counted where the source shows them, through a helper's ``*args``
    too); ``is_target_verify`` is used.
    """
    from cutover.plugin.dispatch import MIN_POSITIONAL_ARGS

    tree = ast.parse(backend_source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == BACKEND_CLASS), None)
    if cls is None:
        return [f"class {BACKEND_CLASS} not found"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    problems = []

    def assigns_attr(fn):
        return any(isinstance(t, ast.Attribute) and t.attr == "extend_attention_fwd"
                   for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets)

    def calls(fn):
        return {call.func.attr for call in _self_calls(fn)}

    if "__init__" not in methods or not assigns_attr(methods["__init__"]):
        problems.append("__init__ does not set self.extend_attention_fwd")
    forward = methods.get("forward_extend")
    if forward is None:
        problems.append("forward_extend not found")
    else:
        params = [a.arg for a in forward.args.args[:6]]
        if params != ["self", "q", "k", "v", "layer", "forward_batch"]:
            problems.append(f"forward_extend parameters are {params}, expected self, q, k, v, layer, forward_batch")
        reached = calls(forward)
        reached |= {c for helper in list(reached) if helper in methods for c in calls(methods[helper])}
        if "extend_attention_fwd" not in reached:
            problems.append("forward_extend does not call self.extend_attention_fwd")
        short = sorted({n for n in _extend_call_positional_counts(forward, methods)
                        if n is not None and n < MIN_POSITIONAL_ARGS})
        if short:
            problems.append(f"forward_extend passes self.extend_attention_fwd {', '.join(map(str, short))} "
                            f"positional argument(s); the plugin reads at least {MIN_POSITIONAL_ARGS} "
                            "(q_extend .. max_len_extend)")
    if "is_target_verify" not in backend_source:
        problems.append("is_target_verify is not used")
    return problems


def _extend_call_positional_counts(forward, methods) -> list[int | None]:
    """How many positional arguments each call of ``self.extend_attention_fwd`` reached from ``forward_extend``
    (directly, or through a helper method it calls) gets; None where the source does not show it (``*args`` from
    elsewhere)."""

    def self_calls(fn, name):
        return [call for call in _self_calls(fn) if call.func.attr == name]

    def count(call, varargs=None):
        total = 0
        for arg in call.args:
            if not isinstance(arg, ast.Starred):
                total += 1
                continue
            known = (varargs or {}).get(arg.value.id) if isinstance(arg.value, ast.Name) else None
            if known is None:
                return None
            total += known
        return total

    counts = [count(call) for call in self_calls(forward, "extend_attention_fwd")]
    for name, helper in methods.items():
        inner = self_calls(helper, "extend_attention_fwd") if helper is not forward else []
        if not inner:
            continue
        vararg = helper.args.vararg.arg if helper.args.vararg else None
        named = len(helper.args.posonlyargs) + len(helper.args.args) - 1  # without self
        for outer in self_calls(forward, name):
            passed = count(outer)
            varargs = {vararg: None if passed is None else max(passed - named, 0)} if vararg else None
            counts += [count(call, varargs) for call in inner]
    return counts


def _self_calls(fn) -> list[ast.Call]:
    """The ``self.<method>(...)`` calls inside ``fn``."""
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
