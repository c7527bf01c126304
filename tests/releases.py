"""Test releases derived from the built one (the `release` fixture) without another compile."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def second_release(release: Path, tmp_path: Path) -> Path:
    """The same built files under another release id (as a rebuild with other sources would give): an id of the
    form `cutover build` makes (its last 6 hex digits changed), which names its directory as stage requires."""
    suffix = "bbbbbb" if not release.name.endswith("bbbbbb") else "cccccc"
    other = tmp_path / "releases" / f"{release.name[:-6]}{suffix}"
    shutil.copytree(release, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["release_id"] = other.name
    (other / "manifest.json").write_text(json.dumps(manifest))
    return other
