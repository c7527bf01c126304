"""`cutover status` and `cutover rollback` against real hosts (paramiko reads, host-key verification)."""

from __future__ import annotations

import json
import time

import pytest

from clirunner import Cli
from sshd import TestHost, TestHosts

pytestmark = pytest.mark.integration

EXIT_HOST = 4


@pytest.fixture
def staged(cli: Cli, ssh_hosts: TestHosts, inventory_file, release) -> TestHosts:
    """Both hosts staged with the test release (no serving process)."""
    result = cli("stage", "-i", inventory_file, "--release", release)
    assert result.returncode == 0, result.stderr
    return ssh_hosts


def status_by_host(document: dict) -> dict[str, dict]:
    return {entry["host"]: entry for entry in document["hosts"]}


def arm_shadow(host: TestHost, lease_s: float) -> dict:
    """Write control.json as a shadow run would (mode shadow, next generation, a lease)."""
    control = host.control()
    control.update(mode="shadow", generation=control["generation"] + 1, lease_expires_at=time.time() + lease_s,
                   set_by="bob@elsewhere", reason="shadow run")
    (host.state_dir / "control.json").write_text(json.dumps(control))
    return control


def test_status_reports_each_staged_host(cli, staged, inventory_file, release):
    hosts = status_by_host(cli.json("status", "-i", inventory_file))
    assert sorted(hosts) == ["host1", "host2"]
    for entry in hosts.values():
        assert entry["reachable"] is True
        assert entry["phase"]["phase"] == "staged"
        assert entry["current_release"] == release.name
        assert entry["requested_mode"] == "triton"
        assert entry["lock"] is None
        assert entry["last_journal"]["action"] == "stage"
        assert len(entry["ranks"]) == 2 and not any(rank["live"] for rank in entry["ranks"])


def test_status_names_the_unreachable_host_and_still_shows_the_others(cli, staged, inventory_file, release):
    staged.stop(staged.host("host2"))
    result = cli("--json", "status", "-i", inventory_file)
    assert result.returncode == EXIT_HOST
    assert "host2" in result.stderr
    hosts = status_by_host(json.loads(result.stdout))
    assert hosts["host2"]["reachable"] is False
    assert hosts["host1"]["reachable"] is True and hosts["host1"]["current_release"] == release.name


def test_status_refuses_a_host_whose_key_changed(cli, staged, inventory_file):
    staged.replace_host_key(staged.host("host1"))
    result = cli("--json", "status", "-i", inventory_file)
    assert result.returncode == EXIT_HOST
    hosts = status_by_host(json.loads(result.stdout))
    assert hosts["host1"]["reachable"] is False and "key" in hosts["host1"]["error"].lower()
    assert hosts["host2"]["reachable"] is True


def test_status_shows_another_operators_lock(cli, staged, inventory_file):
    staged.host("host1").plant_lock("bob@elsewhere", expires_in_s=600)
    hosts = status_by_host(cli.json("status", "-i", inventory_file))
    assert hosts["host1"]["lock"]["owner"] == "bob@elsewhere"
    assert hosts["host2"]["lock"] is None
    table = cli("status", "-i", inventory_file)
    assert table.returncode == 0 and "bob@elsewhere" in table.stdout


def test_rollback_returns_every_host_to_triton_and_journals_it(cli, staged, inventory_file):
    armed = {h.name: arm_shadow(h, lease_s=600) for h in staged.hosts}

    result = cli("--json", "rollback", "-i", inventory_file, "--reason", "test rollback")

    assert result.returncode == 0, result.stderr
    for host in staged.hosts:
        control = host.control()
        assert control["mode"] == "triton"
        assert control["generation"] == armed[host.name]["generation"] + 1
        assert control["set_by"] == "alice@test"
        entries = [e for e in host.journal() if e["action"].startswith("rollback")]
        assert entries and entries[-1]["actor"] == "alice@test"
        assert host.phase()["phase"] == "rolled_back"


def test_rollback_twice_changes_nothing_the_second_time(cli, staged, inventory_file):
    for host in staged.hosts:
        arm_shadow(host, lease_s=600)
    assert cli("rollback", "-i", inventory_file).returncode == 0
    generations = {h.name: h.control()["generation"] for h in staged.hosts}

    again = cli("--json", "rollback", "-i", inventory_file)

    assert again.returncode == 0, again.stderr
    assert {h.name: h.control()["generation"] for h in staged.hosts} == generations
    assert all(line["already_triton"] for line in json.loads(again.stdout)["hosts"])


def test_rollback_is_not_blocked_by_another_operators_lock(cli, staged, inventory_file):
    host1 = staged.host("host1")
    arm_shadow(host1, lease_s=600)
    host1.plant_lock("bob@elsewhere", expires_in_s=600)

    result = cli("rollback", "-i", inventory_file, "--limit", "host1")

    assert result.returncode == 0, result.stderr
    assert host1.control()["mode"] == "triton"
    assert any("bob@elsewhere" in json.dumps(e) for e in host1.journal() if e["action"] != "stage")
