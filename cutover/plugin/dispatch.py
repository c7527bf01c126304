"""The graph-safe verify dispatch that replaces ``backend.extend_attention_fwd``.

A call is a target-verify call only inside ``verify_site(layer_id)``, which the ``forward_extend`` hook
opens when ``forward_batch.forward_mode.is_target_verify()`` (and the sandbox opens around its verify
steps). Every other call goes straight to SGLang's kernel. For a verify call, always the same launches,
whatever the mode (so one captured graph serves every mode):

    gate(layer)                      bumps the call counter, writes enable = [serve, sample] and qo_indptr_gated
    ours(o, scratch, enable)         one launch; on the device: serve -> writes o (custom mode), else sample ->
                                     writes the preallocated scratch (sampled shadow call), else exits at once
    stock(qo_indptr_gated)           SGLang's kernel; an empty extend (custom mode) does no work
    epilogue(o, scratch, enable)     one launch: counts the call; with a flag set, accounts the layer's device
                                     counters (shadow: divergence; custom: o's finiteness), else exits at once
    snapshot(...)                    one launch: copies the call into the staging area when the control thread
                                     armed this layer and the call is a shadow sample, else exits at once
                                     (cutover/plugin/snapshot.py; the truth anchor of graph-replayed calls)

If our kernel does not serve the call shape (returns False: a static decision made from shapes, dtypes and
flags, hence the same at capture and at every replay), stock runs with the real qo_indptr and nothing else
is launched: that shape is Triton in every mode, and the heartbeat counts it under ``fallback_shapes``. A
verify call whose arguments the dispatcher cannot read (fewer positional ones than SGLang has always passed)
is SGLang's too; then the runtime refuses custom for good, the problem in its heartbeat.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging

from cutover.plugin.kernels import O_INDEX, QO_INDPTR_INDEX, replace_arg
from cutover.plugin.snapshot import replayed_from_graph

log = logging.getLogger("cutover.plugin")

MIN_POSITIONAL_ARGS = 13  # q .. max_len_extend: SGLang passes at least these positionally in every version

_verify_layer: contextvars.ContextVar[int | None] = contextvars.ContextVar("cutover_verify_layer", default=None)


@contextlib.contextmanager
def verify_site(layer_id: int | None):
    """Mark the calls made inside as target-verify attention of ``layer_id`` (None: not a verify call)."""
    token = _verify_layer.set(layer_id)
    try:
        yield
    finally:
        _verify_layer.reset(token)


def current_verify_layer() -> int | None:
    return _verify_layer.get()


class VerifyDispatcher:
    """Callable stand-in for ``extend_attention_fwd`` on one backend; see the module docstring."""

    def __init__(self, stock, runtime):
        self.stock = stock
        self.runtime = runtime
        self.stock_name = f"{getattr(stock, '__module__', '?')}.{getattr(stock, '__qualname__', type(stock).__name__)}"
        self.__wrapped__ = stock

    def __call__(self, *args, **kwargs):
        layer = _verify_layer.get()
        runtime = self.runtime
        if layer is None or not runtime.active:
            return self.stock(*args, **kwargs)
        if len(args) < MIN_POSITIONAL_ARGS:  # o and qo_indptr cannot be found: SGLang changed its call
            runtime.refuse_unreadable(f"{self.stock_name} called with {len(args)} positional argument(s) in target "
                                      f"verify; the plugin reads at least {MIN_POSITIONAL_ARGS} (q_extend .. "
                                      "max_len_extend)")
            return self.stock(*args, **kwargs)
        slots = runtime.state.slots(layer)
        if slots is None or args[QO_INDPTR_INDEX].device != runtime.state.device:
            runtime.note_problem(f"layer {layer}: outside the plugin's layer table or device; served by Triton")
            return self.stock(*args, **kwargs)
        return self._verify(layer, slots, args, kwargs)

    def _verify(self, layer, slots, args, kwargs):
        runtime = self.runtime
        kernels = runtime.kernels
        o, qo_indptr = args[O_INDEX], args[QO_INDPTR_INDEX]
        gated = runtime.buffers.like("qo_indptr", qo_indptr)
        scratch = runtime.buffers.like("o", o)
        kernels.gate(slots.gate, qo_indptr, gated, slots.enable)
        try:
            served = kernels.custom(args, kwargs, o, scratch, slots.enable)
        except Exception as exc:  # noqa: BLE001 - a refusing or broken custom path falls back to Triton
            runtime.note_problem(f"custom kernel raised {type(exc).__name__}: {exc}; this shape stays on Triton")
            served = False
        if not served:
            runtime.note_fallback_shape(tuple(o.shape), o.dtype)
            slots.calls.add_(1.0)
            return self.stock(*args, **kwargs)
        result = self.stock(*replace_arg(args, QO_INDPTR_INDEX, gated), **kwargs)
        kernels.epilogue(o, scratch, slots.enable, slots.counters, runtime.state.bin_edges, slots.epilogue_workspace)
        runtime.snapshot_call(layer, slots, args, kwargs, o, scratch, self.stock_name)
        if runtime.control.mode_active == "shadow" and not replayed_from_graph(o):
            try:
                runtime.audit.offer(layer, args, kwargs, o, scratch, slots.sample, self.stock_name)
            except Exception as exc:  # noqa: BLE001 - the truth anchor never fails a served step
                runtime.audit.errors += 1
                runtime.note_problem(f"truth-anchor snapshot failed: {type(exc).__name__}: {exc}")
        return result
