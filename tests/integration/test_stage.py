"""`cutover stage` against real hosts (real sshd, real ansible-runner, the real playbooks, the real CLI).

Each test starts from two fresh hosts (host1, host2) and asserts on what the hosts hold afterwards
(`current` link, control.json, phase, journal, lock) as well as on the exit code and the message.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest

from clirunner import Cli
from releases import second_release
from sshd import TestHost, TestHosts

pytestmark = pytest.mark.integration

EXIT_CONFIG, EXIT_BUILD, EXIT_HOST, EXIT_LOCK = 2, 3, 4, 5


def manifest(release: Path) -> dict:
    return json.loads((release / "manifest.json").read_text())


def stage(cli: Cli, inventory: Path, release: Path, *extra: str, operator: str = "alice@test"):
    """`cutover stage` without --yes: the test hosts run no serving process, so no restart is wanted."""
    return cli("--json", "stage", "-i", inventory, "--release", release, *extra, operator=operator)


def report(result) -> dict[str, dict]:
    """Per-host lines of `cutover --json stage`, by host name."""
    return {line["name"]: line for line in json.loads(result.stdout)["hosts"]}


def assert_staged(host: TestHost, release: Path) -> None:
    """The host runs `release`: current points at it, every file matches the manifest, mode triton."""
    release_id = release.name
    assert host.current_release() == release_id
    staged = host.cutover_root / "releases" / release_id
    for name, digest in manifest(release)["files"].items():
        assert hashlib.sha256((staged / name).read_bytes()).hexdigest() == digest, name
    assert host.control()["mode"] == "triton"
    assert host.phase()["phase"] == "staged" and host.phase()["release_id"] == release_id
    assert any(e["action"] == "stage" and e["release_id"] == release_id for e in host.journal())
    assert host.lock() is None, "the stage lock must be released at the end"


def assert_untouched(host: TestHost) -> None:
    assert host.snapshot() == {}, f"{host.name} was changed: {sorted(host.snapshot())}"


def assert_not_staged(host: TestHost) -> None:
    """Nothing of the release reached the host; at most its journal explains why (stage_refused)."""
    assert host.current_release() is None and host.control() is None and host.phase() is None
    releases = host.cutover_root / "releases"
    assert not releases.exists() or not any(releases.iterdir())
    assert {e["action"] for e in host.journal()} <= {"stage_refused"}


def error_line(result) -> str:
    """The error the CLI reported, as `error: ...` (without progress lines and the fix hint): under --json the
    error document on stdout, or stderr's error line where the verb had already written its report."""
    if "error:" in result.stderr:
        return result.stderr[result.stderr.index("error:"):].split("\n  fix:")[0]
    return "error: " + json.loads(result.stdout)["error"]


def plant_damaged_copy(host: TestHost, release: Path) -> None:
    """Put a copy of `release` where stage finds it on the host (as an earlier push would have), with one
    byte of its library flipped: damage on the host's disk."""
    target = host.cutover_root / "releases" / release.name
    shutil.copytree(release, target)
    TestHosts.corrupt_file(target / manifest(release)["library"])


# -- the good path -----------------------------------------------------------------------------------------

def test_stage_installs_release_on_every_host(cli, ssh_hosts, inventory_file, release):
    result = stage(cli, inventory_file, release)
    assert result.returncode == 0, result.stderr
    lines = report(result)
    for host in ssh_hosts.hosts:
        assert_staged(host, release)
        assert lines[host.name]["outcome"] == "staged"
        assert lines[host.name]["changed"] > 0
        control = host.control()
        assert control["generation"] >= 1 and control["set_by"] == "alice@test"


def test_second_identical_stage_changes_nothing(cli, ssh_hosts, inventory_file, release):
    assert stage(cli, inventory_file, release).returncode == 0
    before = {h.name: {p: s for p, s in h.snapshot().items() if not p.endswith("journal.jsonl")}
              for h in ssh_hosts.hosts}

    again = stage(cli, inventory_file, release)

    assert again.returncode == 0, again.stderr
    for host in ssh_hosts.hosts:
        line = report(again)[host.name]
        assert (line["changed"], line["outcome"]) == (0, "already staged")
        after = {p: s for p, s in host.snapshot().items() if not p.endswith("journal.jsonl")}
        assert after == before[host.name]


def test_check_mode_changes_nothing(cli, ssh_hosts, inventory_file, release):
    result = stage(cli, inventory_file, release, "--check")
    assert result.returncode == 0, result.stderr
    assert {line["outcome"] for line in report(result).values()} == {"would change"}
    for host in ssh_hosts.hosts:
        assert_untouched(host)


def test_limit_restricts_stage_to_one_host(cli, ssh_hosts, inventory_file, release):
    result = stage(cli, inventory_file, release, "--limit", "host1")
    assert result.returncode == 0, result.stderr
    assert list(report(result)) == ["host1"]
    assert_staged(ssh_hosts.host("host1"), release)
    assert_untouched(ssh_hosts.host("host2"))


def test_canary_is_staged_first_and_its_failure_stops_the_rollout(cli, ssh_hosts, release):
    canary, other = ssh_hosts.host("host2"), ssh_hosts.host("host1")
    inventory = ssh_hosts.write_inventory(per_host={"host2": {"cutover_canary": True}})

    ordered = stage(cli, inventory, release)
    assert ordered.returncode == 0, ordered.stderr
    assert list(report(ordered)) == ["host2", "host1"]
    assert canary.control()["set_at"] < other.control()["set_at"]
    assert (canary.cutover_root / "current").lstat().st_mtime < (other.cutover_root / "current").lstat().st_mtime

    fresh = TestHosts(2)  # a second pair: the canary now fails on a damaged copy of the release
    try:
        fresh.setup()
        plant_damaged_copy(fresh.host("host2"), release)
        failed = stage(cli, fresh.write_inventory(per_host={"host2": {"cutover_canary": True}}), release)
        assert failed.returncode == EXIT_HOST
        lines = report(failed)
        assert lines["host2"]["outcome"] == "failed" and "sha256" in lines["host2"]["message"]
        assert lines["host1"]["outcome"] == "failed" and "canary" in lines["host1"]["message"]
        assert fresh.host("host2").current_release() is None
        assert_not_staged(fresh.host("host1"))
        assert "canary" in fresh.host("host1").journal()[-1]["reason"]
    finally:
        fresh.close()


# -- failures ----------------------------------------------------------------------------------------------

def test_unreachable_host_is_named_and_others_are_staged(cli, ssh_hosts, inventory_file, release):
    down = ssh_hosts.host("host2")
    ssh_hosts.stop(down)

    result = stage(cli, inventory_file, release)

    assert result.returncode == EXIT_HOST
    assert "host2" in error_line(result) and "unreachable" in error_line(result)
    assert "host1" not in error_line(result)
    assert report(result)["host2"]["outcome"] == "unreachable"
    assert_staged(ssh_hosts.host("host1"), release)
    assert_untouched(down)


def test_host_key_mismatch_is_refused(cli, ssh_hosts, inventory_file, release):
    impostor = ssh_hosts.host("host1")
    ssh_hosts.replace_host_key(impostor)

    result = stage(cli, inventory_file, release)

    assert result.returncode == EXIT_HOST
    assert "host1" in error_line(result) and "key" in error_line(result).lower()
    assert "host2" not in error_line(result)
    assert_untouched(impostor)
    assert_staged(ssh_hosts.host("host2"), release)


def test_preflight_mismatch_names_host_fact_expected_and_found_and_changes_nothing(cli, ssh_hosts, release):
    inventory = ssh_hosts.write_inventory(per_host={
        "host1": {"serving_python": "/nonexistent/venv/bin/python"},
        "host2": {"gpu_arch": "sm_120"},  # the test hosts have no GPU (a GPU machine has another arch)
    })

    result = stage(cli, inventory, release)

    assert result.returncode == EXIT_HOST
    error = error_line(result)
    assert "host host1: serving python: expected a working python, found /nonexistent/venv/bin/python" in error
    assert "host host2: gpu compute capability: expected sm_120, found" in error
    for host in ssh_hosts.hosts:
        assert_not_staged(host)
        assert [(e["action"], e["stage"]) for e in host.journal()] == [("stage_refused", "preflight")]
        assert host.lock() is None


def test_corrupted_copy_on_a_host_is_refused_and_journaled(cli, ssh_hosts, inventory_file, release):
    damaged = ssh_hosts.host("host2")
    plant_damaged_copy(damaged, release)

    result = stage(cli, inventory_file, release)

    assert result.returncode == EXIT_HOST
    assert "host2" in error_line(result) and "sha256 mismatch" in error_line(result)
    assert "host1" not in error_line(result)
    assert damaged.current_release() is None, "nothing may be switched to a damaged release"
    refusals = [e for e in damaged.journal() if e["action"] == "stage_refused"]
    assert refusals and "sha256" in refusals[-1]["reason"] and refusals[-1]["release_id"] == release.name
    assert damaged.lock() is None
    assert_staged(ssh_hosts.host("host1"), release)


def test_a_different_build_of_the_same_release_id_is_refused_and_named(cli, ssh_hosts, inventory_file, release):
    other = ssh_hosts.host("host2")
    plant_damaged_copy(other, release)
    copy = other.cutover_root / "releases" / release.name
    library = manifest(release)["library"]
    host_manifest = manifest(copy)
    host_manifest["files"][library] = hashlib.sha256((copy / library).read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(host_manifest))

    result = stage(cli, inventory_file, release)

    assert result.returncode == EXIT_HOST
    assert "host2" in error_line(result) and "different build of this release id" in error_line(result)
    assert "damaged" not in error_line(result)
    assert other.current_release() is None, "nothing may be switched to another build"
    assert_staged(ssh_hosts.host("host1"), release)


def test_a_release_directory_without_a_manifest_is_refused_naming_it(cli, ssh_hosts, inventory_file, release,
                                                                     tmp_path):
    # what an interrupted `rm -rf` of a damaged release leaves: its directory, damaged bytes, no manifest
    old, new = release, second_release(release, tmp_path)
    assert stage(cli, inventory_file, old).returncode == 0
    leftover = ssh_hosts.host("host2")
    plant_damaged_copy(leftover, new)
    directory = leftover.cutover_root / "releases" / new.name
    (directory / "manifest.json").unlink()

    result = stage(cli, inventory_file, new)

    assert result.returncode == EXIT_HOST
    assert (f"{directory} exists on the host without a manifest.json (an interrupted removal or copy?); nothing "
            f"was switched (remove {directory} on the host, then stage again)") in report(result)["host2"]["message"]
    assert leftover.current_release() == old.name, "current must not move to unverified bytes"
    assert sorted(p.name for p in (leftover.cutover_root / "releases").iterdir()) == sorted([old.name, new.name])
    assert_staged(ssh_hosts.host("host1"), new)


def test_corrupted_local_release_is_refused_before_any_host_is_touched(cli, ssh_hosts, inventory_file, release, tmp_path):
    copy = tmp_path / release.name
    shutil.copytree(release, copy)
    TestHosts.corrupt_file(copy / manifest(release)["library"])

    result = stage(cli, inventory_file, copy)

    assert result.returncode == EXIT_CONFIG
    assert "sha256" in error_line(result) and manifest(release)["library"] in error_line(result)
    for host in ssh_hosts.hosts:
        assert_untouched(host)


def test_lock_held_by_another_operator_is_refused_with_the_owner(cli, ssh_hosts, inventory_file, release):
    held = ssh_hosts.host("host2").plant_lock("bob@elsewhere", expires_in_s=600)

    result = stage(cli, inventory_file, release)

    assert result.returncode == EXIT_LOCK
    assert "bob@elsewhere" in error_line(result) and "host2" in error_line(result)
    assert ssh_hosts.host("host2").lock() == held
    assert ssh_hosts.host("host1").current_release() is None
    assert ssh_hosts.host("host1").lock() is None, "a refused stage must release the locks it took"


def test_expired_lock_is_taken_over_and_journaled(cli, ssh_hosts, inventory_file, release):
    ssh_hosts.host("host2").plant_lock("bob@elsewhere", expires_in_s=-5)

    result = stage(cli, inventory_file, release)

    assert result.returncode == 0, result.stderr
    takeovers = [e for e in ssh_hosts.host("host2").journal() if e["action"] == "lock_takeover"]
    assert len(takeovers) == 1 and takeovers[0]["previous_owner"] == "bob@elsewhere"
    assert takeovers[0]["actor"] == "alice@test"
    for host in ssh_hosts.hosts:
        assert_staged(host, release)


def test_stage_killed_while_the_canary_restarts_leaves_hosts_safe_and_a_rerun_completes(cli, ssh_hosts, release,
                                                                                       tmp_path):
    """The operator's machine dies while the canary waits for its serving process to come up with a new release
    (the test hosts run none, so that wait lasts): the canary holds the new release, the old one as previous, in
    mode triton; the other host still holds the old release, untouched; both stay locked by the operator."""
    old, new = release, second_release(release, tmp_path)
    canary, other = ssh_hosts.host("host1"), ssh_hosts.host("host2")
    inventory = ssh_hosts.write_inventory(serving_start_timeout_s=60)
    assert stage(cli, inventory, old).returncode == 0
    before = {host.name: host.snapshot() for host in ssh_hosts.hosts}

    process = cli.start("stage", "-i", inventory, "--release", new, "--yes", log=tmp_path / "stage.log")
    deadline = time.monotonic() + 120
    while (canary.phase() or {}).get("release_id") != new.name and process.poll() is None:
        assert time.monotonic() < deadline, "stage did not switch the canary within 120 s"
        time.sleep(0.02)
    assert process.poll() is None, f"stage ended before it could be killed:\n{(tmp_path / 'stage.log').read_text()}"
    Cli.kill_group(process)  # the operator's machine dies: CLI, ansible-playbook and ssh all at once

    assert (canary.current_release(), canary.previous_release()) == (new.name, old.name)
    assert sorted(p.name for p in (canary.cutover_root / "releases").iterdir()) == sorted([old.name, new.name])
    assert canary.control()["mode"] == "triton"
    assert (canary.phase()["phase"], canary.phase()["release_id"]) == ("staged", new.name)
    after = other.snapshot()
    changed = {path for path in set(before["host2"]) | set(after) if before["host2"].get(path) != after.get(path)}
    assert changed == {str(other.state_dir / "lock")}, "the other host must not have been reached (canary first)"
    for host in ssh_hosts.hosts:
        assert (host.lock()["owner"], host.lock()["action"]) == ("alice@test", "stage")

    status = cli("--json", "status", "-i", inventory)
    assert status.returncode == 0, status.stderr
    locks = {line["host"]: line["lock"]["owner"] for line in json.loads(status.stdout)["hosts"]}
    assert locks == {"host1": "alice@test", "host2": "alice@test"}, "status must name who holds the left locks"

    other_operator = stage(cli, inventory, new, operator="bob@elsewhere")
    assert other_operator.returncode == EXIT_LOCK and "alice@test" in error_line(other_operator)

    rerun = stage(cli, inventory, new)
    assert rerun.returncode == 0, rerun.stderr
    for host in ssh_hosts.hosts:
        assert_staged(host, new)
        assert host.previous_release() == old.name


def batches(hosts: TestHosts) -> list[list[str]]:
    """The rollout batches stage ran (host names sorted in each), from the hosts' own files: a batch switches
    `current` on all its hosts before any of them writes control.json; the next starts after the last one did."""
    spans = sorted(((h.cutover_root / "current").lstat().st_mtime, h.control()["set_at"], h.name)
                   for h in hosts.hosts)
    found: list[list[str]] = []
    batch_end = float("-inf")
    for switched, initialised, name in spans:
        if switched > batch_end:
            found.append([])
        found[-1].append(name)
        batch_end = max(batch_end, initialised)
    return [sorted(batch) for batch in found]


@pytest.mark.parametrize("serial,expected", [
    (None, [["host1"], ["host2", "host3"]]),  # the default: the canary, then the rest
    (3, [["host1", "host2", "host3"]]),
    (1, [["host1"], ["host2"], ["host3"]]),
])
def test_rollout_batches_follow_the_inventory_serial(cli, ssh_hosts_factory, release, serial, expected):
    hosts = ssh_hosts_factory(3)
    inventory = hosts.write_inventory(**({} if serial is None else {"cutover_serial": serial}))

    result = stage(cli, inventory, release)

    assert result.returncode == 0, result.stderr
    assert batches(hosts) == expected


# -- bad input ---------------------------------------------------------------------------------------------

def test_invalid_inventory_field_is_named_with_its_file(cli, ssh_hosts, release, tmp_path):
    inventory = ssh_hosts.write_inventory(tmp_path / "bad.yml", per_host={"host2": {"tp_size": "two"}})
    result = stage(cli, inventory, release)
    assert result.returncode == EXIT_CONFIG
    error = error_line(result)
    assert str(inventory) in error and "tp_size" in error and "host2" in error
    for host in ssh_hosts.hosts:
        assert_untouched(host)


def test_inventory_yaml_error_names_file_and_line(cli, ssh_hosts, release, tmp_path):
    inventory = tmp_path / "broken.yml"
    inventory.write_text("all:\n  children:\n    serving:\n      hosts: [unclosed\n")
    result = stage(cli, inventory, release)
    assert result.returncode == EXIT_CONFIG
    assert str(inventory) in error_line(result) and "line" in error_line(result)


def test_invalid_config_field_is_named_with_its_file(cli, ssh_hosts, inventory_file, release, tmp_path):
    config = tmp_path / "config.yml"
    config.write_text("lock_ttl_s: -5\n")
    result = cli("stage", "--config", config, "-i", inventory_file, "--release", release)
    assert result.returncode == EXIT_CONFIG
    assert str(config) in result.stderr and "lock_ttl_s" in result.stderr
    for host in ssh_hosts.hosts:
        assert_untouched(host)


def test_unknown_limit_is_refused_naming_the_known_hosts(cli, ssh_hosts, inventory_file, release):
    result = stage(cli, inventory_file, release, "--limit", "host9")
    assert result.returncode == EXIT_CONFIG
    assert "host9" in error_line(result) and "host1" in json.loads(result.stdout)["fix"]
    for host in ssh_hosts.hosts:
        assert_untouched(host)
