"""`run_promote` end to end on a local host whose ranks run the real plugin runtime: a promote without a shadow
baseline says what the watch cannot check, a failure recording the promotion rolls the host back, and a rank back
on another serving stack after the promote runs triton."""

import json
import time

import pytest

from checks.policy import load_policy
from cutover.config import Inventory, Settings
from cutover.errors import GateFailedError, PhaseError
from cutover.hostprotocol.hostlayout import read_heartbeat
from cutover.workflow.observe import HostLink
from cutover.workflow.promote import PromoteOptions, plan_promotion, run_promote, unchecked_watch_checks

from .hostfiles import local_host, write_control, write_phase, write_verdict
from .serving import LocalServer

SETTINGS = Settings(operator="tester@here", ack_timeout_s=5.0)
RUN = "20261129T090000Z-aaaaaa"
NO_BASELINE = "NOT CHECKED during the watch: verify-step rate and accept length (there is no shadow baseline"


@pytest.fixture
def host(tmp_path):
    """h1 after a passed shadow of rel-a, its ranks running; /health is unreachable (port 1), so the policy
    tolerates failed probes: these tests are about the flip, the record and the rollback."""
    host = local_host(tmp_path)
    write_phase(host, "shadow_passed", run_id=RUN)
    write_control(host)
    server = LocalServer(host, traffic=False)
    write_verdict(host, RUN, baseline={"verify_rate": 7.0, "accept_length": 3.1}, stacks=server.stacks)
    yield host
    server.stop()


def promote(host, tmp_path, on_event, force=False):
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text("promote:\n  probe_interval_s: 0.2\n  max_failed_probes: 1000\n")
    options = PromoteOptions(policy=load_policy(policy_file), watch_minutes=0.02, force=force, lease_ttl_s=5.0)
    return run_promote(Inventory(tmp_path / "inventory.yml", [host]), [host], SETTINGS, options, on_event=on_event)


def state_of(host):
    control = json.loads(open(host.paths.control).read())
    phase = json.loads(open(host.paths.phase).read())["phase"]
    return control["mode"], control["lease_expires_at"] is None, phase


def journal(host):
    return [json.loads(line) for line in open(host.paths.journal)]


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ({"verify_rate": 7.0, "accept_length": 3.1}, ""),
        ({"verify_rate": 7.0, "accept_length": None}, "NOT CHECKED during the watch: accept length (the shadow "
                                                        "baseline has no value for it)"),
        ({}, NO_BASELINE + " (forced promote))"),
    ],
)
def test_unchecked_watch_checks_name_what_the_baseline_lacks(base, expected):
    assert unchecked_watch_checks(base) == expected


def test_forced_promote_without_a_baseline_says_so_in_output_journal_and_result(host, tmp_path):
    write_phase(host, "staged")
    events = []
    [result] = promote(host, tmp_path, events.append, force=True)
    assert any(NO_BASELINE in event for event in events)
    assert result.outcome == "promoted" and NO_BASELINE in result.detail
    entries = {entry["action"]: entry for entry in journal(host)}
    assert NO_BASELINE in entries["promote_start"]["unchecked"] and NO_BASELINE in entries["promoted"]["unchecked"]
    assert state_of(host) == ("custom", True, "promoted")


def test_failure_recording_the_promotion_rolls_the_host_back(host, tmp_path):
    def corrupt_phase_once_live(event):
        if "watching" in event:
            open(host.paths.phase, "w").write("{not json")

    with pytest.raises(GateFailedError) as caught:
        promote(host, tmp_path, corrupt_phase_once_live)
    assert "phase.json is corrupt" in str(caught.value) and "rolled back to Triton" in str(caught.value)
    assert state_of(host) == ("triton", True, "rolled_back")
    assert journal(host)[-1]["action"] == "promote_rolled_back"


def test_a_promoted_rank_restarted_on_another_serving_stack_runs_triton_and_promote_says_so(tmp_path):
    """promote names in control.json the stacks it approved custom on, so a rank that comes back on another one
    (SGLang upgraded, serving restarted cleanly) does not run the custom kernel unjudged."""
    host = local_host(tmp_path, "h2")
    write_phase(host, "shadow_passed", run_id=RUN)
    write_control(host)
    server = LocalServer(host, traffic=False)
    try:
        write_verdict(host, RUN, baseline={"verify_rate": 7.0, "accept_length": 3.1}, stacks=server.stacks)
        [result] = promote(host, tmp_path, lambda event: None)
        assert result.outcome == "promoted" and state_of(host) == ("custom", True, "promoted")
        assert json.loads(open(host.paths.control).read())["stacks"] == server.stacks

        for runtime in server.runtimes:
            runtime.control.state.stack = {**runtime.stack, "sglang": "0.5.99"}
        deadline = time.monotonic() + 5
        while any(read_heartbeat(host.paths.heartbeat(r.rank)).mode_active != "triton" for r in server.runtimes):
            assert time.monotonic() < deadline, "a rank kept running custom on a stack promote never approved"
            time.sleep(0.02)
        reason = read_heartbeat(host.paths.heartbeat(0)).reason
        assert reason.startswith("control.json allows custom only on the serving stack promote approved")
        with pytest.raises(PhaseError, match="host h2: promoted, but rank 0 runs triton"):
            plan_promotion([HostLink(host, SETTINGS)], False, load_policy(tmp_path / "policy.yml"))
    finally:
        server.stop()
