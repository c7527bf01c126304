"""Rollback falls back to Ansible when the direct SSH path cannot act (real sshd, real playbook)."""

import json

import pytest

from .conftest import read_journal

pytestmark = pytest.mark.integration


def test_rollback_uses_ansible_when_the_fast_path_is_refused(ssh_hosts, invoke, tmp_path):
    host = ssh_hosts.host("host1")
    (host.state_dir / "control.json").write_text(json.dumps({"mode": "shadow", "generation": 3}))
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    # paramiko verifies against an empty file and refuses; Ansible's ssh verifies against the real one.
    inventory = ssh_hosts.write_inventory(tmp_path / "inventory.yml", cutover_known_hosts=str(empty))
    result = invoke("rollback", "-i", inventory, "--limit", "host1", "--json")
    assert result.exit_code == 0, result.stderr
    (line,) = json.loads(result.stdout)["hosts"]
    assert line["ok"] and line["path"] == "ansible"
    assert "its host key is not in known_hosts" in line["messages"][0]
    control = json.loads((host.state_dir / "control.json").read_text())
    assert (control["mode"], control["generation"]) == ("triton", 4)
    (entry,) = [e for e in read_journal(host.state_dir) if e["action"] == "rollback"]
    assert entry["path"] == "ansible" and entry["already_triton"] is False
