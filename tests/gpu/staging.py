"""The built kernel library staged as a release on a test host: what `cutover stage` leaves, so a rank loads the
kernel from `<cutover_root>/current` and reports that release (ranks run shadow and custom only for the release
they loaded)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from cutover.hostprotocol.hostlayout import HostPaths
from cutover.plugin.graphs import LOCAL_RELEASE, stage_library
from kernel_ext._lib import default_library_path

GPU_RELEASE = LOCAL_RELEASE


def stage_built_library(paths: HostPaths) -> str:
    return stage_library(paths, str(default_library_path()))


@contextlib.contextmanager
def gpu_sandbox(tmp_path: Path) -> Iterator[tuple[HostPaths, str]]:
    """`cutover sandbox up` on the GPU (one rank, four layers, real kernels and CUDA graphs) on a host whose
    current release is the built library; yields its paths and release id, and takes it down after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    release = stage_built_library(paths)
    up = subprocess.run([sys.executable, "-m", "cutover.sandbox", "up", "--state-dir", paths.state_dir,
                         "--cutover-root", paths.cutover_root, "--port", str(port), "--ranks", "1", "--device", "cuda",
                         "--layers", "4", "--step-interval", "0.01"], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield paths, release
    finally:
        subprocess.run([sys.executable, "-m", "cutover.sandbox", "down", "--state-dir", paths.state_dir], timeout=120)
