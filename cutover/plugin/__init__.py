"""The cutover plugin runtime: lives inside every SGLang tensor-parallel rank process (and the sandbox).

Standard library + torch + kernel_ext only. SGLang finds ``load_plugin`` through the entry point group
``sglang.srt.plugins`` and calls it early in every process; it registers hooks on ``TritonAttnBackend`` (and on
the ModelRunner method that builds the attention backends, so a rank on another backend heartbeats which) and
never raises: if anything is missing it logs one line and the rank stays on SGLang's Triton kernel, still
heartbeating with the reason where it can (``hooks.register_refusal``).
"""

from __future__ import annotations

import logging

log = logging.getLogger("cutover.plugin")


def load_plugin() -> None:
    """SGLang entry point: register the cutover hooks with SGLang's HookRegistry (never raises). If they cannot
    be registered, register what keeps every rank visible instead: a runtime that refuses custom and heartbeats
    the reason (``cutover stage`` then sees the ranks, ``cutover status`` says why, shadow and promote fail
    with it instead of finding no rank). Where SGLang then fails to apply the registered hooks, each rank says
    so in its heartbeat too (``binding.watch_binding``)."""
    try:
        from cutover.plugin.binding import watch_binding
        from cutover.plugin.hooks import register_hooks

        watch_binding(register_hooks())
    except Exception as exc:  # noqa: BLE001 - the plugin must never stop SGLang from starting
        problem = f"{type(exc).__name__}: {exc}"
        try:
            from cutover.plugin.hooks import register_refusal

            register_refusal(problem)
            visible = "each rank heartbeats this reason"
        except Exception as also:  # noqa: BLE001 - SGLang's log is then the only trace
            cause = f"{type(also).__name__}: {also}"
            visible = f"and no rank can heartbeat it ({'the same cause' if cause == problem else cause})"
        log.warning("cutover: plugin not loaded, every rank stays on Triton: %s; %s", problem, visible)
