"""Rollback falls back to Ansible when the direct SSH path cannot act (real sshd, real playbook)."""

import json
import time

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


def fallback_inventory(ssh_hosts, tmp_path, **overrides):
    """An inventory whose paramiko known_hosts is empty: every host takes the Ansible path."""
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    return ssh_hosts.write_inventory(tmp_path / "inventory.yml", cutover_known_hosts=str(empty), **overrides)


def plant_releases(host) -> None:
    """Two (empty) releases on the host, `b` current and `a` previous, as two stages leave them."""
    for release_id in ("a", "b"):
        (host.cutover_root / "releases" / release_id).mkdir(parents=True)
    (host.cutover_root / "current").symlink_to("releases/b")
    (host.cutover_root / "previous").symlink_to("releases/a")


def plant_serving(host, generation: int) -> None:
    """control.json in triton at `generation` and two live ranks that acknowledged it, running release b."""
    (host.state_dir / "control.json").write_text(json.dumps({"mode": "triton", "generation": generation}))
    (host.state_dir / "runtime").mkdir(exist_ok=True)
    for rank in (0, 1):
        (host.state_dir / "runtime" / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "pid": 1, "host": host.name, "mode_active": "triton", "generation_seen": generation,
            "release_id": "b", "kernel": "reference (no GPU)", "written_at": time.time() + 120}))


def test_fallback_rollback_to_previous_respects_another_operators_lock(ssh_hosts, invoke, tmp_path):
    host = ssh_hosts.host("host1")
    plant_releases(host)
    host.plant_lock("bob@elsewhere", expires_in_s=600)
    (host.state_dir / "control.json").write_text(json.dumps({"mode": "shadow", "generation": 3}))

    result = invoke("rollback", "-i", fallback_inventory(ssh_hosts, tmp_path), "--limit", "host1",
                    "--to", "previous", "--json")

    assert result.exit_code == 4
    (line,) = json.loads(result.stdout)["hosts"]
    assert line["path"] == "ansible" and not line["ok"] and line["generation"] == 4
    assert any("host host1 is locked by bob@elsewhere (shadow, " in m and "the release was not changed" in m
               for m in line["messages"])
    assert (host.current_release(), host.previous_release()) == ("b", "a")
    assert host.control()["mode"] == "triton"


def test_fallback_host_that_serves_is_restarted_only_when_agreed(ssh_hosts, invoke, tmp_path):
    host = ssh_hosts.host("host1")
    plant_releases(host)
    plant_serving(host, generation=5)
    marker = tmp_path / "restarted"
    inventory = fallback_inventory(ssh_hosts, tmp_path, serving_restart_command=f"touch {marker}")

    declined = invoke("rollback", "-i", inventory, "--limit", "host1", "--to", "previous", "--json")

    assert declined.exit_code == 0, declined.stderr
    (line,) = json.loads(declined.stdout)["hosts"]
    assert line["path"] == "ansible" and line["serving"] is True and line["restarted"] is False
    assert "current switched to a (previous: b)" in line["messages"]
    assert any(m.startswith("serving NOT restarted (not agreed)") for m in line["messages"])
    assert not marker.exists()

    agreed = invoke("rollback", "-i", inventory, "--limit", "host1", "--to", "previous", "--yes", "--json")

    assert agreed.exit_code == 0, agreed.stderr
    (line,) = json.loads(agreed.stdout)["hosts"]
    assert line["already_on_release"] and line["restarted"] is True and marker.exists()
    assert "serving restarted to load release a" in line["messages"]
    assert (host.current_release(), host.previous_release()) == ("a", "b")


def test_fallback_rollback_to_previous_journals_the_release_change_once_and_phases_it(ssh_hosts, invoke, tmp_path):
    host = ssh_hosts.host("host1")
    plant_releases(host)
    (host.state_dir / "phase.json").write_text(json.dumps({"phase": "promoted", "release_id": "b"}))
    (host.state_dir / "control.json").write_text(json.dumps({"mode": "custom", "generation": 3}))

    result = invoke("rollback", "-i", fallback_inventory(ssh_hosts, tmp_path), "--limit", "host1",
                    "--to", "previous", "--json")

    assert result.exit_code == 0, result.stderr
    (line,) = json.loads(result.stdout)["hosts"]
    assert line["ok"] and line["path"] == "ansible" and line["release_switched_to"] == "a"
    (entry,) = [e for e in read_journal(host.state_dir) if e["action"] == "rollback_release"]
    assert {k: entry[k] for k in ("to_previous", "uninstall", "release_id", "rolled_back_from", "already",
                                  "restarted")} == {"to_previous": True, "uninstall": False, "release_id": "a",
                                                    "rolled_back_from": "b", "already": False, "restarted": False}
    assert entry["actor"] == "alice@test"
    phase = json.loads((host.state_dir / "phase.json").read_text())
    assert (phase["phase"], phase["release_id"]) == ("rolled_back", "a")
