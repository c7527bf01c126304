"""The control write lock (cutover/hostprotocol/controlwrite.py): two writers of control.json never interleave their
read-modify-writes, so no write is lost; a lock left by a dead writer is broken and journaled; a writer that lost
the lock writes nothing.

The interleavings are forced, not hoped for: the first writer stops right after it read control.json and goes on
only once the second writer has found the lock held (or after 2 s: then the second writer took no lock at all,
and the lost write below shows it)."""

import json
import os
import threading
import time
from pathlib import Path

import pytest

from cutover import config
from cutover.hostprotocol import controlwrite
from cutover.config import Settings
from cutover.hostprotocol.controlwrite import ControlLockBusy, ControlWriteLock, LocalFiles
from cutover.errors import HostError
from cutover.hostprotocol.hostlayout import ControlRecord
from cutover.hoststate import HostState
from cutover.transport import LocalTransport

from .conftest import read_journal


class PausingTransport(LocalTransport):
    """Local files; the thread named `pause_in` stops after each read of control.json until `resume` is set.
    Every failed lock creation sets `lock_found_held`."""

    def __init__(self, host: str, control_path: str, lock_path: str):
        super().__init__(host)
        self.control_path, self.lock_path = control_path, lock_path
        self.pause_in = ""
        self.read_done, self.resume, self.lock_found_held = threading.Event(), threading.Event(), threading.Event()

    def read_text(self, path: str) -> str | None:
        text = super().read_text(path)
        if path == self.control_path and threading.current_thread().name == self.pause_in:
            self.read_done.set()
            self.resume.wait(timeout=2)
        return text

    def create_exclusive(self, path: str, text: str) -> bool:
        created = super().create_exclusive(path, text)
        if path == self.lock_path and not created:
            self.lock_found_held.set()
            self.resume.set()
        return created


def pausing_state(local_inventory, operator: str, transport: PausingTransport | None = None) -> HostState:
    host = config.load_inventory(str(local_inventory)).hosts[0]
    transport = transport or PausingTransport(host.name, host.paths.control, host.paths.control_lock)
    return HostState(host, transport, Settings(operator=operator))


def control(state: HostState) -> ControlRecord:
    return ControlRecord.from_json(open(state.paths.control).read())


FIRST_WRITERS = {  # name: (the write, how many generations it adds)
    "a lease renewal": (lambda state, armed: state.renew_lease(armed.generation, ttl_s=600), 0),
    "a re-arm": (lambda state, armed: state.set_mode("shadow", reason="re-arm", lease_s=600), 1),
}


@pytest.mark.parametrize("first", sorted(FIRST_WRITERS))
def test_a_rollback_during_another_write_is_never_lost(local_inventory, first):
    """Without the lock the first writer, resumed after the rollback wrote, would put its own record back (a
    renewal: generation N in shadow again; a re-arm: the same generation N+1 as the rollback's, which a rank
    that applied the re-arm ignores)."""
    alice = pausing_state(local_inventory, "alice@test")
    armed = alice.set_mode("shadow", reason="shadow", lease_s=60)
    alice.transport.pause_in = "alice"
    write, generations_added = FIRST_WRITERS[first]
    writer = threading.Thread(target=write, args=(alice, armed), name="alice")
    writer.start()
    assert alice.transport.read_done.wait(timeout=5)

    bob = pausing_state(local_inventory, "bob@test", alice.transport)
    rolled_back = bob.set_mode("triton", reason="emergency")
    writer.join(timeout=10)

    assert alice.transport.lock_found_held.is_set()  # the rollback waited for the first writer
    final = control(bob)
    assert (final.mode, final.generation, final.set_by) == ("triton", rolled_back.generation, "bob@test")
    assert rolled_back.generation == armed.generation + generations_added + 1
    assert not lock_files(bob)


def lock_files(state: HostState) -> list[str]:
    """The control write lock and anything moved aside from it: none once every writer is done."""
    return [name for name in os.listdir(state.paths.state_dir) if name.startswith("control.json.lock")]


def test_a_stale_lock_is_broken_and_journaled(local_inventory):
    state = pausing_state(local_inventory, "alice@test")
    left = {"holder": "bob@test", "token": "bobs", "at": time.time() - 2 * controlwrite.STALE_S, "pid": 4242,
            "client": "bobs-laptop"}
    state.transport.write_atomic(state.paths.control_lock, json.dumps(left))

    record = state.set_mode("triton", reason="rollback")

    assert control(state).generation == record.generation
    [entry] = [e for e in read_journal(Path(state.paths.state_dir)) if e["action"] == "control_lock_broken"]
    assert entry["previous_holder"].startswith("bob@test (pid 4242 on bobs-laptop, ")
    assert not lock_files(state)


def test_a_lock_from_a_clock_stepped_back_does_not_block(local_inventory):
    state = pausing_state(local_inventory, "alice@test")
    future = {"holder": "bob@test", "token": "bobs", "at": time.time() + 3600}
    state.transport.write_atomic(state.paths.control_lock, json.dumps(future))
    assert state.set_mode("triton", reason="rollback").mode == "triton"


def test_a_live_holder_past_the_wait_leaves_control_json_unchanged(local_inventory, monkeypatch):
    monkeypatch.setattr(controlwrite, "WAIT_S", 0.3)
    state = pausing_state(local_inventory, "alice@test")
    before = state.set_mode("shadow", reason="t", lease_s=60)
    live = {"holder": "bob@test", "token": "bobs", "at": time.time(), "pid": 4242, "client": "bobs-laptop"}
    state.transport.write_atomic(state.paths.control_lock, json.dumps(live))

    with pytest.raises(HostError, match="stayed held by bob@test .*control.json was not changed") as err:
        state.set_mode("triton", reason="rollback")

    assert "run the command again" in err.value.hint
    assert control(state) == before
    assert json.loads(open(state.paths.control_lock).read())["token"] == "bobs"  # a live lock is left alone


def test_a_writer_that_lost_the_lock_writes_nothing(tmp_path):
    files, path = LocalFiles(), str(tmp_path / "control.json.lock")
    with ControlWriteLock(files, path, "alice@test", time.time) as lock:
        files.remove(path)
        assert files.create_exclusive(path, json.dumps({"holder": "bob@test", "at": time.time()}))
        with pytest.raises(ControlLockBusy, match="taken over while we held it \\(now held by bob@test"):
            lock.confirm()
    assert json.loads(open(path).read())["holder"] == "bob@test"  # our release left bob's lock in place
