"""`rollback --to previous` / `--uninstall` asks to restart serving only where it may need it: which release
current will name after the switch, and whether serving must restart to load it."""

import json

import pytest

from cutover.hostprotocol.hostlayout import HostPaths
from cutover.rollback import HostRollback, needs_restart, release_after_switch
from cutover.transport import LocalTransport


@pytest.mark.parametrize("serving, serving_release, release_after, uninstall, expected", [
    (True, "a", "a", False, False),  # serving already runs the release current will name
    (True, "b", "a", False, True),  # it runs the outgoing one
    (True, None, "a", False, True),  # the ranks do not agree on one release
    (True, "a", "a", True, True),  # the plugin is loaded in the serving process
    (None, None, None, False, True),  # reached only through Ansible: not known
    (None, None, None, True, True),
    (False, None, "a", False, False),  # no serving process: its next start loads the change
    (False, None, None, True, False),
])
def test_needs_restart(serving, serving_release, release_after, uninstall, expected):
    line = HostRollback("host1", serving=serving, serving_release=serving_release, release_after=release_after)
    assert needs_restart(line, uninstall) is expected


@pytest.fixture
def paths(tmp_path) -> HostPaths:
    """Two releases, `b` current and `a` previous, as two stages leave them."""
    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    (tmp_path / "root").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "root" / "current").symlink_to("releases/b")
    (tmp_path / "root" / "previous").symlink_to("releases/a")
    return paths


def write_record(paths: HostPaths, text: str) -> None:
    with open(paths.rollback_record, "w") as handle:
        handle.write(text)


def test_release_after_switch_is_previous_when_no_switch_was_recorded(paths):
    assert release_after_switch(paths, LocalTransport("host1")) == "a"


def test_release_after_switch_is_current_when_an_earlier_run_switched_to_it(paths):
    write_record(paths, json.dumps({"from": "a", "to": "b", "from_target": "releases/a", "to_target": "releases/b"}))
    assert release_after_switch(paths, LocalTransport("host1")) == "b"


def test_release_after_switch_ignores_a_record_of_another_switch_or_a_corrupt_one(paths):
    write_record(paths, json.dumps({"from": "b", "to": "a", "from_target": "releases/b", "to_target": "releases/a"}))
    assert release_after_switch(paths, LocalTransport("host1")) == "a"
    write_record(paths, "{torn")
    assert release_after_switch(paths, LocalTransport("host1")) == "a"
