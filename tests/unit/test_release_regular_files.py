"""A release holds directories and regular files only: a symbolic link, a device, socket or pipe, or a file
hard-linked elsewhere is refused by name, on the operator's side (build, find_release, stage) and on the host
(hostlayout.release_tree_problem, which playbooks/library/cutover_state.py runs before switching)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cutover import release as rel
from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import release_tree_problem
from tests.unit.test_release import GOOD_ID, write_release

SECRET = "/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd"


def with_extra_file(path: Path, name: str, make) -> Path:
    """The release at `path` with `name` made by `make(target)` and listed in the manifest with its content's
    sha256 (so only the file's kind, not its digest, can give it away)."""
    target = path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    make(target)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256(Path(target).read_bytes() if not target.is_fifo() else b"").hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.mark.parametrize("make, problem", [
    (lambda target: os.symlink(SECRET, target), "python/kernel_ext/passwd is a symbolic link"),
    (lambda target: os.link(target.parent.parent.parent / "manifest.json", target), "has 2 hard links"),
    (lambda target: os.mkfifo(target), "is not a regular file"),
], ids=["symlink", "hard-link", "fifo"])
def test_find_release_refuses_a_release_that_is_not_only_regular_files(tmp_path, make, problem):
    path = with_extra_file(write_release(tmp_path / GOOD_ID, b"lib"), "python/kernel_ext/passwd", make)
    with pytest.raises(ConfigError, match=problem) as raised:
        rel.find_release(str(path), path.parent)
    assert raised.value.exit_code == 2 and GOOD_ID in raised.value.message
    assert problem in release_tree_problem(str(path))  # the host module's check names it too


def test_a_symlinked_directory_in_a_release_is_refused(tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib")
    os.symlink("/etc", path / "python")
    assert release_tree_problem(str(path)) == "python is a symbolic link (to /etc)"


def test_stage_of_a_release_with_a_symlink_exits_2_and_touches_nothing(invoke, local_inventory, tmp_path):
    path = with_extra_file(write_release(tmp_path / GOOD_ID, b"lib"), "python/kernel_ext/passwd",
                           lambda target: os.symlink(SECRET, target))
    result = invoke("stage", "-i", local_inventory, "--release", path)
    assert result.exit_code == 2, result.output
    assert "python/kernel_ext/passwd is a symbolic link" in result.stderr
    assert not (tmp_path / "root").exists() and not (tmp_path / "state").exists()


def test_a_release_of_regular_files_passes(tmp_path):
    assert release_tree_problem(str(write_release(tmp_path / GOOD_ID, b"lib"))) == ""
