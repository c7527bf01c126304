"""A rank's local mode switch, shared by the plugin overhead benchmark and the GPU tests."""

from __future__ import annotations

import time

from cutover.hostprotocol.hostlayout import ControlRecord, atomic_write_text


def switch_mode(runtime, paths, mode: str, generation: int, lease_s: float = 3600.0) -> None:
    """Write a control record for `mode` and have the rank's control loop take it now; raise if it did not."""
    atomic_write_text(paths.control, ControlRecord(mode=mode, generation=generation,
                                                   lease_expires_at=time.time() + lease_s).to_json())
    runtime.control.poll_once()
    if runtime.control.mode_active != mode:
        raise RuntimeError(f"runtime did not switch to {mode}: {runtime.control.state.forced_reason}")
