"""`run_promote` end to end on a local host whose ranks run the real plugin runtime: a promote without a shadow
baseline says what the watch cannot check, a failure recording the promotion rolls the host back, and a rank back
on another serving stack after the promote runs triton."""

import json
import re
import time

import pytest
import yaml

from checks.policy import load_policy
from cutover.config import Inventory, Settings
from cutover.errors import GateFailedError, PhaseError
from cutover.hostprotocol.hostlayout import read_heartbeat
from cutover.workflow.observe import HostLink
from cutover.workflow.promote import PromoteOptions, plan_promotion, run_promote, unchecked_watch_checks
from cutover.workflow.report import write_report
from cutover.workflow.runstore import RunStore, run_meta

from .hostfiles import local_host, write_control, write_phase, write_verdict
from .serving import LocalServer, MetricsFront

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


def heartbeat_metrics(host) -> str:
    """/metrics of a server counting the verify steps its ranks' heartbeats count, as the sandbox server renders
    them."""
    beats = [read_heartbeat(host.paths.heartbeat(rank)) for rank in range(host.tp_size)]
    steps = sum(beat.counters.get("verify_steps", 0) for beat in beats)
    return f"cutover_verify_steps_total {steps}\ncutover_errors_total 0\ncutover_nonfinite_total 0\n"


SGLANG_METRICS = "sglang:num_running_reqs 3\n"  # SGLang's own /metrics: no cutover_* series


@pytest.mark.slow  # `cutover promote` with a live watch, twice
@pytest.mark.parametrize("exports_cutover_series", [True, False], ids=["sandbox-metrics", "sglang-metrics"])
def test_promote_shows_the_watch_countdown_and_every_probe_in_its_output(cli, tmp_path, exports_cutover_series):
    """`cutover promote` in a log: one line per probe with the countdown, health, the verify rate against the
    shadow baseline and its rollback floor, new error counts and the lease. A server exporting no cutover_*
    series (SGLang's) gets the verify rate, before the flip and in the watch, from the ranks' heartbeats."""
    host = local_host(tmp_path, "h1")
    write_phase(host, "shadow_passed", run_id=RUN)
    write_control(host)
    server = LocalServer(host, traffic=True)
    front = MetricsFront(lambda: heartbeat_metrics(host) if exports_cutover_series else SGLANG_METRICS)
    try:
        write_verdict(host, RUN, baseline={"verify_rate": 0.01}, stacks=server.stacks)
        inventory = tmp_path / "inventory.yml"
        served = {**host.vars, "serving_port": front.port, "serving_restart_command": "true"}
        inventory.write_text(yaml.safe_dump({"all": {"hosts": {"h1": served}}}))
        policy = tmp_path / "policy.yml"
        # the rate gate has its own tests: here a probe window without a new verify step must not end the watch
        policy.write_text("promote:\n  probe_interval_s: 0.5\n  min_verify_rate_ratio: 0\n")
        store = RunStore(tmp_path / "reports", RUN)  # the shadow run, kept on this machine
        store.save_run(run_meta(RUN, "rel-a", {"h1": 1}, time.time() - 60, load_policy(), 1, ["reference (no GPU)"]))
        result = cli("promote", "-i", inventory, "--policy", policy, "--watch-minutes", "0.05", "--lease-ttl", "6",
                     "--reports-dir", tmp_path / "reports")
    finally:
        front.stop()
        server.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    ticks = [line for line in result.stdout.splitlines() if line.startswith("h1: watch ")]
    assert len(ticks) >= 5, result.stdout
    assert ticks[0].startswith("h1: watch 0:00 of 0:03, 0:03 left | health ok, failed in a row 0/3 | verify rate - "
                               "vs shadow 0.01/s (rollback below 0.00) | new errors -, new non-finite - (allowed 0) "
                               "| lease 6 s left")
    pattern = re.compile(r"h1: watch 0:0\d of 0:03, 0:0\d left \| health ok, failed in a row 0/3 \| verify rate "
                         r"(\d+\.\d\d)/s vs shadow 0\.01/s \(rollback below 0\.00\) \| new errors 0, new non-finite 0 "
                         r"\(allowed 0\) \| lease \d s left")
    rated = [pattern.fullmatch(line) for line in ticks[3:]]
    assert all(rated), ticks
    assert all(float(match.group(1)) > 0 for match in rated)
    assert "h1: promoted (custom, leaseless) with release rel-a" in result.stdout
    before = re.search(r"^h1: verify steps/s on Triton before the flip: (\d+\.\d\d) \(shadow baseline 0\.01\)$",
                       result.stdout, re.MULTILINE)
    assert before and float(before.group(1)) > 0, result.stdout

    report = write_report(store)  # the shadow run's report covers the watch that relied on it
    text = report.markdown.read_text()
    assert "## Promote watch (after this run passed)" in text
    assert "| h1 | promoted: watch passed | 3 of 3 s | 0 | 0 | 0 |" in text, text
    verify = r"\| h1 \| verify steps/s \| \d+(\.\d+)? \| 0\.01 \| \d+(\.\d+)? \| [+-]\d+ % \|"
    assert re.search(verify, text), text
    # this server exposes neither accept length nor generated tokens: "-" on every side of the flip, never 0
    assert "| h1 | accept length | - | - | - | - |" in text and "| h1 | tokens/s | - | - | - | - |" in text
    assert "promote_watch.png" in {path.name for path in report.plots}
