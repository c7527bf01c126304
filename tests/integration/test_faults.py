"""Fault injection for shadow / promote / rollback: real sshd hosts, real Ansible, the real sandbox server.

Every test stages a real release onto two sshd hosts (host1 is the canary) whose serving process is the
sandbox (`python -m cutover.sandbox`, two ranks each), then breaks something mid-run and asserts on what
the hosts hold afterwards: the mode every rank actually runs (its heartbeat), control.json, phase, verdict
and journal. Shadows are kept to seconds through a test policy (tests/integration/fault_policy.yml).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from clirunner import Cli
from sshd import TestHost, TestHosts

pytestmark = pytest.mark.integration

EXIT_HOST, EXIT_LOCK, EXIT_PHASE, EXIT_GATE = 4, 5, 6, 7
LEASE_TTL_S = 4.0
POLL_S = 0.25  # the plugin re-reads control.json at least this often
HEARTBEAT_SLACK_S = 1.0  # one poll plus the heartbeat write and our own polling
FRESH_S = 3.0  # a heartbeat older than this belongs to a rank that is not running
POLICY = """\
shadow:
  min_duration_s: 6
  min_compared_calls: 5
  max_silence_s: 4
  truth_anchor_min_samples: 2
promote:
  watch_minutes: 0.2
  probe_interval_s: 1
  max_failed_probes: 2
"""
SANDBOX = (
    "{{ serving_python }} -m cutover.sandbox restart --state-dir {{ cutover_state_dir }} "
    "--cutover-root {{ cutover_root }} --port {{ serving_port }} --ranks {{ tp_size }}"
)


# -- helpers -----------------------------------------------------------------------------------------------


def sandbox(host: TestHost, verb: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cutover.sandbox",
            verb,
            "--state-dir",
            str(host.state_dir),
            "--cutover-root",
            str(host.cutover_root),
            "--port",
            str(host.serving_port),
            "--ranks",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


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
    """The mode each rank runs by its heartbeat; None for a rank without a fresh one (not running)."""
    now = time.time()
    return {beat["mode_active"] if beat and now - beat["written_at"] <= FRESH_S else None for beat in heartbeats(host)}


def serving(host: TestHost) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{host.serving_port}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


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


@pytest.fixture(scope="module")
def world(release: Path, tmp_path_factory: pytest.TempPathFactory):
    """Two sshd hosts staged once for the module (staging and starting sandboxes costs minutes here);
    `fresh` puts them back into a known state before every test."""
    base = tmp_path_factory.mktemp("faults")
    (base / "hosts").mkdir()
    hosts = TestHosts(2, directory=base / "hosts").setup()
    (base / "home").mkdir()
    (base / "work").mkdir()
    cli = Cli(home=base / "home", releases_dir=release.parent, cwd=base / "work")
    policy = base / "fault_policy.yml"
    policy.write_text(POLICY)
    world = World(hosts, cli, base / "inventory.yml", policy, release)
    try:
        world.write_inventory()
        world.stage(release)
        yield world
    finally:
        for host in hosts.hosts:
            sandbox(host, "down")
        hosts.close()


class World:
    def __init__(self, hosts: TestHosts, cli: Cli, inventory: Path, policy: Path, release: Path):
        self.hosts, self.cli, self.inventory, self.policy, self.release = hosts, cli, inventory, policy, release

    def write_inventory(self) -> None:
        self.hosts.write_inventory(
            self.inventory,
            serving_restart_command=SANDBOX,
            serving_address="127.0.0.1",
            per_host={"host1": {"cutover_canary": True}},
        )

    def stage(self, release: Path) -> None:
        result = self.cli("stage", "-i", self.inventory, "--release", release, "--yes")
        assert result.returncode == 0, f"stage failed:\n{result.stdout}\n{result.stderr}"
        self.wait_serving()

    def wait_serving(self) -> None:
        for host in self.hosts.hosts:
            wait_for(lambda: active_modes(host) == {"triton"}, 120, f"{host.name}'s sandbox ranks on triton")


@pytest.fixture
def fresh(world: World, tmp_path: Path) -> World:
    """Every host reachable, serving the module's release from a live sandbox, on triton, no fault armed."""
    for host in world.hosts.hosts:
        if host.pid is None:
            world.hosts.start(host)
        (host.state_dir / "sandbox-fault").unlink(missing_ok=True)
    world.write_inventory()
    if any(h.current_release() != world.release.name for h in world.hosts.hosts):
        world.stage(world.release)
    for host in world.hosts.hosts:
        if not serving(host):
            assert sandbox(host, "up").returncode == 0
    rolled = world.cli("rollback", "-i", world.inventory)
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    world.wait_serving()
    world.cli.cwd = tmp_path  # each test's reports land in its own directory
    return world


def shadow(w: World, minutes: float) -> list:
    return [
        "shadow",
        "-i",
        w.inventory,
        "--minutes",
        minutes,
        "--policy",
        w.policy,
        "--lease-ttl",
        LEASE_TTL_S,
        "--reports-dir",
        "reports",
    ]


def start_shadow(w: World, tmp_path: Path, minutes: float = 5.0) -> subprocess.Popen:
    """Start a long shadow in the background; return once it is armed everywhere and every rank runs shadow."""
    process = w.cli.start(*shadow(w, minutes), log=tmp_path / "shadow.log")
    for host in w.hosts.hosts:
        wait_for(
            lambda: (active_modes(host) == {"shadow"} and journal_actions(host)[-1] == "shadow_armed")
            or process.poll() is not None,
            60,
            f"{host.name} armed in shadow",
        )
    assert process.poll() is None, (tmp_path / "shadow.log").read_text()
    return process


def assert_all_triton(hosts, why: str) -> None:
    for host in hosts:
        assert host.control()["mode"] == "triton", f"{host.name} control.json not triton ({why})"
        wait_for(lambda: active_modes(host) in ({"triton"}, {None}), 5, f"{host.name} ranks on triton ({why})")


def finished(process: subprocess.Popen, log: Path, timeout_s: float = 180) -> str:
    process.wait(timeout=timeout_s)
    return log.read_text()


def report_text(output: str, cwd: Path) -> str:
    path = Path(output.split("report: ")[-1].split()[0])
    return (path if path.is_absolute() else cwd / path).read_text()


# -- the good path, promote and rollback semantics ---------------------------------------------------------


def test_pass_promote_already_promoted_and_rollback_twice(fresh, tmp_path):
    w = fresh
    result = w.cli(*shadow(w, 0.15))
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_text(result.stdout, tmp_path)
    assert "PASSED" in report
    graph_samples = re.search(r"truth anchor: \d+ float64-anchored sample\(s\) \(.*?(\d+) from CUDA-graph-replayed",
                              report)
    assert graph_samples and int(graph_samples.group(1)) > 0, report  # the sandbox's stand-ins for graph replays
    for host in w.hosts.hosts:
        verdict = verdicts(host)[-1]
        assert verdict["verdict"] == "pass" and verdict["release_id"] == host.current_release()
        assert host.phase()["phase"] == "shadow_passed" and host.phase()["run_id"] == verdict["run_id"]
        assert host.control()["mode"] == "triton" and host.lock() is None
        assert journal_actions(host)[-1] == "shadow_end"

    promoted = w.cli("promote", "-i", w.inventory, "--policy", w.policy, "--lease-ttl", LEASE_TTL_S)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    for host in w.hosts.hosts:
        control = host.control()
        assert control["mode"] == "custom" and control["lease_expires_at"] is None
        assert active_modes(host) == {"custom"} and host.phase()["phase"] == "promoted"
    flipped = {h.name: [e["ts"] for e in h.journal() if e["action"] == "promote_start"][-1] for h in w.hosts.hosts}
    assert flipped["host1"] < flipped["host2"], "the canary (host1) goes first"

    before = [h.control() for h in w.hosts.hosts]
    again = w.cli("promote", "-i", w.inventory, "--policy", w.policy)
    assert again.returncode == 0 and "already promoted" in again.stdout
    assert [h.control() for h in w.hosts.hosts] == before

    for attempt in range(2):
        rolled = w.cli("--json", "rollback", "-i", w.inventory)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert_all_triton(w.hosts.hosts, f"rollback #{attempt + 1}")
    assert all(line["already_triton"] for line in json.loads(rolled.stdout)["hosts"])


def test_promote_without_a_pass_is_refused_and_changes_nothing(fresh):
    w = fresh
    before = [h.control() for h in w.hosts.hosts]
    result = w.cli("promote", "-i", w.inventory, "--policy", w.policy)
    assert result.returncode == EXIT_PHASE, result.stdout + result.stderr
    assert "has not passed shadow" in result.stderr and "nothing was changed" in result.stderr
    assert [h.control() for h in w.hosts.hosts] == before
    assert all(active_modes(h) == {"triton"} for h in w.hosts.hosts)


def test_forced_promote_is_journaled_with_the_refusal_it_overrode(fresh):
    w = fresh
    host1, host2 = w.hosts.host("host1"), w.hosts.host("host2")
    result = w.cli(
        "promote",
        "-i",
        w.inventory,
        "--limit",
        "host1",
        "--force",
        "--policy",
        w.policy,
        "--watch-minutes",
        0.1,
        "--lease-ttl",
        LEASE_TTL_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    forced = [e for e in host1.journal() if e["action"] == "promote_forced"][-1]
    assert "has not passed shadow" in forced["overridden"] and forced["actor"] == "alice@test"
    assert host1.control()["mode"] == "custom" and host1.control()["lease_expires_at"] is None
    assert host1.phase()["phase"] == "promoted" and host1.phase()["reason"].startswith("forced")
    assert host2.control()["mode"] == "triton" and active_modes(host2) == {"triton"}


# -- the operator, the network and the server fail mid-shadow ----------------------------------------------


def test_cli_killed_mid_shadow_leaves_hosts_on_triton_within_the_lease(fresh, tmp_path):
    w = fresh
    process = start_shadow(w, tmp_path)
    Cli.kill_group(process)
    killed_at = time.monotonic()
    for host in w.hosts.hosts:
        wait_for(lambda: active_modes(host) == {"triton"}, LEASE_TTL_S + 10, f"{host.name} back on triton")
    assert time.monotonic() - killed_at <= LEASE_TTL_S + POLL_S + HEARTBEAT_SLACK_S
    # nobody wrote triton: each rank fell back on its own when the lease ran out
    assert all(h.control()["mode"] == "shadow" for h in w.hosts.hosts)

    # a colleague with no local state at all rolls back (the dead CLI's lock does not block it), twice
    elsewhere = Cli(home=tmp_path / "bob-home", releases_dir=tmp_path / "no-releases", cwd=tmp_path / "bob")
    for directory in (elsewhere.home, elsewhere.cwd):
        directory.mkdir()
    for attempt in range(2):
        rolled = elsewhere("rollback", "-i", w.inventory, operator="bob@test")
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert_all_triton(w.hosts.hosts, f"bob's rollback #{attempt + 1}")
    assert all(h.phase()["phase"] == "rolled_back" for h in w.hosts.hosts)


def test_ssh_cut_mid_shadow_returns_the_host_to_triton_and_fails_the_run(fresh, tmp_path):
    w = fresh
    process = start_shadow(w, tmp_path)
    host1, host2 = w.hosts.host("host1"), w.hosts.host("host2")
    w.hosts.drop_sessions(host1)
    w.hosts.stop(host1)
    cut_at = time.monotonic()
    try:
        wait_for(lambda: active_modes(host1) == {"triton"}, LEASE_TTL_S + 10, "host1 on triton after losing SSH")
        assert time.monotonic() - cut_at <= LEASE_TTL_S + POLL_S + HEARTBEAT_SLACK_S
        output = finished(process, tmp_path / "shadow.log")
    finally:
        w.hosts.start(host1)
    assert process.returncode == EXIT_GATE, output
    assert "host1" in output
    assert_all_triton([host2], "the run failed")
    verdict = verdicts(host2)[-1]
    assert verdict["verdict"] == "fail" and "host1" in verdict["reason"]


def test_sandbox_killed_mid_shadow_fails_the_run_and_hosts_end_on_triton(fresh, tmp_path):
    w = fresh
    process = start_shadow(w, tmp_path)
    host1 = w.hosts.host("host1")
    os.kill(sandbox_pid(host1), signal.SIGKILL)
    output = finished(process, tmp_path / "shadow.log")
    assert process.returncode == EXIT_GATE, output
    assert "host1" in output and "silence" in output
    assert_all_triton(w.hosts.hosts, "after the sandbox died")
    assert all(verdicts(h)[-1]["verdict"] == "fail" for h in w.hosts.hosts)
    # the restarted server comes up on triton although it died armed
    assert sandbox(host1, "up").returncode == 0
    wait_for(lambda: active_modes(host1) == {"triton"}, 120, "host1's new sandbox on triton")


def test_a_rank_killed_mid_shadow_is_named_as_the_first_to_stop(fresh, tmp_path):
    """kill -9 of rank 1 alone: the server goes down with it, rank 0 leaves shadow ("process exited"), and the
    verdict names rank 1, whose heartbeat stopped first."""
    w = fresh
    process = start_shadow(w, tmp_path)
    host1 = w.hosts.host("host1")
    rank1 = next(beat for beat in heartbeats(host1) if beat and beat["rank"] == 1)
    os.kill(rank1["pid"], signal.SIGKILL)
    output = finished(process, tmp_path / "shadow.log")
    assert process.returncode == EXIT_GATE, output
    first = verdicts(host1)[-1]["reason"].split("; ")[0]
    assert first.startswith("first to stop: host1 rank 1 (last heartbeat"), output
    assert_all_triton(w.hosts.hosts, "after rank 1 died")


@pytest.mark.parametrize(
    ("fault", "gate"), [("divergence:layer=3:rel=0.2", "rel_l2_max"), ("nan:layer=3", "nonfinite")]
)
def test_injected_fault_in_the_custom_path_is_caught_and_rolled_back(fresh, tmp_path, fault, gate):
    w = fresh
    inject(w.hosts.host("host2"), fault)
    result = w.cli(*shadow(w, 2.0))
    assert result.returncode == EXIT_GATE, result.stdout + result.stderr
    assert gate in result.stderr and "layer 3" in result.stderr
    assert_all_triton(w.hosts.hosts, f"{gate} breach")
    for host in w.hosts.hosts:
        assert "rollback" in journal_actions(host) and verdicts(host)[-1]["verdict"] == "fail"
    text = report_text(result.stderr, tmp_path)
    assert "FAILED" in text and f"{gate}: layer 3" in text


# -- operators ---------------------------------------------------------------------------------------------


def test_second_operator_is_refused_and_ctrl_c_reverts_cleanly(fresh, tmp_path):
    w = fresh
    process = start_shadow(w, tmp_path)
    for verb in (shadow(w, 1.0), ["promote", "-i", w.inventory, "--policy", w.policy]):
        refused = w.cli(*verb, operator="bob@test")
        assert refused.returncode == EXIT_LOCK, refused.stdout + refused.stderr
        assert "alice@test" in refused.stderr
    assert all(active_modes(h) == {"shadow"} for h in w.hosts.hosts), "bob's attempt disturbed alice's run"

    os.killpg(process.pid, signal.SIGINT)
    output = finished(process, tmp_path / "shadow.log")
    assert process.returncode == EXIT_GATE and "aborted" in output, output
    assert_all_triton(w.hosts.hosts, "Ctrl-C")
    for host in w.hosts.hosts:
        assert host.lock() is None
        assert verdicts(host)[-1]["outcome"] == "aborted"
        assert host.phase()["phase"] == "shadow_failed"


def test_regression_after_promote_rolls_the_canary_back_and_stops(fresh, tmp_path):
    w = fresh
    assert w.cli(*shadow(w, 0.15)).returncode == 0
    log = tmp_path / "promote.log"
    process = w.cli.start(
        "promote", "-i", w.inventory, "--policy", w.policy, "--lease-ttl", LEASE_TTL_S, "--watch-minutes", 2, log=log
    )
    host1, host2 = w.hosts.host("host1"), w.hosts.host("host2")
    wait_for(lambda: active_modes(host1) == {"custom"} or process.poll() is not None, 60, "host1 on custom")
    os.kill(sandbox_pid(host1), signal.SIGKILL)  # the canary's server dies under the custom kernel
    output = finished(process, log)
    assert process.returncode == EXIT_GATE, output
    assert "host1" in output and "rolled back" in output
    assert host1.control()["mode"] == "triton" and host1.phase()["phase"] == "rolled_back"
    assert "promote_rolled_back" in journal_actions(host1)
    # the rollout stopped at the canary: host2 was never flipped
    assert host2.control()["mode"] == "triton" and host2.phase()["phase"] == "shadow_passed"
    assert journal_actions(host2)[-1] == "shadow_end"


def test_promote_of_a_different_release_is_refused(fresh, other_release):
    w = fresh
    assert w.cli(*shadow(w, 0.15)).returncode == 0
    w.stage(other_release)
    result = w.cli("promote", "-i", w.inventory, "--policy", w.policy)
    assert result.returncode == EXIT_PHASE, result.stdout + result.stderr
    assert "has not passed shadow" in result.stderr and other_release.name in result.stderr
    assert all(h.control()["mode"] == "triton" for h in w.hosts.hosts)


@pytest.fixture
def other_release(world: World) -> Path:
    """A second real release (another arch set, so another release id) in the same releases dir."""
    result = world.cli("--json", "build", "--arch", "sm_120", "--out", world.release.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    built = Path(json.loads(result.stdout)["path"])
    assert built.name != world.release.name
    return built
