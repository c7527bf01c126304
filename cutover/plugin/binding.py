"""Hooks registered but never applied: a rank that serves Triton still says why.

``load_plugin`` only registers the hooks; SGLang's ``load_plugins()`` applies them afterwards
(``HookRegistry.apply_hooks``) and, where that fails for a target (an import error inside SGLang's module, say),
only logs "Failed to apply hooks" and serves on. Nothing of the plugin would then ever run in the rank: no
runtime, no heartbeat, and the operator would see only "not serving". ``watch_binding`` starts one daemon thread
that waits until every registered target is applied (the normal case: milliseconds after ``load_plugin``
returns, then it ends); past ``BINDING_GRACE_S`` it makes this process refuse custom with the cause and the fix
in its heartbeat, in a process whose TP rank SGLang's runtime context (or $CUTOVER_RANK) names: a rank process,
not SGLang's main, detokenizer or DP-controller process, which load the plugin too and serve no attention.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from cutover.plugin import hooks

log = logging.getLogger("cutover.plugin")

BINDING_GRACE_S = 30.0  # apply_hooks imports SGLang's model runner and attention modules: seconds, not minutes
POLL_S = 0.05


def watch_binding(targets: list[str], registry=None, grace_s: float | None = None) -> threading.Thread | None:
    """Start the watch over ``targets`` in ``registry`` (default: SGLang's HookRegistry); None where the registry
    does not keep which targets it applied (nothing to watch)."""
    if registry is None:
        from sglang.srt.plugins.hook_registry import HookRegistry as registry
    if not isinstance(getattr(registry, "_patched", None), set):
        return None
    thread = threading.Thread(target=_await_binding, name="cutover-hook-binding", daemon=True,
                              args=(targets, registry, BINDING_GRACE_S if grace_s is None else grace_s))
    thread.start()
    return thread


def unapplied_reason(missing: list[str]) -> str:
    """Why a rank whose hooks SGLang did not apply serves Triton, and what to do."""
    return hooks.refusal_reason(
        f"SGLang did not apply the plugin's hooks on {', '.join(missing)} (its log says why after 'Failed to apply "
        f"hooks to'; typically an import error inside SGLang's module): fix that and restart serving")


def _await_binding(targets: list[str], registry, grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    missing = _missing(targets, registry)
    while missing and time.monotonic() < deadline:
        time.sleep(POLL_S)
        missing = _missing(targets, registry)
    if not missing:
        return
    reason = unapplied_reason(missing)
    log.warning("cutover: %s", reason)
    while _known_rank() is None:  # SGLang publishes a scheduler's rank right after load_plugins()
        if time.monotonic() >= deadline + grace_s:
            return  # not a rank process: SGLang's log line above is its trace
        time.sleep(POLL_S)
    hooks.refuse_process(None, reason)


def _missing(targets: list[str], registry) -> list[str]:
    return [target for target in targets if target not in registry._patched]


def _known_rank() -> int | None:
    """This process's TP rank where SGLang's runtime context or $CUTOVER_RANK names one, else None."""
    rank = hooks._sglang_context_value("tp_rank")
    if type(rank) is int:
        return rank
    value = os.environ.get(hooks.RANK_ENV, "")
    return int(value) if value.isdigit() else None
