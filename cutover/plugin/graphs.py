"""A rank's local mode switch and the release it serves, shared by the plugin overhead benchmark and the GPU tests."""

from __future__ import annotations

import os
import shutil
import time

from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths, atomic_write_text
from kernel_ext._lib import LIBRARY_NAME

LOCAL_RELEASE = "0123456789-local0"  # the release id a local benchmark or test serves its built library as


def stage_library(paths: HostPaths, library: str) -> str:
    """`library` staged as release LOCAL_RELEASE, current under `paths.cutover_root`, as `cutover stage` leaves a
    host: a rank started there loads it, and runs shadow and custom only for it."""
    release = paths.release(LOCAL_RELEASE)
    os.makedirs(release)
    shutil.copyfile(library, os.path.join(release, LIBRARY_NAME))
    os.symlink(release, paths.current)
    return LOCAL_RELEASE


def switch_mode(runtime, paths, mode: str, generation: int, lease_s: float = 600.0) -> None:
    """Write a control record for `mode`, armed as `cutover shadow` and `cutover promote` arm one (for the release
    the rank loaded), and have the rank's control loop take it now; raise if it did not."""
    record = ControlRecord(mode=mode, generation=generation, release_id=runtime.release_id, set_by="local switch",
                           set_at=time.time(), lease_expires_at=time.time() + lease_s)
    atomic_write_text(paths.control, record.to_json())
    runtime.control.poll_once()
    if runtime.control.mode_active != mode:
        raise RuntimeError(f"runtime did not switch to {mode}: {runtime.control.state.forced_reason}")
