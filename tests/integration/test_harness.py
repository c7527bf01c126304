"""Self-test of the real-sshd test hosts: strict host-key checking works for paramiko and for Ansible."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import ansible_runner
import paramiko
import pytest

from sshd import TestHost, TestHosts

pytestmark = pytest.mark.integration


def _connect(hosts: TestHosts, host: TestHost) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(hosts.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.address,
        port=host.port,
        username=hosts.user,
        key_filename=str(hosts.client_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    return client


def _run(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, _ = client.exec_command(command, timeout=10)
    output = stdout.read().decode()
    assert stdout.channel.recv_exit_status() == 0
    return output


def _ansible_ping(hosts: TestHosts, tmp_path: Path) -> ansible_runner.Runner:
    """Ad-hoc ping. ansible-runner turns host-key checking OFF unless told: cutover must pass it too."""
    venv_bin = os.path.dirname(sys.executable)
    return ansible_runner.run(
        private_data_dir=str(tmp_path),
        inventory=str(hosts.inventory),
        host_pattern="serving",
        module="ping",
        quiet=True,
        envvars={"PATH": f"{venv_bin}:{os.environ.get('PATH', '')}", "ANSIBLE_HOST_KEY_CHECKING": "True"},
    )


def test_hosts_are_distinct_and_listen_on_their_own_address(ssh_hosts: TestHosts) -> None:
    assert [h.address for h in ssh_hosts.hosts] == ["127.0.0.2", "127.0.0.3"]
    assert len({h.state_dir for h in ssh_hosts.hosts}) == 2
    assert len({h.public_host_key() for h in ssh_hosts.hosts}) == 2
    for host in ssh_hosts.hosts:
        with socket.create_connection((host.address, host.port), timeout=5) as sock:
            assert sock.recv(64).startswith(b"SSH-2.0-")


def test_paramiko_connects_with_reject_policy(ssh_hosts: TestHosts) -> None:
    for host in ssh_hosts.hosts:
        client = _connect(ssh_hosts, host)
        try:
            assert _run(client, f"ls -d {host.state_dir}").strip() == str(host.state_dir)
        finally:
            client.close()


def test_inventory_carries_cutover_vars(ssh_hosts: TestHosts) -> None:
    import yaml

    data = yaml.safe_load(ssh_hosts.inventory.read_text())
    host_vars = data["all"]["children"]["serving"]["hosts"]
    assert sorted(host_vars) == ["host1", "host2"]
    for host in ssh_hosts.hosts:
        assert host_vars[host.name]["cutover_state_dir"] == str(host.state_dir)
        assert host_vars[host.name]["ansible_port"] == host.port
        assert host_vars[host.name]["ansible_python_interpreter"] == sys.executable


def test_ansible_pings_every_host(ssh_hosts: TestHosts, tmp_path: Path) -> None:
    runner = _ansible_ping(ssh_hosts, tmp_path)
    assert runner.status == "successful", runner.stdout.read()
    assert runner.rc == 0
    assert sorted(runner.stats["ok"]) == ["host1", "host2"]
    assert not runner.stats["dark"] and not runner.stats["failures"]


def test_host_key_mismatch_is_refused_by_paramiko_and_ansible(ssh_hosts: TestHosts, tmp_path: Path) -> None:
    host1 = ssh_hosts.host("host1")
    ssh_hosts.replace_host_key(host1)

    with pytest.raises(paramiko.BadHostKeyException):
        _connect(ssh_hosts, host1)
    _connect(ssh_hosts, ssh_hosts.host("host2")).close()

    runner = _ansible_ping(ssh_hosts, tmp_path)
    assert runner.status == "failed"
    assert list(runner.stats["dark"]) == ["host1"]
    assert list(runner.stats["ok"]) == ["host2"]
    unreachable = [e for e in runner.events if e.get("event") == "runner_on_unreachable"]
    assert "host key" in unreachable[0]["event_data"]["res"]["msg"].lower()


def test_stopped_host_is_unreachable_until_restarted(ssh_hosts: TestHosts) -> None:
    host1 = ssh_hosts.host("host1")
    ssh_hosts.stop(host1)
    with pytest.raises((paramiko.ssh_exception.NoValidConnectionsError, ConnectionError, OSError)):
        _connect(ssh_hosts, host1)
    ssh_hosts.start(host1)
    _connect(ssh_hosts, host1).close()


def test_drop_sessions_cuts_live_connections_but_keeps_the_listener(ssh_hosts: TestHosts) -> None:
    host1 = ssh_hosts.host("host1")
    client = _connect(ssh_hosts, host1)
    _run(client, "true")
    assert ssh_hosts.drop_sessions(host1) >= 1
    with pytest.raises((paramiko.SSHException, EOFError, OSError)):
        _run(client, "true")
    client.close()
    _connect(ssh_hosts, host1).close()


def test_corrupt_file_changes_content_not_size(tmp_path: Path) -> None:
    target = tmp_path / "artifact.so"
    target.write_bytes(b"0123456789")
    TestHosts.corrupt_file(target)
    assert target.read_bytes() != b"0123456789"
    assert len(target.read_bytes()) == 10


def test_no_daemon_survives_teardown(ssh_hosts_factory) -> None:
    hosts = ssh_hosts_factory(1)
    pid = hosts.hosts[0].pid
    hosts.close()
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
