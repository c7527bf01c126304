"""The built kernel library staged as a release on a test host: what `cutover stage` leaves, so a rank loads the
kernel from `<cutover_root>/current` and reports that release (ranks run shadow and custom only for the release
they loaded)."""

from __future__ import annotations

from cutover.hostprotocol.hostlayout import HostPaths
from cutover.plugin.graphs import LOCAL_RELEASE, stage_library
from kernel_ext._lib import default_library_path

GPU_RELEASE = LOCAL_RELEASE


def stage_built_library(paths: HostPaths) -> str:
    return stage_library(paths, str(default_library_path()))
