"""`run_shadow` end to end on local hosts whose ranks run the real plugin runtime: an unread host, the truth
anchor with and without samples, and a failure while entering the run."""

import json

import pytest

from checks.policy import load_policy
from cutover.config import Inventory, Settings
from cutover.errors import GateFailedError, HostError
from cutover.transport import LocalTransport
from cutover.workflow import observe
from cutover.workflow.runstore import RunStore
from cutover.workflow.shadow import ShadowOptions, run_shadow

from .hostfiles import local_host, write_control, write_phase
from .serving import LocalServer

SETTINGS = Settings(operator="tester@here", ack_timeout_s=5.0)
POLICY = "promote:\n  probe_interval_s: 0.5\nshadow:\n  min_duration_s: 1\n  min_compared_calls: 4\n"
NO_TRUTH_NEEDED = "  truth_anchor_min_samples: 0\n"


@pytest.fixture
def world(tmp_path):
    """world(traffic={"h1": True, "h2": False}, audit_max_bytes=None, policy_extra=<one truth sample needed>,
    **ShadowOptions fields)
    -> (hosts, run); run(on_progress=None) runs the shadow; world.servers: the hosts' LocalServers, in order"""
    servers = []

    def make(traffic, audit_max_bytes=None, policy_extra="  truth_anchor_min_samples: 1\n", **option_fields):
        hosts = []
        for name, busy in traffic.items():
            host = local_host(tmp_path, name)
            write_phase(host, "staged")
            write_control(host)
            servers.append(LocalServer(host, traffic=busy, audit_max_bytes=audit_max_bytes))
            hosts.append(host)
        policy_file = tmp_path / "policy.yml"
        policy_file.write_text(POLICY + policy_extra)
        fields = dict(duration_s=2.0, lease_ttl_s=5.0, poll_s=0.2, reports_dir=str(tmp_path / "reports"))
        options = ShadowOptions(policy=load_policy(policy_file), **{**fields, **option_fields})
        inventory = Inventory(tmp_path / "inventory.yml", hosts)
        return hosts, lambda on_progress=None: run_shadow(inventory, hosts, SETTINGS, options, on_progress)

    make.servers = servers
    yield make
    for server in servers:
        server.stop()


def phase_of(host):
    return json.loads(open(host.paths.phase).read())["phase"]


def mode_of(host):
    return json.loads(open(host.paths.control).read())["mode"]


def journal_actions(host):
    try:
        return [json.loads(line)["action"] for line in open(host.paths.journal)]
    except FileNotFoundError:
        return []


def test_a_host_no_verify_call_reached_fails_the_run_by_name(world):
    hosts, run = world({"h1": True, "h2": False})
    with pytest.raises(GateFailedError) as caught:
        run()
    assert "host h2: no stats record of this run was read" in str(caught.value)
    assert [(phase_of(h), mode_of(h)) for h in hosts] == [("shadow_failed", "triton")] * 2


def test_a_run_without_truth_samples_passes_with_the_anchor_labelled_not_checked(world):
    hosts, run = world({"h1": True}, audit_max_bytes=0, policy_extra=NO_TRUTH_NEEDED)
    outcome = run()
    assert outcome.record.passed and outcome.record.totals["truth_samples"] == 0
    assert any(r.startswith("truth_anchor: NOT CHECKED (not gating)") for r in outcome.record.reasons)


def test_required_truth_samples_fail_a_run_that_has_none(world):
    hosts, run = world({"h1": True}, audit_max_bytes=0, policy_extra="  truth_anchor_min_samples: 1\n")
    with pytest.raises(GateFailedError) as caught:
        run()
    assert "0 float64-anchored samples, policy needs at least 1" in str(caught.value)
    assert phase_of(hosts[0]) == "shadow_failed"


def test_required_truth_samples_pass_a_run_that_has_them(world):
    hosts, run = world({"h1": True}, policy_extra="  truth_anchor_min_samples: 1\n")
    outcome = run()
    assert outcome.record.passed and outcome.record.totals["truth_samples"] >= 1
    assert phase_of(hosts[0]) == "shadow_passed"


class PhaseWriteFails(LocalTransport):
    """h2's link loses its connection whenever it writes the phase file (SSH dropping at that moment)."""

    def write_atomic(self, path, text):
        if path.endswith("phase.json"):
            raise HostError(f"host {self.host}: connection lost")
        super().write_atomic(path, text)


def test_a_later_host_failing_to_enter_leaves_the_hosts_entered_rolled_back(world, monkeypatch):
    hosts, run = world({"h1": True, "h2": True})
    h1, h2 = hosts
    assert h2.paths.phase.endswith("phase.json")
    real_open = observe.open_transport
    monkeypatch.setattr(
        observe, "open_transport", lambda host: PhaseWriteFails(host.name) if host.name == "h2" else real_open(host)
    )
    with pytest.raises(HostError, match="host h2: connection lost"):
        run()
    assert (phase_of(h1), mode_of(h1)) == ("rolled_back", "triton")
    assert journal_actions(h1)[-3:] == ["shadow_start", "rollback", "shadow_end"]
    assert (phase_of(h2), mode_of(h2)) == ("staged", "triton")
    assert "shadow_start" not in journal_actions(h2)


def test_a_run_records_each_hosts_clock_offset_for_the_reports_time_axis(world, tmp_path):
    hosts, run = world({"h1": True, "h2": True})
    outcome = run()
    meta = RunStore(tmp_path / "reports", outcome.record.run_id).load_run()
    assert meta["clock_offsets_s"] == {"h1": 0.0, "h2": 0.0}  # local hosts: this machine's clock
