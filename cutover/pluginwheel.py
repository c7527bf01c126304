"""The plugin wheel and the release it serves must carry the same kernel_ext Python.

Stage accepts a release on the host's GPU with the release's own kernel_ext modules (python/kernel_ext/, on the
acceptance run's PYTHONPATH), but SGLang imports kernel_ext from the plugin wheel installed in its environment
and only loads the release's library. If the two differ, serving runs Python around the library that no
acceptance ran (a fix to the launch planning in kernel_ext/api.py, say, without a rebuilt wheel).
"""

from __future__ import annotations

import hashlib
import zipfile

RELEASE_PREFIX = "python/kernel_ext/"
WHEEL_PREFIX = "kernel_ext/"


def _modules(names_to_sha: dict[str, str], prefix: str) -> dict[str, str]:
    """module file name -> sha256 for the package's top-level .py files (what a release carries)."""
    return {name[len(prefix):]: sha for name, sha in names_to_sha.items()
            if name.startswith(prefix) and name.endswith(".py") and "/" not in name[len(prefix):]}


def wheel_modules(wheel: str) -> dict[str, str]:
    """kernel_ext's top-level modules in the wheel, with the sha256 of each."""
    with zipfile.ZipFile(wheel) as archive:
        files = {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist()}
    return _modules(files, WHEEL_PREFIX)


def kernel_ext_mismatches(wheel: str, release_files: dict[str, str]) -> list[str]:
    """kernel_ext modules that differ between the wheel and the release manifest's files (missing on one side
    included), sorted; empty when they agree or the release carries no kernel_ext Python (its acceptance then
    imports the wheel's, as serving does)."""
    released = _modules(release_files, RELEASE_PREFIX)
    if not released:
        return []
    in_wheel = wheel_modules(wheel)
    return sorted(name for name in released.keys() | in_wheel.keys() if released.get(name) != in_wheel.get(name))
