"""`cutover rollback` repairs any state a host can be left in: whatever control.json, the lock, the phase file, the
heartbeats and the journal hold, it ends with control.json asking for triton (or explains), and `status` reads
that state without crashing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cutover.config import Settings, load_inventory
from cutover.hostprotocol.hostlayout import MAX_GENERATION, ControlRecord, Heartbeat, HostPaths, atomic_write_text
from cutover.rollback import rollback_hosts
from tests.unit.conftest import OPERATOR, write_inventory

DEEP = "[" * 50_000 + "]" * 50_000


def paths_of(tmp_path: Path) -> HostPaths:
    return HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))


def put(path: str, content: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(content)


def control_of(paths: HostPaths) -> ControlRecord:
    with open(paths.control, "rb") as handle:
        return ControlRecord.from_json(handle.read())


@pytest.mark.parametrize("content", [DEEP.encode(), b'{"mode": "custom", "generation": ' + b"7" * 4300 + b"}",
                                     b'{"mode": "custom", "generation": ' + b"7" * 4299 + b"}",
                                     b"\xff\xfe\x00garbage", b'{"mode": "custom", "generation": 1e999}'],
                         ids=["deep-nesting", "4300-digit-generation", "4299-digit-generation", "non-utf8", "inf"])
def test_rollback_rewrites_a_damaged_control_file_in_mode_triton(invoke, local_inventory, tmp_path, content):
    paths = paths_of(tmp_path)
    put(paths.control, content)
    result = invoke("rollback", "-i", local_inventory)
    assert result.exit_code == 0, result.output
    record = control_of(paths)
    assert record.mode == "triton" and 1 <= record.generation <= MAX_GENERATION
    status = invoke("status", "-i", local_inventory, "--json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["hosts"][0]["requested_mode"] == "triton"


@pytest.mark.parametrize("lock", [{"owner": "bob", "action": "shadow", "acquired_at": 1.0, "expires_at": "soon"},
                                  {"owner": ["bob"], "action": "shadow", "acquired_at": 1.0, "expires_at": 1e300},
                                  "not a lock", {"owner": "bob"}],
                         ids=["expires-soon", "owner-list", "text", "partial"])
def test_rollback_and_status_break_a_lock_they_cannot_parse(invoke, local_inventory, tmp_path, lock):
    paths = paths_of(tmp_path)
    put(paths.lock, json.dumps(lock).encode())
    status = invoke("status", "-i", local_inventory, "--json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["hosts"][0]["lock"]["owner"] == "<unreadable lock file>"
    result = invoke("rollback", "-i", local_inventory)
    assert result.exit_code == 0, result.output
    assert control_of(paths).mode == "triton"
    assert not os.path.exists(paths.lock)  # broken, taken for the flip, released
    with open(paths.journal) as handle:
        actions = [json.loads(line)["action"] for line in handle]
    assert "lock_takeover" in actions and "rollback" in actions


def test_rollback_resets_the_generation_when_a_rank_saw_the_largest_one(invoke, local_inventory, tmp_path):
    """A rank that saw MAX_GENERATION would ignore every generation after it: rollback writes a triton record that
    resets the counter (ranks take it: tests/plugin/test_control_failsafe.py), and later writers count on from it."""
    paths = paths_of(tmp_path)
    beat = Heartbeat(rank=0, pid=1, host="h", mode_active="custom", generation_seen=MAX_GENERATION, release_id="r",
                     kernel="cuda", written_at=time.time() - 3600)
    atomic_write_text(paths.heartbeat(0), beat.to_json())
    result = invoke("rollback", "-i", local_inventory)
    assert result.exit_code == 0, result.output
    record = control_of(paths)
    assert (record.mode, record.generation, record.resets) == ("triton", 1, True)


def test_status_reads_damaged_heartbeats_journal_and_stats(invoke, local_inventory, tmp_path):
    paths = paths_of(tmp_path)
    put(paths.heartbeat(0), json.dumps({"rank": 0, "pid": 1, "host": "h", "mode_active": "shadow",
                                        "generation_seen": "9", "release_id": None, "kernel": "cuda",
                                        "written_at": "now"}).encode())
    put(paths.heartbeat(1), DEEP.encode())
    put(paths.journal, DEEP.encode() + b"\n" + b"\xff\n")
    put(paths.stats_file(0), json.dumps({"layers": {"0": {"calls": "many", "rel_l2_max": None}, "1": 3}}).encode())
    put(paths.phase, b'{"phase": 7}')
    status = invoke("status", "-i", local_inventory, "--json")
    assert status.exit_code == 0, status.output
    host = json.loads(status.stdout)["hosts"][0]
    assert [rank["mode_active"] for rank in host["ranks"]] == [None, None]
    assert host["phase_error"] and host["last_journal"] is None


STATE_BYTES = st.one_of(
    st.binary(max_size=200),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
                           st.floats(), st.text(max_size=10)),
                 lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner,
                                                                                      max_size=4)),
                 max_leaves=12).map(lambda value: json.dumps(value).encode()),
    st.integers(min_value=1, max_value=40_000).map(lambda depth: b"{\"a\":" * depth + b"1" + b"}" * depth),
)
FILES = ("control", "lock", "phase", "heartbeat", "journal")


@given(contents=st.fixed_dictionaries({}, optional={name: STATE_BYTES for name in FILES}))
def test_rollback_ends_on_triton_whatever_the_state_files_hold(tmp_path_factory, contents):
    root = tmp_path_factory.mktemp("host")
    inventory = load_inventory(str(write_inventory(root / "inventory.yml", root)))
    paths = paths_of(root)
    targets = {"control": paths.control, "lock": paths.lock, "phase": paths.phase, "heartbeat": paths.heartbeat(0),
               "journal": paths.journal}
    for name, content in contents.items():
        put(targets[name], content)
    [line] = rollback_hosts(inventory, inventory.hosts, Settings(operator=OPERATOR, ack_timeout_s=0.5))
    assert line.ok and line.path == "fast", line.messages
    assert control_of(paths).mode == "triton"


def test_only_a_generation_past_the_maximum_resets(local_inventory, tmp_path):
    """A host whose ranks saw no control file yet (generation_seen -1) arms at generation 1 without a reset; past
    the maximum only triton can be written, and any other mode is refused until a rollback resets."""
    from cutover.errors import HostError
    from cutover.hoststate import HostState
    from cutover.transport import open_transport

    paths = paths_of(tmp_path)
    host = load_inventory(str(local_inventory)).hosts[0]
    beat = Heartbeat(rank=0, pid=1, host="h", mode_active="triton", generation_seen=-1, release_id="r",
                     kernel="cuda", written_at=time.time() - 3600)
    atomic_write_text(paths.heartbeat(0), beat.to_json())
    with open_transport(host) as transport:
        state = HostState(host, transport, Settings(operator=OPERATOR))
        record = state.set_mode("shadow", reason="t", lease_s=30, release_id="r")
        assert (record.generation, record.resets) == (1, False)
        atomic_write_text(paths.heartbeat(0), Heartbeat(**{**beat.__dict__, "generation_seen": MAX_GENERATION})
                          .to_json())
        with pytest.raises(HostError, match="only a rollback does"):
            state.set_mode("shadow", reason="t", lease_s=30, release_id="r")
        assert (state.set_mode("triton", reason="t").generation, control_of(paths).resets) == (1, True)
