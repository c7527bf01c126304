"""How a shadow run ends when something other than a gate goes wrong, on the local hosts of test_shadow_run
(every rank runs the real plugin runtime): a host whose ordinary return to Triton fails at the end, a host
rolled back by on-call just before the end, lease renewals refused by a busy control write lock; and the serving
stack the verdict records."""

import contextlib
import json
import os
import threading
import time

import pytest

from checks.policy import load_policy
from cutover.hostprotocol import controlwrite
from cutover.cli.shadow import passed_lines
from cutover.errors import GateFailedError, HostError, PhaseError
from cutover.hostprotocol.hostlayout import read_heartbeat
from cutover.rollback import rollback_hosts
from cutover.transport import LocalTransport
from cutover.workflow import observe, shadow
from cutover.workflow.observe import HostLink
from cutover.workflow.promote import plan_promotion

from .test_shadow_run import SETTINGS, journal_actions, mode_of, phase_of, world  # noqa: F401 - world: a fixture


class TritonFlipDrops(LocalTransport):
    """The run's own connection to the host drops whenever it writes a control record asking for Triton: only
    the end-of-run flip does that (arming and renewals write shadow). The rollback path opens its own
    connection (cutover.rollback.open_transport), which works, as a fresh SSH session after a dropped one."""

    def write_atomic(self, path, text):
        if path.endswith("/control.json") and json.loads(text)["mode"] == "triton":
            raise HostError(f"host {self.host}: connection lost")
        super().write_atomic(path, text)


def test_a_passed_run_names_the_host_whose_return_to_triton_needed_the_rollback_path(world, monkeypatch):
    hosts, run = world({"h1": True, "h2": True})
    h1, h2 = hosts
    real_open = observe.open_transport
    monkeypatch.setattr(
        observe, "open_transport", lambda host: TritonFlipDrops(host.name) if host.name == "h2" else real_open(host)
    )
    outcome = run()

    assert outcome.record.passed  # the gates passed on both hosts
    assert outcome.rolled_back == {"h2": "host h2: connection lost"}
    note = (
        "rollback path: host h2: its ordinary return to Triton failed (host h2: connection lost); the rollback "
        "path confirmed Triton, so its phase is rolled_back and `cutover promote` refuses it until a new "
        "`cutover shadow` run passes there"
    )
    assert outcome.warnings == [note] and outcome.record.reasons[0] == note
    assert [(phase_of(h), mode_of(h)) for h in hosts] == [("shadow_passed", "triton"), ("rolled_back", "triton")]
    assert journal_actions(h2)[-2:] == ["rollback", "shadow_end"]
    entries = [json.loads(line) for line in open(h2.paths.journal)]
    assert entries[-1]["returned_through_rollback"] == "host h2: connection lost"
    assert entries[-2]["reason"].endswith("finished: the ordinary return to Triton failed there")  # not "failed"
    verdict = json.loads(open(h2.paths.verdict(outcome.record.run_id)).read())
    assert verdict["reason"].startswith("rollback path: host h2:")

    lines = passed_lines(outcome, "cutover shadow --minutes 2")
    assert lines[0].startswith(f"shadow run {outcome.record.run_id} PASSED")
    warning = lines.index(
        "WARNING: the gates passed, but h2 cannot be promoted from this run: returned to Triton only through the "
        "rollback path (phase rolled_back)"
    )
    assert lines[warning + 1:] == [
        f"  {note}",
        "  run: cutover shadow --minutes 2 --limit h2",
        "  or promote the hosts that passed alone: cutover promote --limit h1",
        f"report: {outcome.report.markdown}",
    ]
    assert f"  {note}" not in lines[:warning]  # said once, in the block


class BusyControlWriter(threading.Thread):
    """Another writer that keeps <state_dir>/control.json.lock taken (fresh: its time is refreshed well within
    STALE_S) from the moment shadow is armed until the rollback takes the host lock."""

    def __init__(self, host):
        super().__init__(daemon=True)
        self.host = host
        self.done = threading.Event()

    def run(self):
        paths = self.host.paths
        deadline = time.monotonic() + 30
        while "shadow_armed" not in journal_actions(self.host) and time.monotonic() < deadline:
            time.sleep(0.02)
        while time.monotonic() < deadline and not self.done.is_set():
            lock = {"holder": "bob@elsewhere", "token": "t", "at": time.time(), "pid": 4321, "client": "ws-bob"}
            with open(paths.control_lock + ".tmp", "w") as handle:
                handle.write(json.dumps(lock))
            os.replace(paths.control_lock + ".tmp", paths.control_lock)
            if self._rollback_started():
                break
            time.sleep(0.02)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(paths.control_lock)

    def _rollback_started(self):
        try:
            return json.loads(open(self.host.paths.lock).read())["action"] == "rollback"
        except (OSError, ValueError, KeyError):
            return False


def test_a_lease_lost_to_a_busy_control_write_lock_names_the_lock(world, monkeypatch):
    monkeypatch.setattr(controlwrite, "WAIT_S", 1.0)  # a writer gives up after 1 s instead of 15 s (test time)
    hosts, run = world({"h1": True}, duration_s=30.0, lease_ttl_s=2.0)
    (h1,) = hosts
    writer = BusyControlWriter(h1)
    writer.start()
    progress = []
    try:
        with pytest.raises(GateFailedError):
            run(on_progress=progress.append)
    finally:
        writer.done.set()
        writer.join()

    (verdict,) = os.listdir(h1.paths.verdicts)
    reasons = json.loads(open(os.path.join(h1.paths.verdicts, verdict)).read())["reasons"]
    assert any("expired" in r for r in reasons), reasons  # the gate: the rank fell back when the lease lapsed
    lease = [r for r in reasons if r.startswith("lease: host h1: not renewed for ")]
    assert len(lease) == 1, reasons
    assert f"host h1: {h1.paths.control_lock} stayed held by bob@elsewhere (pid 4321 on ws-bob" in lease[0]
    assert lease[0].endswith("for 1 s: control.json was not changed")
    noted = [p.host_errors["h1"] for p in progress if "h1" in p.host_errors]
    assert noted and noted[-1].startswith("lease: host h1: not renewed for ") and "control.json.lock" in noted[-1]
    assert (phase_of(h1), mode_of(h1)) == ("rolled_back", "triton")


@pytest.mark.slow  # waits out the return-to-Triton deadline
def test_a_rank_that_never_returns_to_triton_is_not_reported_back_on_triton(world, monkeypatch):
    hosts, run = world({"h1": True, "h2": True})
    h1, h2 = hosts
    release = threading.Event()
    stuck = world.servers[1].runtimes[0]  # h2's rank 0: its control thread hangs on the way to Triton
    real_apply = stuck.control._apply

    def apply_hanging_on_triton(decision, new_generation):
        if decision.mode == "triton" and stuck.control.mode_active == "shadow":
            release.wait(30)
        real_apply(decision, new_generation)

    monkeypatch.setattr(stuck.control, "_apply", apply_hanging_on_triton)
    try:
        with pytest.raises(GateFailedError) as caught:
            run()
    finally:
        release.set()
    message = str(caught.value)
    assert "every target is back on Triton" not in message
    assert "Triton is NOT confirmed on every target (the rollback lines say where): the lease returns those ranks " \
           "to Triton within 5 s; check with `cutover status`." in message
    assert message.startswith(f"shadow run {os.listdir(h1.paths.verdicts)[0][:-5]} failed: rollback: host h2: ")
    assert "rollback: host h1" not in message
    assert (phase_of(h1), phase_of(h2)) == ("shadow_failed", "rolled_back")  # one verdict for the run


def test_a_passed_run_names_the_host_on_call_rolled_back_between_its_last_tick_and_its_end(world, monkeypatch):
    """No gate sees a rollback after the last tick: the run still passes on its data, but says the host cannot be
    promoted from it (its phase is rolled_back), instead of a bare PASSED."""
    hosts, run = world({"h1": True, "h2": True})
    h1, h2 = hosts
    real_return = shadow._ShadowRun._return_to_triton

    def on_call_rolls_back_h2_first(self, why):
        rollback_hosts(self.inventory, [h2], self.settings, reason="on-call: p99 latency alarm")
        return real_return(self, why)

    monkeypatch.setattr(shadow._ShadowRun, "_return_to_triton", on_call_rolls_back_h2_first)
    outcome = run()

    assert outcome.record.passed and outcome.rolled_back == {}
    assert outcome.moved == {"h2": "rolled_back (set by tester@here: on-call: p99 latency alarm)"}
    note = ("phase moved: host h2: its phase became rolled_back (set by tester@here: on-call: p99 latency alarm) "
            "before the run ended, so the run did not record shadow_passed there and `cutover promote` refuses "
            "it until a new `cutover shadow` run passes there")
    assert outcome.warnings == [note] and outcome.record.reasons[0] == note
    assert [phase_of(h) for h in hosts] == ["shadow_passed", "rolled_back"]
    lines = passed_lines(outcome, "cutover shadow --minutes 2")
    warning = next(i for i, line in enumerate(lines) if line.startswith("WARNING:"))
    assert "h2 cannot be promoted from this run" in lines[warning] and f"  {note}" in lines[warning + 1:]
    assert "  or promote the hosts that passed alone: cutover promote --limit h1" in lines


def test_a_rollback_after_the_end_check_still_warns(world, monkeypatch):
    """On-call's rollback lands after the run read the phases, before it records the outcome: the run leaves the
    phase as on-call set it and its output still names the host (the verdict's reasons cannot any more)."""
    hosts, run = world({"h1": True, "h2": True})
    h1, h2 = hosts
    real_moved = shadow._ShadowRun._phases_moved

    def read_then_on_call_rolls_back(self):
        moved = real_moved(self)
        rollback_hosts(self.inventory, [h2], self.settings, reason="on-call: late")
        return moved

    monkeypatch.setattr(shadow._ShadowRun, "_phases_moved", read_then_on_call_rolls_back)
    outcome = run()
    assert outcome.record.passed and outcome.moved == {"h2": "rolled_back (set by tester@here: on-call: late)"}
    assert [phase_of(h) for h in hosts] == ["shadow_passed", "rolled_back"]
    assert not any(reason.startswith("phase moved") for reason in outcome.record.reasons)
    assert any(line.startswith("WARNING: the gates passed, but h2 cannot be promoted")
               for line in passed_lines(outcome, "cutover shadow --minutes 2"))


def test_the_verdict_records_the_serving_stack_promote_then_holds_the_host_to(world, tmp_path):
    hosts, run = world({"h1": True})
    (h1,) = hosts
    outcome = run()
    runtimes = world.servers[0].runtimes
    assert outcome.record.stacks == {"h1": [runtimes[0].stack]} and runtimes[0].stack["gpu"] == "none (cpu)"
    stored = json.loads(open(h1.paths.verdict(outcome.record.run_id)).read())
    assert stored["stacks"] == {"h1": [runtimes[0].stack]}

    policy = load_policy(tmp_path / "policy.yml")  # the run's own: promote's may be no looser
    [planned] = plan_promotion([HostLink(h1, SETTINGS)], False, policy)
    assert planned.action == "promote"

    for runtime in runtimes:  # SGLang upgraded under the same release, ranks restarted
        runtime.control.state.stack = {**runtime.stack, "sglang": "0.5.99"}
    deadline = time.monotonic() + 5
    while any(read_heartbeat(h1.paths.heartbeat(r.rank)).stack["sglang"] != "0.5.99" for r in runtimes):
        assert time.monotonic() < deadline, "the ranks' heartbeats never reported the new stack"
        time.sleep(0.02)
    with pytest.raises(PhaseError, match=r"does not cover what the host serves with now: .*sglang \S+ -> 0\.5\.99"):
        plan_promotion([HostLink(h1, SETTINGS)], False, policy)
