"""Stage restarts serving where it does not run the release, and where it installs another plugin wheel: a
reinstall under a live process does not reach its ranks (stage._hosts_to_restart)."""

import hashlib
import json
import time
from pathlib import Path

from cutover.stage import PLUGIN_CHANGED, RELEASE_NOT_LOADED, _hosts_to_restart, describe_restarts
from cutover.hostprotocol.hostlayout import Heartbeat

from .conftest import write_inventory
from .test_hoststate import make_state
from .test_stage_lock import RELEASE_ID, local_release, playbooks  # noqa: F401 (a fixture)


def plugin_host(tmp_path: Path, installed: bytes | None, serving: bool, manages_plugin: bool = True):
    """The local host with a wheel to install (b"wheel v2"), the marker of `installed` (the wheel stage installed
    last), and with `serving` both ranks heartbeating with RELEASE_ID."""
    wheel = tmp_path / "cutover-2-py3-none-any.whl"
    wheel.write_bytes(b"wheel v2")
    inventory = write_inventory(tmp_path / "inventory.yml", tmp_path, cutover_install_plugin=manages_plugin,
                                cutover_plugin_wheel=str(wheel))
    state = make_state(inventory)
    if installed is not None:  # what stage.yml writes: the copy module's checksum, the sha1 of the wheel
        state.transport.write_atomic(str(tmp_path / "root" / "wheels" / "installed.sha1"),
                                     hashlib.sha1(installed).hexdigest() + "\n")
    if serving:
        for rank in (0, 1):
            beat = Heartbeat(rank=rank, pid=1, host="local", mode_active="triton", generation_seen=0,
                             release_id=RELEASE_ID, kernel="reference (no GPU)", written_at=time.time())
            state.transport.write_atomic(state.paths.heartbeat(rank), beat.to_json())
    return inventory, state


def test_a_changed_plugin_wheel_restarts_a_host_that_runs_the_release(tmp_path):
    _, state = plugin_host(tmp_path, installed=b"wheel v1", serving=True)
    assert _hosts_to_restart({"local": state}, RELEASE_ID) == {"local": [PLUGIN_CHANGED]}


def test_the_installed_wheel_on_a_host_that_runs_the_release_needs_no_restart(tmp_path):
    _, state = plugin_host(tmp_path, installed=b"wheel v2", serving=True)
    assert _hosts_to_restart({"local": state}, RELEASE_ID) == {}


def test_a_first_install_and_another_release_are_both_named(tmp_path):
    _, state = plugin_host(tmp_path, installed=None, serving=False)
    assert _hosts_to_restart({"local": state}, RELEASE_ID) == {"local": [RELEASE_NOT_LOADED, PLUGIN_CHANGED]}


def test_the_prompt_names_each_host_with_its_reasons():
    assert describe_restarts({"host1": [RELEASE_NOT_LOADED, PLUGIN_CHANGED], "host2": [PLUGIN_CHANGED]}) == (
        "host1 (release not loaded, plugin wheel changed), host2 (plugin wheel changed)")


def test_a_host_that_does_not_manage_the_plugin_ignores_its_marker(tmp_path):
    _, state = plugin_host(tmp_path, installed=b"wheel v1", serving=True, manages_plugin=False)
    assert _hosts_to_restart({"local": state}, RELEASE_ID) == {}


def test_a_declined_restart_for_a_new_wheel_says_serving_keeps_the_old_plugin(invoke, tmp_path, playbooks):
    inventory, _ = plugin_host(tmp_path, installed=b"wheel v1", serving=True)
    release = local_release(tmp_path)

    declined = invoke("stage", "-i", inventory, "--release", release)  # not a terminal: the prompt says no

    assert declined.exit_code == 0, declined.stderr
    assert ("not restarted (no --yes): serving on local keeps the old plugin until restarted. `cutover stage --yes` "
            "restarts it") in " ".join(declined.stdout.split())
    assert "does not run release" not in declined.stdout
    assert playbooks.extravars["stage.yml"]["cutover_restart_hosts"] == []

    agreed = invoke("stage", "-i", inventory, "--release", release, "--yes", "--json")

    assert agreed.exit_code == 0, agreed.stderr
    assert json.loads(agreed.stdout)["restart_reasons"] == {"local": [PLUGIN_CHANGED]}
    assert playbooks.extravars["stage.yml"]["cutover_restart_hosts"] == ["local"]
