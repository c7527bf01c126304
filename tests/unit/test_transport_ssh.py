"""SSHTransport against real sshd hosts: file operations, and host keys verified (never auto-added)."""

import json
import os
import signal
import time

import pytest

from cutover import config
from cutover import transport as transport_module
from cutover.config import Settings
from cutover.errors import HostError
from cutover.hoststate import HostState
from cutover.transport import SSHTransport

pytestmark = pytest.mark.integration


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no personal known_hosts leaks in
    return tmp_path


def host_of(ssh_hosts, name="host1", **extra):
    inventory = ssh_hosts.directory / f"inventory-{name}.yml"
    ssh_hosts.write_inventory(inventory, **extra)
    return next(h for h in config.load_inventory(str(inventory)).hosts if h.name == name)


def test_file_operations_over_sftp(ssh_hosts, home):
    host = host_of(ssh_hosts)
    state = ssh_hosts.host("host1").state_dir
    with SSHTransport(host) as transport:
        path = f"{state}/deep/control.json"
        assert transport.read_text(path) is None
        transport.write_atomic(path, '{"mode": "triton"}')
        assert transport.read_text(path) == '{"mode": "triton"}'
        assert [n for n in transport.listdir(f"{state}/deep")] == ["control.json"]  # no temp file left
        transport.append_line(f"{state}/journal.jsonl", '{"a": 1}')
        transport.append_line(f"{state}/journal.jsonl", '{"b": 2}')
        assert transport.read_tail(f"{state}/journal.jsonl", 9) == '{"b": 2}\n'
        assert transport.read_from(f"{state}/journal.jsonl", 9) == ('{"b": 2}\n', 18)
        assert transport.create_exclusive(f"{state}/lock", "mine") is True
        assert transport.create_exclusive(f"{state}/lock", "theirs") is False
        assert transport.read_text(f"{state}/lock") == "mine"
        assert transport.rename_if_exists(f"{state}/lock", f"{state}/lock.stale") is True
        assert transport.rename_if_exists(f"{state}/lock", f"{state}/lock.stale2") is False
        assert transport.readlink(f"{state}/journal.jsonl") is None
        assert (transport.size(f"{state}/journal.jsonl"), transport.size(f"{state}/missing")) == (18, None)
        assert not [n for n in transport.listdir(str(state)) if n.startswith(".tmp-")]  # create_exclusive's temp file


def test_control_writes_over_sftp_take_and_release_the_control_write_lock(ssh_hosts, home):
    """A stale lock on the host is broken over SFTP and journaled; after each write no lock file is left."""
    host = host_of(ssh_hosts)
    with SSHTransport(host) as transport:
        state = HostState(host, transport, Settings(operator="alice@test"))
        left = {"holder": "bob@test", "token": "bobs", "at": time.time() - 60, "pid": 1, "client": "x"}
        transport.write_atomic(host.paths.control_lock, json.dumps(left))
        armed = state.set_mode("shadow", reason="t", lease_s=60)
        assert state.renew_lease(armed.generation, ttl_s=120).generation == armed.generation
        assert [e["action"] for e in map(json.loads, transport.read_text(host.paths.journal).splitlines())] == [
            "control_lock_broken"]
        assert not [n for n in transport.listdir(host.paths.state_dir) if n.startswith("control.json.lock")]


def test_host_clock_is_read_over_ssh(ssh_hosts, home):
    """The test host is this machine: the measured offset is its true offset, 0, to within the round trip."""
    with SSHTransport(host_of(ssh_hosts)) as transport:
        first = transport.clock_offset()
        assert abs(first) < 0.5
        assert transport.clock_offset() == first  # measured once per session


def test_unknown_host_key_is_refused_with_the_fix(ssh_hosts, home):
    empty = home / "empty_known_hosts"
    empty.write_text("")
    host = host_of(ssh_hosts, cutover_known_hosts=str(empty))
    with pytest.raises(HostError) as caught:
        SSHTransport(host)
    assert caught.value.message.startswith(f"host host1 ({host.address}:{host.port}): its host key is not in "
                                           f"known_hosts ({empty}): refusing to connect")
    assert f"ssh-keyscan -p {host.port} {host.address} >> {empty}" in caught.value.hint


def test_changed_host_key_is_refused(ssh_hosts, home):
    host = host_of(ssh_hosts)
    ssh_hosts.replace_host_key(ssh_hosts.host("host1"))
    with pytest.raises(HostError) as caught:
        SSHTransport(host)
    assert "its host key does not match the one in known_hosts" in caught.value.message
    assert f"ssh-keygen -R '[{host.address}]:{host.port}'" in caught.value.hint


def test_unreachable_host_names_itself(ssh_hosts, home):
    host = host_of(ssh_hosts, name="host2")
    ssh_hosts.stop(ssh_hosts.host("host2"))
    with pytest.raises(HostError, match=rf"^host host2 \({host.address}:{host.port}\) is unreachable"):
        SSHTransport(host)


def test_a_dropped_session_is_a_host_error_on_every_operation(ssh_hosts, home):
    """HostError (which HostLink.call answers by reconnecting, rollback by its Ansible path), never a raw
    OSError; and a link read on a dead session is an error, not "no link"."""
    host = host_of(ssh_hosts)
    state = ssh_hosts.host("host1").state_dir
    with SSHTransport(host) as transport:
        transport.write_atomic(f"{state}/control.json", "{}")
        for pid in ssh_hosts.host("host1").session_pids():
            os.kill(pid, signal.SIGKILL)
        operations = {
            "write_atomic": lambda: transport.write_atomic(f"{state}/control.json", "{}"),
            "append_line": lambda: transport.append_line(f"{state}/journal.jsonl", "{}"),
            "create_exclusive": lambda: transport.create_exclusive(f"{state}/lock", "mine"),
            "rename_if_exists": lambda: transport.rename_if_exists(f"{state}/lock", f"{state}/lock.old"),
            "readlink": lambda: transport.readlink(f"{state}/current"),
            "read_text": lambda: transport.read_text(f"{state}/control.json"),
        }
        for name, operation in operations.items():
            with pytest.raises(HostError, match="host host1: cannot "):
                operation()


def test_a_stalled_host_fails_a_request_after_the_io_timeout(ssh_hosts, home, monkeypatch):
    monkeypatch.setattr(transport_module, "SFTP_IO_TIMEOUT_S", 1.0)
    host = host_of(ssh_hosts)
    state = ssh_hosts.host("host1").state_dir
    with SSHTransport(host) as transport:
        transport.write_atomic(f"{state}/control.json", "{}")
        sessions = ssh_hosts.host("host1").session_pids()
        for pid in sessions:
            os.kill(pid, signal.SIGSTOP)  # the host stops answering, as under a hung mount
        try:
            started = time.monotonic()
            with pytest.raises(HostError, match=r"cannot read .*control.json: no answer within 1 s"):
                transport.read_text(f"{state}/control.json")
            assert time.monotonic() - started < 10
        finally:
            for pid in sessions:
                os.kill(pid, signal.SIGCONT)


def test_non_utf8_bytes_in_control_json_read_as_a_corrupt_file(ssh_hosts, home):
    host = host_of(ssh_hosts)
    control = ssh_hosts.host("host1").state_dir / "control.json"
    control.parent.mkdir(parents=True, exist_ok=True)
    control.write_bytes(b'{"mode": "triton", "reason": "caf\xe9", "generation": "x\xff')
    with SSHTransport(host) as transport:
        state = HostState(host, transport, Settings(operator="alice@test"))
        with pytest.raises(HostError, match="control.json"):
            state.read_control()
        assert state.set_mode("triton", reason="rewrite").mode == "triton"  # a corrupt file is rewritten
