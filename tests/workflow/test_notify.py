"""Notifications of workflow events to a local HTTP receiver: every event of a shadow-promote-rollback run arrives
at a JSON webhook and a Slack-compatible one; retries; an unreachable receiver never holds a rollback back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from checks.policy import load_policy
from cutover import notify
from cutover.config import Inventory, load_settings
from cutover.errors import ConfigError, GateFailedError
from cutover.rollback import rollback_hosts
from cutover.workflow.promote import PromoteOptions, run_promote
from cutover.workflow.shadow import ShadowOptions, run_shadow

from receiver import Receiver

from .hostfiles import local_host, write_control, write_phase
from .serving import LocalServer
from .test_promote_run import host  # noqa: F401 (a fixture: h1 after a passed shadow, its ranks running)

POLICY = "promote:\n  probe_interval_s: 0.2\n  max_failed_probes: 1000\nshadow:\n  min_duration_s: 1\n" \
         "  min_compared_calls: 4\n  truth_anchor_min_samples: 0\n"  # a 2 s run: the anchor has its own tests


@pytest.fixture
def receiver():
    box = Receiver()
    yield box
    box.close()


@pytest.fixture
def blackhole():
    """A listening socket that never accepts: a connection opens, and no answer ever comes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def settings_with(tmp_path, targets: list[dict], timeout_s: float = 5, retries: int = 2):
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"operator": "tester@here", "ack_timeout_s": 5.0,
                                    "notify": {"targets": targets, "timeout_s": timeout_s, "retries": retries}}))
    return load_settings(str(path))


@pytest.fixture
def served(tmp_path):
    """h1, staged, its ranks running the real plugin runtime with verify traffic."""
    staged = local_host(tmp_path)
    write_phase(staged, "staged")
    write_control(staged)
    server = LocalServer(staged, traffic=True)
    yield staged
    server.stop()


@pytest.mark.slow  # a whole shadow, promote and rollback
def test_every_event_of_a_shadow_promote_rollback_run_arrives(tmp_path, receiver, served):
    settings = settings_with(tmp_path, [{"kind": "webhook", "url": f"{receiver.url}/hook"},
                                        {"kind": "slack", "url": f"{receiver.url}/slack"}])
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text(POLICY)
    policy = load_policy(policy_file)
    inventory = Inventory(tmp_path / "inventory.yml", [served])
    run_shadow(inventory, [served], settings, ShadowOptions(policy=policy, duration_s=2.0, lease_ttl_s=5.0,
                                                            poll_s=0.2, reports_dir=str(tmp_path / "reports")))
    [promoted] = run_promote(inventory, [served], settings, PromoteOptions(policy=policy, watch_minutes=0.02,
                                                                          lease_ttl_s=5.0))
    assert promoted.outcome == "promoted"
    [rolled_back] = rollback_hosts(inventory, [served], settings, reason="operator rollback")
    assert rolled_back.ok
    assert notify.flush(10)
    events = receiver.events("/hook")
    assert [e["event"] for e in events] == ["shadow_start", "shadow_verdict", "promote", "rollback"]
    assert all(e["operator"] == "tester@here" and e["at"].endswith("Z") for e in events)
    assert events[1]["outcome"] == "passed" and events[2]["host"] == "h1" and events[3]["hosts"] == {"h1": True}
    slack = [e["text"] for e in receiver.events("/slack")]
    assert len(slack) == 4 and slack[1].startswith("cutover shadow_verdict: shadow run ")
    assert slack[3] == "cutover rollback: operator rollback: h1 on triton"


def test_a_failed_promote_announces_its_auto_rollback(tmp_path, receiver, host):
    """h1 after a passed shadow; the watch fails (its phase file corrupted while live) and promote rolls back."""
    settings = settings_with(tmp_path, [{"kind": "webhook", "url": f"{receiver.url}/hook"}])
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text(POLICY)
    inventory = Inventory(tmp_path / "inventory.yml", [host])
    options = PromoteOptions(policy=load_policy(policy_file), watch_minutes=0.05, lease_ttl_s=5.0)

    def corrupt_phase_once_live(event):
        if "watching" in event:
            open(host.paths.phase, "w").write("{not json")

    with pytest.raises(GateFailedError, match="rolled back to Triton"):
        run_promote(inventory, [host], settings, options, on_event=corrupt_phase_once_live)
    assert notify.flush(10)
    [event] = receiver.events("/hook")
    assert event["event"] == "auto_rollback" and event["reason"].startswith("promote stopped: ")
    assert event["hosts"] == {"h1": True}


def test_an_unreachable_receiver_never_holds_a_rollback_back(tmp_path, blackhole, served):
    """The announcement waits on a receiver that never answers; the rollback is done before it is even tried,
    and waiting for the queue is bounded by the timeout."""
    settings = settings_with(tmp_path, [{"kind": "webhook", "url": blackhole}], timeout_s=2, retries=0)
    inventory = Inventory(tmp_path / "inventory.yml", [served])
    [result] = rollback_hosts(inventory, [served], settings, reason="operator rollback")
    assert result.ok and json.loads(open(served.paths.control).read())["mode"] == "triton"
    assert not notify.flush(0)  # returned with the announcement still queued: the rollback did not wait for it
    started = time.monotonic()
    assert not notify.flush(1.0)
    assert time.monotonic() - started < 1.5
    assert notify.flush(5)  # the attempt gave up after its 2 s timeout


def test_an_exiting_process_waits_at_most_the_timeout(blackhole):
    script = textwrap.dedent(f"""
        import logging, time
        logging.basicConfig()
        from cutover import notify
        config = notify.NotifyConfig((notify.Target("webhook", {blackhole!r}),), timeout_s=1.0, retries=5)
        notify.send(config, "rollback", "test")
        print(time.monotonic(), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    exited = time.monotonic()
    assert done.returncode == 0, done.stderr
    assert exited - float(done.stdout) < 1.0 + 1.0  # the timeout, plus interpreter teardown
    assert "1 notification(s) not delivered before exit" in done.stderr


def test_retries_deliver_after_server_errors_and_stop_at_a_refusal(tmp_path):
    flaky = Receiver(fail_first=2, status=503)
    refusing = Receiver(fail_first=10, status=400)
    try:
        config = notify.NotifyConfig((notify.Target("webhook", flaky.url), notify.Target("slack", refusing.url)),
                                     timeout_s=2, retries=2)
        notify.send(config, "stage", "release r1 staged: h1 staged")
        assert notify.flush(10)
        assert flaky.attempts == 3 and [b["event"] for _, b in flaky.received] == ["stage"]
        assert refusing.attempts == 1 and refusing.received == []
    finally:
        flaky.close()
        refusing.close()


@pytest.mark.parametrize(("section", "field"), [
    ({"targets": []}, "notify.targets"),
    ({"targets": [{"kind": "teams", "url": "http://x"}]}, "notify.targets[0]"),
    ({"targets": [{"kind": "slack", "url": "hooks.slack.com/x"}]}, "notify.targets[0].url"),
    ({"targets": [{"kind": "slack", "url": "http://x"}], "timeout_s": 0}, "notify.timeout_s"),
    ({"targets": [{"kind": "slack", "url": "http://x"}], "retry": 1}, "notify.retry"),
])
def test_bad_notify_sections_name_the_field(tmp_path, section, field):
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"notify": section}))
    with pytest.raises(ConfigError) as caught:
        load_settings(str(path))
    assert caught.value.message.startswith(f"{path}: field '{field}' ")
