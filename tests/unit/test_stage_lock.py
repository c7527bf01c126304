"""The stage lock is renewed while a playbook runs, so a long GPU check or restart cannot outlast it."""

import hashlib
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cutover import ansible, config
from cutover import stage as stage_service
from cutover.config import Settings
from cutover.stage import _locks_kept
from cutover.errors import LockHeldError
from cutover.release import Release

from .test_hoststate import make_state


def test_locks_are_renewed_while_the_body_runs(local_inventory):
    state = make_state(local_inventory)
    lock = state.acquire_lock("stage", ttl_s=0.3)
    first_expiry = lock.expires_at
    said = []
    with _locks_kept({"local": state}, {"local": lock}, 0.3, said.append):
        time.sleep(0.8)  # without renewals the lock would have expired twice over
        assert state.read_lock().expires_at > first_expiry + 0.3
        assert not state.read_lock().expired(state.now())
    assert said == []


def test_a_lost_lock_is_reported_when_the_body_ends(local_inventory):
    state = make_state(local_inventory)
    lock = state.acquire_lock("stage", ttl_s=0.3)
    state.release_lock(lock)
    state.transport.create_exclusive(state.paths.lock, '{"owner": "bob@test", "action": "shadow", '
                                                       '"acquired_at": 0, "expires_at": 9e9, "token": "bobs"}')
    said = []
    with _locks_kept({"local": state}, {"local": lock}, 0.3, said.append):
        time.sleep(0.25)
        assert said == []  # reported when the playbook ends, not in the middle of its output
    assert said and said[0].startswith("local: the stage lock could not be renewed: host local: our lock was lost")
    assert state.read_lock().token == "bobs"  # the other operator's lock is left alone


# -- through stage_release, with the playbooks replaced by a recorder ----------------------------------------

BOBS_LOCK = ('{"owner": "bob@test", "action": "shadow", "acquired_at": 0, "expires_at": 9e9, "token": "bobs", '
             '"pid": 1, "machine": "elsewhere"}')
RELEASE_ID = "0123456789-abcdef"  # of the form `cutover build` makes
LIBRARY = b"\x7fELF"
RELEASE = Release(RELEASE_ID, Path("/nonexistent", RELEASE_ID), {
    "release_id": RELEASE_ID, "files": {"lib.so": hashlib.sha256(LIBRARY).hexdigest()}, "library": "lib.so",
    "archs": ["sm_120"], "min_driver": "580.65.06"})


def take_over_lock(state) -> None:
    """Another operator's lock replaces ours, as after ours expired and they took it."""
    state.transport.write_atomic(state.paths.lock, BOBS_LOCK)


@pytest.fixture
def playbooks(monkeypatch) -> SimpleNamespace:
    """Replace the playbooks: each run succeeds on every host and is recorded (`ran`: names, `extravars`: by
    name); `before[name]()` runs first."""
    seen = SimpleNamespace(ran=[], extravars={}, before={})

    def run(name, inventory, hosts, *, extravars=None, **_):
        seen.ran.append(name)
        seen.extravars[name] = extravars
        seen.before.get(name, lambda: None)()
        return ansible.PlaybookResult(name, "successful", 0, {h.name: ansible.HostOutcome(h.name) for h in hosts})
    monkeypatch.setattr(stage_service.ansible, "run_playbook", run)
    return seen


def local_release(tmp_path: Path) -> Path:
    """RELEASE on the operator's disk (its one file, its manifest), for the CLI."""
    release = tmp_path / RELEASE_ID
    release.mkdir()
    (release / "lib.so").write_bytes(LIBRARY)
    (release / "manifest.json").write_text(json.dumps(RELEASE.manifest))
    return release


def stage(local_inventory, confirm_restart=lambda reasons: False, lock_ttl_s=60.0):
    inventory = config.load_inventory(str(local_inventory))
    return stage_service.stage_release(inventory, inventory.hosts, Settings(operator="alice@test", lock_ttl_s=lock_ttl_s),
                                RELEASE, check=False, confirm_restart=confirm_restart, say=lambda text: None)


def test_a_lock_taken_over_while_the_restart_prompt_waits_stops_the_stage_before_any_playbook(local_inventory,
                                                                                              playbooks):
    state = make_state(local_inventory)

    def prompt(reasons):  # the operator answers after their lock expired and bob took the host
        take_over_lock(state)
        return True

    with pytest.raises(LockHeldError, match=r"host local: our lock was lost \(now held by bob@test"):
        stage(local_inventory, confirm_restart=prompt)
    assert playbooks.ran == []
    assert state.read_lock().token == "bobs"  # bob's lock is left alone


def test_a_lock_lost_during_preflight_fails_the_stage_before_the_stage_playbook(local_inventory, playbooks):
    playbooks.before["preflight.yml"] = lambda: (take_over_lock(make_state(local_inventory)), time.sleep(0.5))

    with pytest.raises(LockHeldError, match=r"local: the stage lock could not be renewed: .*bob@test.*"
                                            r"; nothing was changed"):
        stage(local_inventory, lock_ttl_s=0.3)
    assert playbooks.ran == ["preflight.yml"]


def test_a_lock_lost_during_the_stage_playbook_fails_the_command(invoke, local_inventory, playbooks, tmp_path):
    playbooks.before["stage.yml"] = lambda: (take_over_lock(make_state(local_inventory)), time.sleep(0.5))
    release = local_release(tmp_path)
    settings = tmp_path / "config.yml"
    settings.write_text("lock_ttl_s: 0.3\n")

    result = invoke("stage", "--config", settings, "-i", local_inventory, "--release", release)

    assert result.exit_code == 5, result.stderr
    assert result.stderr.startswith("error: the stage ran, but its lock was lost: local: the stage lock could not "
                                    "be renewed: host local: our lock was lost (now held by bob@test")
