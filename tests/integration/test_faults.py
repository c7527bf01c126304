"""Fault injection for shadow / promote / rollback: real sshd hosts, real Ansible, the real sandbox server.

Every test stages a real release onto two sshd hosts (host1 is the canary) whose serving process is the
sandbox (`python -m cutover.sandbox`, two ranks each), then breaks something mid-run and asserts on what
the hosts hold afterwards: the mode every rank actually runs (its heartbeat), control.json, phase, verdict
and journal. Shadows are kept to seconds through a test policy (tests/integration/fault_policy.yml).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clirunner import Cli
from sshd import TestHost, TestHosts

pytestmark = pytest.mark.integration

EXIT_HOST, EXIT_LOCK, EXIT_PHASE, EXIT_GATE = 4, 5, 6, 7
LEASE_TTL_S = 4.0
POLL_S = 0.25  # the plugin re-reads control.json at least this often
HEARTBEAT_SLACK_S = 1.0  # one poll plus the heartbeat write and our own polling
POLICY = """\
shadow:
  min_duration_s: 6
  min_compared_calls: 5
  max_silence_s: 4
promote:
  watch_minutes: 0.2
  probe_interval_s: 1
  max_failed_probes: 2
"""
SANDBOX = ("{{ serving_python }} -m cutover.sandbox restart --state-dir {{ cutover_state_dir }} "
           "--cutover-root {{ cutover_root }} --port {{ serving_port }} --ranks {{ tp_size }}")


# -- helpers -----------------------------------------------------------------------------------------------

def sandbox(host: TestHost, verb: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cutover.sandbox", verb, "--state-dir", str(host.state_dir),
                           "--cutover-root", str(host.cutover_root), "--port", str(host.serving_port),
                           "--ranks", "2"], capture_output=True, text=True, timeout=120)


def heartbeats(host: TestHost) -> list[dict | None]:
    beats = []
    for rank in range(2):
        path = host.state_dir / "runtime" / f"rank-{rank}.json"
        try:
            beats.append(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError):
            beats.append(None)
    return beats


def active_modes(host: TestHost) -> set[str | None]:
    return {beat["mode_active"] if beat else None for beat in heartbeats(host)}


def wait_for(condition, timeout_s: float, what: str, step_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def sandbox_pid(host: TestHost) -> int:
    return int((host.state_dir / "sandbox" / "server.pid").read_text().split()[0])


def inject(host: TestHost, fault: str) -> None:
    """The sandbox's test-only fault switch: its ranks re-read this file about once a second."""
    (host.state_dir / "sandbox-fault").write_text(fault)


def verdicts(host: TestHost) -> list[dict]:
    directory = host.state_dir / "verdicts"
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))] if directory.exists() else []


def journal_actions(host: TestHost) -> list[str]:
    return [entry["action"] for entry in host.journal()]


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "fault_policy.yml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def staged(cli: Cli, ssh_hosts: TestHosts, release: Path, tmp_path: Path):
    """Both hosts staged with `release` and serving it from a running sandbox; sandboxes stopped after."""
    inventory = ssh_hosts.write_inventory(tmp_path / "inventory.yml", serving_restart_command=SANDBOX,
                                          serving_address="127.0.0.1",
                                          per_host={"host1": {"cutover_canary": True}})
    result = cli("stage", "-i", inventory, "--release", release, "--yes")
    assert result.returncode == 0, f"stage failed:\n{result.stdout}\n{result.stderr}"
    for host in ssh_hosts.hosts:
        wait_for(lambda: active_modes(host) == {"triton"}, 60, f"{host.name}'s sandbox ranks on triton")
    yield inventory
    for host in ssh_hosts.hosts:
        sandbox(host, "down")


def shadow_args(inventory: Path, policy: Path, minutes: float, *extra) -> list:
    return ["shadow", "-i", inventory, "--minutes", minutes, "--policy", policy, "--lease-ttl", LEASE_TTL_S,
            "--reports-dir", "reports", *extra]


def start_shadow(cli: Cli, inventory: Path, policy: Path, tmp_path: Path, hosts, minutes: float = 5.0,
                 operator: str = "alice@test") -> subprocess.Popen:
    """Start a long shadow in the background and return once every rank of every host runs shadow."""
    process = cli.start(*shadow_args(inventory, policy, minutes), log=tmp_path / "shadow.log", operator=operator)
    for host in hosts:
        wait_for(lambda: active_modes(host) == {"shadow"} or process.poll() is not None, 60,
                 f"{host.name} armed in shadow")
    assert process.poll() is None, (tmp_path / "shadow.log").read_text()
    return process


def assert_all_triton(hosts, why: str) -> None:
    for host in hosts:
        assert host.control()["mode"] == "triton", f"{host.name} control.json not triton ({why})"
        wait_for(lambda: active_modes(host) in ({"triton"}, {None}), 5, f"{host.name} ranks on triton ({why})")


def run_and_wait(process: subprocess.Popen, log: Path, timeout_s: float = 120) -> str:
    process.wait(timeout=timeout_s)
    return log.read_text()


# -- the good path, promote and rollback semantics ---------------------------------------------------------

def test_pass_promote_already_promoted_and_rollback_twice(cli, ssh_hosts, staged, policy, tmp_path):
    result = cli(*shadow_args(staged, policy, 0.15))
    assert result.returncode == 0, result.stdout + result.stderr
    report = Path(result.stdout.split("report: ")[-1].split()[0])
    assert (tmp_path / report).exists() or report.exists()
    for host in ssh_hosts.hosts:
        [verdict] = verdicts(host)
        assert verdict["verdict"] == "pass" and verdict["release_id"] == host.current_release()
        assert host.phase()["phase"] == "shadow_passed" and host.phase()["run_id"] == verdict["run_id"]
        assert host.control()["mode"] == "triton" and host.lock() is None
        assert "shadow_end" in journal_actions(host)

    promoted = cli("promote", "-i", staged, "--policy", policy, "--lease-ttl", LEASE_TTL_S)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    for host in ssh_hosts.hosts:
        control = host.control()
        assert control["mode"] == "custom" and control["lease_expires_at"] is None
        assert active_modes(host) == {"custom"} and host.phase()["phase"] == "promoted"
    # canary first: host1's promotion is journaled before host2's flip
    first_flip = {h.name: next(e["ts"] for e in h.journal() if e["action"] == "promote_start") for h in ssh_hosts.hosts}
    assert first_flip["host1"] < first_flip["host2"]

    before = [h.control() for h in ssh_hosts.hosts]
    again = cli("promote", "-i", staged, "--policy", policy)
    assert again.returncode == 0 and "already promoted" in again.stdout
    assert [h.control() for h in ssh_hosts.hosts] == before

    for attempt in range(2):
        rolled = cli("--json", "rollback", "-i", staged)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert_all_triton(ssh_hosts.hosts, f"rollback #{attempt + 1}")
    assert all(line["already_triton"] for line in json.loads(rolled.stdout)["hosts"])


def test_promote_without_a_pass_is_refused_and_changes_nothing(cli, ssh_hosts, staged, policy):
    before = [h.control() for h in ssh_hosts.hosts]
    result = cli("promote", "-i", staged, "--policy", policy)
    assert result.returncode == EXIT_PHASE
    assert "has not passed shadow" in result.stderr and "nothing was changed" in result.stderr
    assert [h.control() for h in ssh_hosts.hosts] == before
    assert all(active_modes(h) == {"triton"} for h in ssh_hosts.hosts)


def test_promote_of_a_different_release_is_refused(cli, ssh_hosts, staged, policy, release, other_release):
    assert cli(*shadow_args(staged, policy, 0.15)).returncode == 0
    restage = cli("stage", "-i", staged, "--release", other_release, "--yes")
    assert restage.returncode == 0, restage.stdout + restage.stderr
    result = cli("promote", "-i", staged, "--policy", policy)
    assert result.returncode == EXIT_PHASE, result.stdout + result.stderr
    assert "has not passed shadow" in result.stderr and other_release.name in result.stderr
    assert all(h.control()["mode"] == "triton" for h in ssh_hosts.hosts)


@pytest.fixture
def other_release(release: Path, cli: Cli) -> Path:
    """A second real release (other arch set: another release id) in the same releases dir."""
    result = cli("--json", "build", "--arch", "sm_120", "--out", release.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    built = Path(json.loads(result.stdout)["path"])
    assert built.name != release.name
    return built


# -- the operator, the network and the server fail mid-shadow ----------------------------------------------

def test_cli_killed_mid_shadow_leaves_hosts_on_triton_within_the_lease(cli, ssh_hosts, staged, policy, tmp_path):
    process = start_shadow(cli, staged, policy, tmp_path, ssh_hosts.hosts)
    Cli.kill_group(process)
    killed_at = time.monotonic()
    for host in ssh_hosts.hosts:
        wait_for(lambda: active_modes(host) == {"triton"}, LEASE_TTL_S + HEARTBEAT_SLACK_S + 5,
                 f"{host.name} back on triton after the CLI died")
    assert time.monotonic() - killed_at <= LEASE_TTL_S + POLL_S + HEARTBEAT_SLACK_S
    # nobody wrote triton: the plugin fell back on its own when the lease ran out
    assert all(h.control()["mode"] == "shadow" for h in ssh_hosts.hosts)

    # a colleague with no local state at all rolls back (the dead CLI's lock does not block it), twice
    elsewhere = Cli(home=tmp_path / "bob-home", releases_dir=tmp_path / "no-releases", cwd=tmp_path / "bob")
    for directory in (elsewhere.home, elsewhere.cwd):
        directory.mkdir()
    for attempt in range(2):
        rolled = elsewhere("rollback", "-i", staged, operator="bob@test")
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert_all_triton(ssh_hosts.hosts, f"bob's rollback #{attempt + 1}")
    assert all(h.phase()["phase"] == "rolled_back" for h in ssh_hosts.hosts)


def test_ssh_cut_mid_shadow_returns_the_host_to_triton_and_fails_the_run(cli, ssh_hosts, staged, policy, tmp_path):
    process = start_shadow(cli, staged, policy, tmp_path, ssh_hosts.hosts)
    host1 = ssh_hosts.host("host1")
    ssh_hosts.drop_sessions(host1)
    ssh_hosts.stop(host1)
    cut_at = time.monotonic()
    try:
        wait_for(lambda: active_modes(host1) == {"triton"}, LEASE_TTL_S + HEARTBEAT_SLACK_S + 5,
                 "host1 on triton after losing SSH")
        assert time.monotonic() - cut_at <= LEASE_TTL_S + POLL_S + HEARTBEAT_SLACK_S
        output = run_and_wait(process, tmp_path / "shadow.log")
    finally:
        ssh_hosts.start(host1)
    assert process.returncode == EXIT_GATE, output
    assert "host1" in output
    assert_all_triton([ssh_hosts.host("host2")], "the run failed")
    [verdict] = verdicts(ssh_hosts.host("host2"))
    assert verdict["verdict"] == "fail" and "host1" in verdict["reason"]


def test_sandbox_killed_mid_shadow_fails_the_run_and_hosts_end_on_triton(cli, ssh_hosts, staged, policy, tmp_path):
    process = start_shadow(cli, staged, policy, tmp_path, ssh_hosts.hosts)
    host1 = ssh_hosts.host("host1")
    os.kill(sandbox_pid(host1), signal.SIGKILL)
    output = run_and_wait(process, tmp_path / "shadow.log")
    assert process.returncode == EXIT_GATE, output
    assert "host1" in output and ("silent" in output or "heartbeat" in output)
    assert_all_triton(ssh_hosts.hosts, "after the sandbox died")
    assert all(verdicts(h)[-1]["verdict"] == "fail" for h in ssh_hosts.hosts)
    # the restarted server comes up on triton even though it died armed
    assert sandbox(host1, "up").returncode == 0
    wait_for(lambda: active_modes(host1) == {"triton"}, 60, "host1's new sandbox on triton")


@pytest.mark.parametrize(("fault", "gate"), [("divergence:layer=3:rel=0.2", "rel_l2_max"),
                                             ("nan:layer=3", "nonfinite")])
def test_injected_fault_in_the_custom_path_is_caught_and_rolled_back(cli, ssh_hosts, staged, policy, tmp_path,
                                                                       fault, gate):
    inject(ssh_hosts.host("host2"), fault)
    result = cli(*shadow_args(staged, policy, 2.0))
    assert result.returncode == EXIT_GATE, result.stdout + result.stderr
    assert gate in result.stderr and "layer 3" in result.stderr
    assert_all_triton(ssh_hosts.hosts, f"{gate} breach")
    for host in ssh_hosts.hosts:
        assert "rollback" in journal_actions(host) and verdicts(host)[-1]["verdict"] == "fail"
    report = Path(result.stderr.split("report: ")[-1].split()[0])
    text = (tmp_path / report).read_text() if not report.is_absolute() else report.read_text()
    assert "FAILED" in text and "layer 3" in text


# -- operators ---------------------------------------------------------------------------------------------

def test_second_operator_is_refused_and_ctrl_c_reverts_cleanly(cli, ssh_hosts, staged, policy, tmp_path):
    process = start_shadow(cli, staged, policy, tmp_path, ssh_hosts.hosts)
    for verb in (shadow_args(staged, policy, 1.0), ["promote", "-i", staged, "--policy", policy]):
        refused = cli(*verb, operator="bob@test")
        assert refused.returncode == EXIT_LOCK, refused.stdout + refused.stderr
        assert "alice@test" in refused.stderr
    assert all(active_modes(h) == {"shadow"} for h in ssh_hosts.hosts), "bob's attempt disturbed alice's run"

    os.killpg(process.pid, signal.SIGINT)
    output = run_and_wait(process, tmp_path / "shadow.log")
    assert process.returncode == EXIT_GATE and "aborted" in output, output
    assert_all_triton(ssh_hosts.hosts, "Ctrl-C")
    for host in ssh_hosts.hosts:
        assert host.lock() is None
        assert verdicts(host)[-1]["outcome"] == "aborted"
        assert host.phase()["phase"] == "shadow_failed"


def test_regression_after_promote_rolls_the_canary_back_and_stops(cli, ssh_hosts, staged, policy, tmp_path):
    assert cli(*shadow_args(staged, policy, 0.15)).returncode == 0
    log = tmp_path / "promote.log"
    process = cli.start("promote", "-i", staged, "--policy", policy, "--lease-ttl", LEASE_TTL_S,
                        "--watch-minutes", 2, log=log)
    host1, host2 = ssh_hosts.host("host1"), ssh_hosts.host("host2")
    wait_for(lambda: active_modes(host1) == {"custom"} or process.poll() is not None, 60, "host1 on custom")
    os.kill(sandbox_pid(host1), signal.SIGKILL)  # the canary's server dies under the custom kernel
    output = run_and_wait(process, log)
    assert process.returncode == EXIT_GATE, output
    assert "host1" in output and "rolled back" in output
    assert host1.control()["mode"] == "triton" and host1.phase()["phase"] == "rolled_back"
    assert "promote_rolled_back" in journal_actions(host1)
    # the rollout stopped at the canary: host2 was never flipped
    assert host2.control()["mode"] == "triton" and host2.phase()["phase"] == "shadow_passed"
    assert "promote_start" not in journal_actions(host2)
