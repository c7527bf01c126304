"""The built kernel library staged as a release on a test host: what `cutover stage` leaves, so a rank loads the
kernel from `<cutover_root>/current` and reports that release (ranks run shadow and custom only for the release
they loaded)."""

from __future__ import annotations

import os
import shutil

from cutover.hostprotocol.hostlayout import HostPaths
from kernel_ext._lib import LIBRARY_NAME, default_library_path

GPU_RELEASE = "0123456789-gpu000"


def stage_built_library(paths: HostPaths) -> str:
    release = paths.release(GPU_RELEASE)
    os.makedirs(release)
    shutil.copyfile(default_library_path(), os.path.join(release, LIBRARY_NAME))
    os.symlink(release, paths.current)
    return GPU_RELEASE
