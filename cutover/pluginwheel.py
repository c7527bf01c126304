"""The plugin wheel and the release it serves must carry the same kernel_ext Python.

Stage accepts a release on the host's GPU with the release's own kernel_ext modules (python/kernel_ext/, on the
acceptance run's PYTHONPATH), but SGLang imports kernel_ext from the plugin wheel installed in its environment
and only loads the release's library. If the two differ, serving runs Python around the library that no
acceptance ran (a fix to the launch planning in kernel_ext/api.py, say, without a rebuilt wheel).
"""

from __future__ import annotations

import hashlib
import zipfile

from cutover.hostprotocol.acceptance import PYTHON_DIR

RELEASE_PREFIX = f"{PYTHON_DIR}/kernel_ext/"
WHEEL_PREFIX = "kernel_ext/"


def _module_name(path: str, prefix: str) -> str | None:
    """The file name of a top-level .py module of the package at `prefix` (what a release carries), else None."""
    rest = path[len(prefix):] if path.startswith(prefix) else ""
    return rest if rest.endswith(".py") and "/" not in rest else None


def wheel_modules(wheel: str) -> dict[str, str]:
    """kernel_ext's top-level modules in the wheel, with the sha256 of each."""
    with zipfile.ZipFile(wheel) as archive:
        return {module: hashlib.sha256(archive.read(path)).hexdigest() for path in archive.namelist()
                if (module := _module_name(path, WHEEL_PREFIX))}


def kernel_ext_mismatches(wheel: str, release_files: dict[str, str]) -> list[str]:
    """kernel_ext modules that differ between the wheel and the release manifest's files (missing on one side
    included), sorted; empty when they agree or the release carries no kernel_ext Python (its acceptance then
    imports the wheel's, as serving does)."""
    released = {module: sha for path, sha in release_files.items() if (module := _module_name(path, RELEASE_PREFIX))}
    if not released:
        return []
    in_wheel = wheel_modules(wheel)
    return sorted(name for name in released.keys() | in_wheel.keys() if released.get(name) != in_wheel.get(name))
