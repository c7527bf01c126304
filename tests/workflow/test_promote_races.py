"""Promote against what other people do to a host meanwhile, on local hosts whose ranks run the real plugin
runtime: an on-call `cutover rollback` is never overwritten (neither by the leaseless flip at the end of a watch
nor by a later host's flip planned minutes before), a host checked at the start is checked again before its turn,
Ctrl-C during the rollback of a stopped promote cannot cut that rollback short, and a stall late in a watch is
not averaged away."""

import json
import os
import signal
import time

import pytest

from checks.policy import load_policy
from cutover.config import Inventory, Settings
from cutover.errors import GateFailedError, PhaseError
from cutover.hoststate import HostState
from cutover.rollback import rollback_hosts
from cutover.transport import LocalTransport
from cutover.workflow import promote as promote_module
from cutover.workflow.observe import RankTracker
from cutover.workflow.probes import ServerSample
from cutover.workflow.promote import PromoteOptions, find_regression, run_promote

from .hostfiles import local_host, write_control, write_phase, write_verdict
from .serving import LocalServer

SETTINGS = Settings(operator="tester@here", ack_timeout_s=5.0)
ONCALL = Settings(operator="oncall@elsewhere", ack_timeout_s=5.0)
RUN = "20261129T090000Z-aaaaaa"


@pytest.fixture
def serving_hosts(tmp_path):
    """serving_hosts(*names): hosts after a passed shadow of rel-a, their ranks running (stopped at the end)."""
    servers = []

    def make(*names):
        hosts = []
        for name in names:
            host = local_host(tmp_path, name)
            write_phase(host, "shadow_passed", run_id=RUN)
            write_control(host)
            servers.append(LocalServer(host, traffic=False))
            write_verdict(host, RUN, baseline={"verify_rate": 7.0, "accept_length": 3.1}, stacks=servers[-1].stacks)
            hosts.append(host)
        return hosts

    yield make
    for server in servers:
        server.stop()


def options(tmp_path) -> PromoteOptions:
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text("promote:\n  probe_interval_s: 0.2\n  max_failed_probes: 1000\n")
    return PromoteOptions(policy=load_policy(policy_file), watch_minutes=0.02, lease_ttl_s=5.0)


def control(host) -> dict:
    return json.loads(open(host.paths.control).read())


def actions(host) -> list[str]:
    if not os.path.exists(host.paths.journal):
        return []
    return [json.loads(line)["action"] for line in open(host.paths.journal)]


def test_a_rollback_right_after_the_watch_is_not_overwritten_by_the_leaseless_flip(serving_hosts, tmp_path,
                                                                                   monkeypatch):
    """On-call's rollback wrote triton after the watch's last renewal and before promote's leaseless flip (its
    phase comes only after every rank acknowledged): the flip builds on the watched generation or not at all."""
    [host] = serving_hosts("h1")
    watch = promote_module._watch

    def watch_then_oncall_flips_to_triton(*args, **kwargs):
        watch(*args, **kwargs)
        HostState(host, LocalTransport(host.name), ONCALL).set_mode("triton", reason="pager: bad answers")

    monkeypatch.setattr(promote_module, "_watch", watch_then_oncall_flips_to_triton)

    with pytest.raises(GateFailedError, match="someone else changed the mode") as stopped:
        run_promote(Inventory(tmp_path / "inventory.yml", [host]), [host], SETTINGS, options(tmp_path))

    assert "rolled back to Triton" in stopped.value.message
    assert control(host)["mode"] == "triton" and control(host)["lease_expires_at"] is None
    assert "promoted" not in actions(host) and actions(host)[-1] == "promote_rolled_back"


def test_a_later_host_rolled_back_during_the_canarys_watch_is_not_flipped(serving_hosts, tmp_path):
    canary, second = serving_hosts("h1", "h2")
    inventory = Inventory(tmp_path / "inventory.yml", [canary, second])

    def oncall_rolls_back_h2(message):
        if message.startswith("h1: custom kernel live"):
            [result] = rollback_hosts(inventory, [second], ONCALL, reason="on-call: h2 stays on triton")
            assert result.ok, result.messages

    with pytest.raises(PhaseError, match="promote stopped before h2, nothing changed there: host h2: phase is "
                                         "rolled_back"):
        run_promote(inventory, [canary, second], SETTINGS, options(tmp_path), on_event=oncall_rolls_back_h2)

    assert control(canary)["mode"] == "custom" and control(canary)["lease_expires_at"] is None
    assert control(second)["mode"] == "triton" and "promote_start" not in actions(second)


def test_a_later_host_whose_control_moved_since_the_check_is_not_flipped(serving_hosts, tmp_path):
    """The rollback's flip landed, its phase not yet (it writes the phase after every rank acknowledged)."""
    canary, second = serving_hosts("h1", "h2")
    inventory = Inventory(tmp_path / "inventory.yml", [canary, second])
    before = control(second)["generation"]

    def flip_h2_to_triton(message):
        if message.startswith("h1: custom kernel live"):
            HostState(second, LocalTransport(second.name), ONCALL).set_mode("triton", reason="on-call")

    with pytest.raises(PhaseError, match=f"host h2: control.json moved from generation {before} to {before + 1} "
                                         "since promote checked it"):
        run_promote(inventory, [canary, second], SETTINGS, options(tmp_path), on_event=flip_h2_to_triton)

    assert control(second)["mode"] == "triton" and "promote_start" not in actions(second)


def test_a_rank_on_another_release_during_the_watch_is_a_regression():
    tracker = RankTracker("h1", 0, 1, last_written_at=1.0, pid=1, pids=[1], mode_active="custom", release_id="rel-b")
    series = [ServerSample(at=0, healthy=True)]
    policy = load_policy(None)
    assert find_regression(policy, {}, [tracker], series, 0, series[0], "rel-a") == (
        "rank 0 runs release rel-b, not the promoted rel-a")
    assert find_regression(policy, {}, [tracker], series, 0, series[0], "rel-b") is None


def test_a_stall_late_in_the_watch_is_not_averaged_away():
    """Ten minutes of probes every 5 s at the baseline rate, then none for the last 4.5 minutes: over the whole
    window the rate is still 55 % of the baseline; over the recent window it is 0."""
    policy = load_policy(None)
    samples = [ServerSample(at=5.0 * i, healthy=True, verify_steps_total=100.0 * 5 * min(i, 66), errors_total=0.0,
                            nonfinite_total=0.0) for i in range(121)]
    tracker = RankTracker("h1", 0, 1, last_written_at=1.0, pid=1, pids=[1], mode_active="custom")
    found = find_regression(policy, {"verify_rate": 100.0}, [tracker], samples, 0, samples[-1])
    assert found is not None and found.startswith("verify steps/s fell to 0.00")


def test_ctrl_c_again_during_the_rollback_of_a_stopped_promote_does_not_cut_it_short(serving_hosts, tmp_path,
                                                                                      monkeypatch):
    """Ctrl-C once just after the leaseless flip, once more as the rollback starts (a signal, as a terminal sends
    it): the rollback finishes, the host is back on Triton, and the outcome is an error naming it (exit 7)."""
    [host] = serving_hosts("h1")
    wait_for_ack, acquire_lock = HostState.wait_for_ack, HostState.acquire_lock

    def interrupted_after_the_leaseless_flip(self, generation, *args, **kwargs):
        result = wait_for_ack(self, generation, *args, **kwargs)
        current = self.read_control()
        if current.mode == "custom" and current.lease_expires_at is None:
            raise KeyboardInterrupt
        return result

    def pressed_again(self, action, ttl_s=None):
        if action == "rollback":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # a handler would run here, between bytecodes
        return acquire_lock(self, action, ttl_s)

    monkeypatch.setattr(HostState, "wait_for_ack", interrupted_after_the_leaseless_flip)
    monkeypatch.setattr(HostState, "acquire_lock", pressed_again)

    with pytest.raises(GateFailedError, match="host h1: stopped by the operator \\(Ctrl-C\\); rolled back to Triton"):
        run_promote(Inventory(tmp_path / "inventory.yml", [host]), [host], SETTINGS, options(tmp_path))

    assert control(host)["mode"] == "triton"
    assert actions(host)[-1] == "promote_rolled_back"


def test_a_later_hosts_lock_lost_during_the_watch_stops_before_it_and_keeps_the_canary(serving_hosts, tmp_path):
    """Another operator takes h2 meanwhile: the canary's watch goes on (its own lock holds), and the rollout
    stops before h2 with nothing changed there, instead of rolling the healthy canary back."""
    canary, second = serving_hosts("h1", "h2")
    inventory = Inventory(tmp_path / "inventory.yml", [canary, second])
    said = []

    def oncall_takes_h2(message):
        said.append(message)
        if message.startswith("h1: custom kernel live"):
            os.unlink(second.paths.lock)
            HostState(second, LocalTransport(second.name), ONCALL).acquire_lock("rollback", 600)

    slower = options(tmp_path)
    slower.watch_minutes = 0.06  # long enough for the lease and lock renewals during the watch
    with pytest.raises(PhaseError, match="promote stopped before h2, nothing changed there: its lock could not be "
                                         "renewed: .*oncall@elsewhere"):
        run_promote(inventory, [canary, second], SETTINGS, slower, on_event=oncall_takes_h2)

    assert any(m.startswith("h2: its lock could not be renewed now") for m in said), said  # during the watch
    assert control(canary)["mode"] == "custom" and control(canary)["lease_expires_at"] is None
    assert "promoted" in actions(canary)
    assert control(second)["mode"] == "triton" and "promote_start" not in actions(second)
