"""The cutover plugin runtime: lives inside every SGLang tensor-parallel rank process (and the sandbox).

Standard library + torch + kernel_ext only. SGLang finds ``load_plugin`` through the entry point group
``sglang.srt.plugins`` and calls it early in every process; it registers hooks on ``TritonAttnBackend`` and
never raises: if anything is missing it logs one line and the rank stays on SGLang's Triton kernel.
"""

from __future__ import annotations

import logging

log = logging.getLogger("cutover.plugin")


def load_plugin() -> None:
    """SGLang entry point: register the cutover hooks with SGLang's HookRegistry (never raises)."""
    try:
        from cutover.plugin.hooks import register_hooks

        register_hooks()
    except Exception as exc:  # noqa: BLE001 - the plugin must never stop SGLang from starting
        log.warning("cutover: plugin not loaded, every rank stays on Triton: %s: %s", type(exc).__name__, exc)
