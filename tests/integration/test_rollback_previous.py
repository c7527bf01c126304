"""`cutover rollback --to previous` switches once, however often it runs and wherever a run was cut off; an
acknowledgement timeout is journaled and phased (real sshd hosts, real ansible-runner and playbooks)."""

from __future__ import annotations

import json
import time

import pytest

from clirunner import Cli
from releases import second_release
from sshd import TestHost, TestHosts

pytestmark = pytest.mark.integration

EXIT_ACK = 8


@pytest.fixture
def two_staged(cli: Cli, ssh_hosts: TestHosts, inventory_file, release, tmp_path) -> tuple[TestHost, str, str]:
    """host1 staged with `release`, then with a newer one: (host1, older id, newer id)."""
    newer = second_release(release, tmp_path)
    for staged in (release, newer):
        result = cli("stage", "-i", inventory_file, "--limit", "host1", "--release", staged)
        assert result.returncode == 0, result.stderr
    return ssh_hosts.host("host1"), release.name, newer.name


def links(host: TestHost) -> tuple[str | None, str | None]:
    return host.current_release(), host.previous_release()


def rollback_to_previous(cli: Cli, inventory_file) -> dict:
    """One `cutover rollback --to previous` on host1; its JSON line."""
    (line,) = cli.json("rollback", "-i", inventory_file, "--limit", "host1", "--to", "previous")["hosts"]
    return line


def record(host: TestHost) -> dict:
    return json.loads((host.state_dir / "rollback-release.json").read_text())


def test_a_second_rollback_to_previous_stays_on_the_restored_release(cli, two_staged, inventory_file):
    host, older, newer = two_staged
    first = rollback_to_previous(cli, inventory_file)
    assert first["release_switched_to"] == older and not first["already_on_release"]
    assert links(host) == (older, newer)

    second = rollback_to_previous(cli, inventory_file)

    assert links(host) == (older, newer)
    assert second["ok"] and second["already_on_release"] and second["rolled_back_from"] == newer
    assert any(m.startswith(f"already on {older} (rolled back from {newer} at ") and m.endswith("nothing switched")
               for m in second["messages"])
    entries = [e for e in host.journal() if e["action"] == "rollback_release"]
    assert [(e["release_id"], e["already"]) for e in entries] == [(older, False), (older, True)]
    assert host.phase()["phase"] == "rolled_back" and host.phase()["release_id"] == older


def test_a_run_cut_off_after_current_moved_completes_previous(cli, two_staged, inventory_file):
    host, older, newer = two_staged
    rollback_to_previous(cli, inventory_file)
    # the host as the cut left it: current already renamed into place, previous not yet moved, record not done
    (host.cutover_root / "previous").unlink()
    (host.cutover_root / "previous").symlink_to(f"releases/{older}")
    (host.state_dir / "rollback-release.json").write_text(json.dumps({**record(host), "done": False}))

    line = rollback_to_previous(cli, inventory_file)

    assert links(host) == (older, newer)
    assert line["already_on_release"] and record(host)["done"] is True


def test_a_run_cut_off_before_current_moved_switches_once(cli, two_staged, inventory_file):
    host, older, newer = two_staged
    # the host as the cut left it: the switch recorded and the new link made, current not yet renamed
    (host.cutover_root / ".current-rollback").symlink_to(f"releases/{older}")
    (host.state_dir / "rollback-release.json").write_text(json.dumps({
        "from": newer, "to": older, "from_target": f"releases/{newer}", "to_target": f"releases/{older}",
        "link_id": "1:1.0", "at": time.time(), "by": "alice@test", "done": False}))

    line = rollback_to_previous(cli, inventory_file)

    assert links(host) == (older, newer) and not line["already_on_release"]
    assert not (host.cutover_root / ".current-rollback").exists()
    assert rollback_to_previous(cli, inventory_file)["already_on_release"]
    assert links(host) == (older, newer)


def test_stages_after_a_rollback_supersede_its_record(cli, two_staged, inventory_file, release, tmp_path):
    host, older, newer = two_staged
    rollback_to_previous(cli, inventory_file)
    for staged in (tmp_path / "releases" / newer, release):  # the same links as after the rollback, made anew
        assert cli("stage", "-i", inventory_file, "--limit", "host1", "--release", staged).returncode == 0
    assert links(host) == (older, newer)

    line = rollback_to_previous(cli, inventory_file)

    assert links(host) == (newer, older)
    assert line["release_switched_to"] == newer and not line["already_on_release"]


def test_rollback_to_previous_refuses_when_both_links_name_one_release(cli, two_staged, inventory_file):
    host, older, newer = two_staged
    (host.cutover_root / "previous").unlink()
    (host.cutover_root / "previous").symlink_to(f"releases/{newer}")

    result = cli("rollback", "-i", inventory_file, "--limit", "host1", "--to", "previous")

    assert result.returncode == 4
    assert (f"current and previous both name {newer} on host1: there is no other release to go back to: "
            "nothing was switched") in result.stderr
    assert links(host) == (newer, newer)


def plant_ranks(host: TestHost, generation: int, mode: str, release_id: str | None = None) -> None:
    """Heartbeats of two live ranks (written in the future, so they stay fresh) that never move on."""
    runtime = host.state_dir / "runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        (runtime / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "pid": 1, "host": host.name, "mode_active": mode, "generation_seen": generation,
            "release_id": release_id, "kernel": "reference (no GPU)", "written_at": time.time() + 120}))


def test_an_acknowledgement_timeout_is_journaled_and_phased(cli, ssh_hosts, inventory_file, tmp_path):
    host = ssh_hosts.host("host1")
    (host.state_dir / "control.json").write_text(json.dumps({"mode": "custom", "generation": 3}))
    (host.state_dir / "phase.json").write_text(json.dumps({"phase": "promoted", "release_id": "r1"}))
    plant_ranks(host, generation=3, mode="custom")
    config = tmp_path / "config.yml"
    config.write_text("ack_timeout_s: 1\n")

    result = cli("rollback", "-i", inventory_file, "--limit", "host1", "--config", config)

    assert result.returncode == EXIT_ACK, result.stderr
    assert "not every rank acknowledged generation 4" in result.stderr
    assert host.control()["mode"] == "triton" and host.control()["generation"] == 4
    (entry,) = [e for e in host.journal() if e["action"] == "rollback"]
    assert entry["acknowledged"] is False and entry["generation"] == 4
    assert host.phase()["phase"] == "rolled_back"


def test_serving_that_already_runs_the_restored_release_is_not_asked_about(cli, two_staged, ssh_hosts, tmp_path):
    host, older, newer = two_staged
    marker = tmp_path / "restarted"
    inventory = ssh_hosts.write_inventory(tmp_path / "inventory.yml", serving_restart_command=f"touch {marker}")
    # serving still runs the older release (the newer one was staged without a restart), acknowledging triton
    plant_ranks(host, generation=host.control()["generation"], mode="triton", release_id=older)

    for agreed in ([], ["--yes"]):  # the switch, then a re-run that finds it done: never asked, never restarted
        result = cli("--json", "rollback", "-i", inventory, "--limit", "host1", "--to", "previous", *agreed)

        assert result.returncode == 0, result.stderr
        (line,) = json.loads(result.stdout)["hosts"]
        assert line["release_switched_to"] == older and line["already_on_release"] is bool(agreed)
        assert f"host1: serving already runs {older}: no restart needed" in result.stderr
        assert f"serving already runs {older}: no restart needed" in line["messages"]
        assert not marker.exists() and line["restarted"] is False
    assert links(host) == (older, newer)


def test_a_restart_that_fails_after_the_switch_is_still_journaled_on_the_host(cli, two_staged, ssh_hosts, tmp_path):
    """The switch happened, the restart failed: the host's journal says so (completed false), once."""
    host, older, newer = two_staged
    inventory = ssh_hosts.write_inventory(tmp_path / "inventory.yml", serving_restart_command="false")
    plant_ranks(host, generation=host.control()["generation"], mode="triton", release_id=newer)

    result = cli("--json", "rollback", "-i", inventory, "--limit", "host1", "--to", "previous", "--yes")

    assert result.returncode != 0
    assert links(host) == (older, newer)
    (entry,) = [e for e in host.journal() if e["action"] == "rollback_release"]
    assert (entry["release_id"], entry["restarted"], entry["completed"]) == (older, False, False)
