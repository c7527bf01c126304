"""The host-side state module (playbooks/library/cutover_state.py) through the real rollback and stage playbooks on a
real sshd host, against a real rank: a CPU plugin runtime whose control thread polls the host's state dir.

Ranks apply strictly newer generations only, so whatever control.json holds, the next generation must beat every
generation a rank saw; an acknowledgement is the requested generation in the requested mode; and a rank that
stopped cleanly is not waited for.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cutover import ansible, config
from cutover.stage import stage_extravars
from cutover.hostprotocol.hostlayout import ControlRecord, Heartbeat, HostPaths, atomic_write_text
from cutover.release import load_release
from sshd import TestHost

pytestmark = pytest.mark.integration

ACK_TIMEOUT_S = 5


@pytest.fixture
def one_host(ssh_hosts_factory, tmp_path) -> tuple[TestHost, Path]:
    """One test host with one rank (tp_size 1), and its inventory."""
    hosts = ssh_hosts_factory(1)
    return hosts.hosts[0], hosts.write_inventory(tmp_path / "inventory.yml", tp_size=1)


RANK_RELEASE = "0123456789-abcdef"


@pytest.fixture
def start_rank():
    """start_rank(host): a real rank 0 (plugin runtime on the CPU, control thread running) on the host's state dir."""
    torch = pytest.importorskip("torch")
    from cutover.plugin.runtime import PluginRuntime

    started = []

    def start(host: TestHost) -> PluginRuntime:
        paths = host_paths(host)
        if not os.path.lexists(paths.current):  # the release the rank loads, as stage leaves it
            os.makedirs(paths.release(RANK_RELEASE), exist_ok=True)
            os.symlink(paths.release(RANK_RELEASE), paths.current)
        runtime = PluginRuntime(paths, 0, torch.device("cpu"), audit_interval_s=0.0)
        runtime.start()
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        runtime.stop()


def host_paths(host: TestHost) -> HostPaths:
    return HostPaths(cutover_root=str(host.cutover_root), state_dir=str(host.state_dir))


def write_control(host: TestHost, mode: str, generation: int) -> None:
    record = ControlRecord(mode=mode, generation=generation, set_by="bob@elsewhere", set_at=time.time(),
                           release_id=RANK_RELEASE, lease_expires_at=None if mode == "triton" else time.time() + 600)
    atomic_write_text(host_paths(host).control, record.to_json())


def heartbeat(host: TestHost) -> Heartbeat | None:
    path = host_paths(host).heartbeat(0)
    return Heartbeat.from_json(Path(path).read_text()) if os.path.exists(path) else None


def wait_for_rank(host: TestHost, generation: int, mode: str) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        beat = heartbeat(host)
        if beat and (beat.generation_seen, beat.mode_active) == (generation, mode):
            return
        time.sleep(0.05)
    raise AssertionError(f"rank 0 did not reach generation {generation} in {mode}: {heartbeat(host)}")


def run_playbook(name: str, inventory_path: Path, **extravars) -> ansible.HostOutcome:
    inventory = config.load_inventory(str(inventory_path))
    result = ansible.run_playbook(name, inventory, inventory.hosts,
                                  extravars={"cutover_operator": "alice@test", **extravars})
    return result.hosts[inventory.hosts[0].name]


def rollback(inventory_path: Path) -> ansible.HostOutcome:
    return run_playbook("rollback.yml", inventory_path, cutover_ack_timeout_s=ACK_TIMEOUT_S)


def test_rollback_after_control_json_was_lost_writes_above_the_generation_the_ranks_saw(one_host, start_rank):
    host, inventory = one_host
    write_control(host, "shadow", 7)
    start_rank(host)
    wait_for_rank(host, 7, "shadow")
    os.unlink(host_paths(host).control)

    outcome = rollback(inventory)

    assert outcome.ok, outcome.message
    assert (host.control()["mode"], host.control()["generation"]) == ("triton", 8)
    beat = heartbeat(host)
    assert (beat.generation_seen, beat.mode_active) == (8, "triton")


def test_a_triton_file_older_than_what_the_ranks_saw_does_not_pass_for_a_rollback(one_host, start_rank):
    host, inventory = one_host
    write_control(host, "shadow", 7)
    start_rank(host)
    wait_for_rank(host, 7, "shadow")
    write_control(host, "triton", 3)  # e.g. restored from a backup: the rank ignores it and stays in shadow

    outcome = rollback(inventory)

    assert outcome.ok, outcome.message
    assert (host.control()["mode"], host.control()["generation"]) == ("triton", 8)
    assert (heartbeat(host).generation_seen, heartbeat(host).mode_active) == (8, "triton")
    [entry] = [e for e in host.journal() if e["action"] == "rollback"]
    assert entry["already_triton"] is False and entry["generation"] == 8


def test_rollback_does_not_wait_for_a_rank_that_stopped_cleanly(one_host, start_rank):
    host, inventory = one_host
    write_control(host, "shadow", 4)
    runtime = start_rank(host)
    wait_for_rank(host, 4, "shadow")
    runtime.stop()  # its last heartbeat, fresh, says stopped
    assert heartbeat(host).counters["stopped"] == 1

    outcome = rollback(inventory)

    assert outcome.ok, outcome.message
    assert (host.control()["mode"], host.control()["generation"]) == ("triton", 5)


def test_rollback_waits_for_the_requested_mode_not_only_the_generation(one_host):
    host, inventory = one_host
    write_control(host, "triton", 5)
    beat = Heartbeat(rank=0, pid=4242, host="h", mode_active="custom", generation_seen=5, release_id="r",
                     kernel="cuda", written_at=time.time() + 60)  # stays fresh through the wait
    atomic_write_text(host_paths(host).heartbeat(0), beat.to_json())
    atomic_write_text(host_paths(host).phase, json.dumps({"phase": "shadowing", "release_id": "r"}))

    outcome = rollback(inventory)

    assert not outcome.ok
    assert outcome.message == (f"ranks did not acknowledge generation 5 in mode triton within {ACK_TIMEOUT_S} s "
                               "(rank 0: generation 5, active custom)")
    # control.json asks for triton either way: the failure is journaled and the phase says rolled_back
    [entry] = [e for e in host.journal() if e["action"] == "rollback"]
    assert (entry["generation"], entry["acknowledged"]) == (5, False)
    assert json.loads(Path(host_paths(host).phase).read_text())["phase"] == "rolled_back"


def test_stage_after_control_json_was_lost_writes_above_the_generation_a_dead_rank_saw(one_host, release):
    host, inventory = one_host
    beat = Heartbeat(rank=0, pid=4242, host="h", mode_active="custom", generation_seen=7, release_id="r",
                     kernel="cuda", written_at=time.time() - 3600)  # a serving process gone for an hour
    atomic_write_text(host_paths(host).heartbeat(0), beat.to_json())

    extravars = stage_extravars(load_release(release), config.Settings(operator="alice@test"), [])
    outcome = run_playbook("stage.yml", inventory, **extravars)

    assert outcome.ok, outcome.message
    assert (host.control()["mode"], host.control()["generation"]) == ("triton", 8)
    [entry] = [e for e in host.journal() if e["action"] == "control_initialized"]
    assert entry["generation"] == 8
    assert json.loads(Path(host_paths(host).phase).read_text())["phase"] == "staged"


def test_the_modules_rollback_breaks_a_control_write_lock_left_by_a_dead_writer(one_host):
    """A writer cut off mid-write leaves control.json.lock behind: the emergency path breaks it (it is older than
    controlwrite.STALE_S), journals whose it was, writes, and leaves no lock."""
    host, inventory = one_host
    write_control(host, "shadow", 6)
    left = {"holder": "bob@elsewhere", "token": "bobs", "at": time.time() - 60, "pid": 4242, "client": "bobs-laptop"}
    atomic_write_text(host_paths(host).control_lock, json.dumps(left))

    outcome = rollback(inventory)

    assert outcome.ok, outcome.message
    assert (host.control()["mode"], host.control()["generation"]) == ("triton", 7)
    [entry] = [e for e in host.journal() if e["action"] == "control_lock_broken"]
    assert entry["path"] == "ansible" and entry["previous_holder"].startswith("bob@elsewhere (pid 4242 on bobs-laptop")
    assert not [p for p in Path(host_paths(host).state_dir).iterdir() if p.name.startswith("control.json.lock")]


def test_the_modules_rollback_rewrites_a_corrupt_phase_file(one_host):
    """As the fast path does: a phase.json that is not a phase record is re-established as rolled_back."""
    host, inventory = one_host
    write_control(host, "shadow", 3)
    Path(host_paths(host).phase).write_text("{not json")

    outcome = rollback(inventory)

    assert outcome.ok, outcome.message
    phase = json.loads(Path(host_paths(host).phase).read_text())
    assert (phase["phase"], phase["set_by"]) == ("rolled_back", "alice@test")
