"""Leases, locks and heartbeat ages on the host's clock, whatever the operator's clock says; and the lock's
races: a lock file appears whole, a takeover never drops a fresh lock, one operator's two processes exclude
each other."""

import json
import socket
import subprocess
import sys
import time

import pytest

from cutover import config
from cutover.cli.status import _clock_notes
from cutover.config import Settings
from cutover.hostprotocol.controlwrite import remove_if_unchanged
from cutover.errors import LockHeldError
from cutover.hoststate import HostState
from cutover.plugin.control import ControlState
from cutover.transport import LocalTransport

from .test_hoststate import make_state, write_heartbeat

HOUR = 3600.0


class SkewedHostTransport(LocalTransport):
    """This machine's files, standing for a host whose clock is `offset` seconds ahead of ours (a second clock
    cannot be made here without changing the system's)."""

    def __init__(self, host: str, offset: float):
        super().__init__(host)
        self.offset = offset

    def clock_offset(self) -> float:
        return self.offset


def skewed_state(local_inventory, offset: float, operator="alice@test") -> HostState:
    host = config.load_inventory(str(local_inventory)).hosts[0]
    return HostState(host, SkewedHostTransport(host.name, offset), Settings(operator=operator))


@pytest.mark.parametrize("offset", [HOUR, -HOUR])
def test_a_lease_runs_its_length_on_the_hosts_clock(local_inventory, offset):
    state = skewed_state(local_inventory, offset)
    record = state.set_mode("shadow", reason="t", lease_s=60, release_id="0123456789-abcdef")
    host_now = time.time() + offset
    plugin = ControlState()
    plugin.release_id = "0123456789-abcdef"
    assert plugin.observe(record, "", host_now).mode == "shadow"
    assert plugin.observe(record, "", host_now + 50).mode == "shadow"
    assert plugin.observe(record, "", host_now + 61).mode == "triton"

    renewed = state.renew_lease(record.generation, ttl_s=120)
    assert plugin.observe(renewed, "", host_now + 100).mode == "triton"  # the expiry stuck for this generation
    restarted = ControlState()  # a rank that reads the renewed record first
    restarted.release_id = "0123456789-abcdef"
    assert restarted.observe(renewed, "", host_now + 100).mode == "shadow"


def test_heartbeat_ages_are_on_the_hosts_clock(local_inventory):
    state = skewed_state(local_inventory, -HOUR)  # the host's clock an hour behind ours
    write_heartbeat(state, 0, generation=1, written_at=time.time() - HOUR - 2)
    view = state.ranks()[0]
    assert view.fresh and 1.5 < view.age_s < 5


def test_a_lock_expires_on_the_hosts_clock(local_inventory):
    alice = skewed_state(local_inventory, HOUR, "alice@test")
    alice.acquire_lock("shadow", ttl_s=300)
    bob = skewed_state(local_inventory, HOUR, "bob@test")
    with pytest.raises(LockHeldError, match="alice@test"):
        bob.acquire_lock("stage")
    late_bob = skewed_state(local_inventory, HOUR + 301, "bob@test")  # 301 s later on the host's clock
    assert late_bob.acquire_lock("stage").owner == "bob@test"


def test_status_names_a_host_whose_clock_is_off():
    notes = _clock_notes([{"host": "ct200", "clock_offset_s": -42.0}, {"host": "other", "clock_offset_s": 0.2}])
    assert notes == ["host ct200: its clock is 42.0 s behind this machine's; leases, locks and heartbeat ages "
                     "above are on the host's clock"]


def test_a_lock_file_appears_whole_and_leaves_no_temp_file(local_inventory, state_dir):
    state = make_state(local_inventory)
    assert state.transport.create_exclusive(state.paths.lock, "mine") is True
    assert state.transport.create_exclusive(state.paths.lock, "theirs") is False
    assert open(state.paths.lock).read() == "mine"
    assert not [p for p in state_dir.iterdir() if p.name.startswith(".tmp-")]


def test_a_takeover_puts_back_a_lock_created_since_it_looked(local_inventory):
    """Alice judged Bob's old lock expired; Carol took it over first: Alice must leave Carol's lock in place."""
    alice = make_state(local_inventory, "alice@test")
    expired = json.dumps({"owner": "bob@test", "action": "stage", "acquired_at": 0.0, "expires_at": 1.0})
    carols = json.dumps({"owner": "carol@test", "action": "stage", "acquired_at": time.time(),
                         "expires_at": time.time() + 300, "token": "carols"})
    alice.transport.write_atomic(alice.paths.lock, carols)
    assert remove_if_unchanged(alice.transport, alice.paths.lock, expired) is False
    assert alice.read_lock().token == "carols"
    alice.transport.write_atomic(alice.paths.lock, expired)
    assert remove_if_unchanged(alice.transport, alice.paths.lock, expired) is True and alice.read_lock() is None


def test_one_operator_cannot_take_its_own_lock_from_a_process_that_still_runs(local_inventory):
    state = make_state(local_inventory)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"owner": "alice@test", "action": "shadow", "acquired_at": time.time(),
                "expires_at": time.time() + 300, "pid": holder.pid, "client": socket.gethostname()}
        state.transport.write_atomic(state.paths.lock, json.dumps(lock))
        with pytest.raises(LockHeldError, match=f"alice@test \\(shadow, .*pid {holder.pid} on "):
            state.acquire_lock("promote")
    finally:
        holder.kill()
        holder.wait()
    assert state.acquire_lock("promote").action == "promote"  # its process is gone: a re-run may take it


def test_one_operators_lock_from_another_machine_is_not_taken_before_it_expires(local_inventory):
    state = make_state(local_inventory)
    lock = {"owner": "alice@test", "action": "shadow", "acquired_at": time.time(),
            "expires_at": time.time() + 300, "pid": 1, "client": "another-workstation"}
    state.transport.write_atomic(state.paths.lock, json.dumps(lock))
    with pytest.raises(LockHeldError, match="on another-workstation"):
        state.acquire_lock("stage")
